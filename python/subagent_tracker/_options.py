"""The keyword options of the calls that take many, each declared once for Python: a task's start
(``StartOptions``, ``ReserveOptions``), a session's settings (``SessionOptions``) and a Redis registry's
connection (``RegistryOptions``). Every signature that takes them does so as ``**options: Unpack[...]``, in
the stubs of the native classes, the protocols and the Python sessions alike. The native classes read the same
names (``keyword_options.rs`` and ``start_arguments.rs`` in the binding), a native start as keyword-only
parameters in the binding's order; tests hold each pair equal, and a start's signature to its list."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from subagent_tracker._native import CancellationToken

__all__ = ["RegistryOptions", "ReserveOptions", "SessionOptions", "StartOptions"]


class StartOptions(TypedDict, total=False):
    """The keyword arguments of ``start_subagent_task`` after ``task_id``, each optional (contract §1)."""

    #: The parent's id: a cancel of the parent reaches this task (contract §2, cascade).
    parent_id: str | None
    #: The agent's name, for listings and filters.
    agent: str | None
    #: What the task does, for listings.
    description: str | None
    #: A mapping kept with the task (JSON across processes), read-only in snapshots.
    metadata: Mapping[str, Any] | None
    #: Seconds from the start until the task is cancelled, cause ``"deadline"`` (contract §12).
    timeout: float | None
    #: The same as epoch seconds; a child's effective deadline is the earlier of its own and its parent's.
    deadline: float | None
    #: Out of its parent's reach: the parent's cascade and deadline do not pass on to it (contract §14).
    detached: bool
    #: A task group: a failing attached child cancels it, and its end cancels its pending descendants.
    structured: bool
    #: Tokens any of which, firing, cancels the task (contract §14, linked tokens).
    linked: Iterable[CancellationToken] | None


class ReserveOptions(StartOptions, total=False):
    """The keyword arguments of ``reserve_subagent_task``: a start's, and how long the reservation waits."""

    #: Seconds a reservation waits for its runner's claim before it ends `FAILED`.
    claim_timeout: float | None


class SessionOptions(TypedDict, total=False):
    """A session's settings, each optional: the keyword arguments of ``Session(session_id, ...)`` and of every
    registry's ``session(session_id, ...)`` (a session that exists keeps its own)."""

    #: Finished tasks kept, beyond which the oldest is evicted (default 10,000).
    max_finished_tasks: int | None
    #: Events each ``events()`` subscriber buffers before it gets a ``"lagged"`` event (default 4,096).
    event_buffer: int | None
    #: Seconds after its end at which a finished task is forgotten (default: never by age).
    max_finished_age: float | None
    #: Seconds a cancel made ``before_start`` waits for its task's start (default 60).
    early_cancel_ttl: float | None
    #: Progress reports each task keeps in its log (default 16).
    progress_log_size: int | None


class RegistryOptions(TypedDict, total=False):
    """A Redis registry's connection options, each optional: the keyword arguments of
    ``RedisRegistry(url, ...)`` and ``AsyncRedisRegistry.connect(url, ...)``."""

    #: This process's worker id (default: generated).
    worker_id: str | None
    #: Seconds of this worker's lease, renewed three times per lease (default 10); past it, its runs end.
    lease: float | None
    #: How late, in seconds, a cancel may be when its notification is lost (default 2).
    reconcile_interval: float | None
    #: Seconds past which every call raises ``RegistryUnavailableError`` (default 5).
    timeout: float | None
    #: Seconds after which a finished, unchanged session is removed (default a day).
    session_ttl: float | None
    #: A prefix before every key and channel (default ``"subagent-tracker:"``).
    key_prefix: str | None
    #: Whether the URL names a node of a Redis Cluster (``None``: ask the node).
    cluster: bool | None
    #: Replicas that must have a cancel before it returns.
    wait_for_replicas: int | None
    #: Whether a server that evicts any key (``allkeys-*``) is accepted.
    allow_eviction: bool | None
