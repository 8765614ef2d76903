"""The options of a task's start, declared once for Python: every signature that starts or reserves a task
takes them as ``**options: Unpack[StartOptions]`` (or ``ReserveOptions``), in the stubs of the native classes,
the protocols and the Python sessions alike. The native sessions read the same names (``START_OPTIONS`` in the
binding's ``start_arguments.rs``); a test holds the two lists equal, and stubtest each native signature."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from subagent_tracker._native import CancellationToken

__all__ = ["ReserveOptions", "StartOptions"]


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
