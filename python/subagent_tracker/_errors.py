"""The exceptions raised by subagent_tracker. Every one derives from ``SubagentTrackerError``."""

from __future__ import annotations

from typing import Any

from subagent_tracker._native import (
    DEFAULT_CANCEL_REASON,
    _quoted,  # how every message quotes an id: the core's rule
)


class SubagentTrackerError(Exception):
    """The base class of every error this package raises on purpose."""


class TaskCancelledError(SubagentTrackerError):
    """Raised by ``token.raise_if_cancelled()`` inside a task that has been cancelled.

    Leaving a task's ``with`` block with this error marks the task cancelled and finished, never completed.
    """

    #: The cancelled task; for a token made by ``CancellationToken.any()``, the task whose cancel fired it.
    task_id: str
    reason: str
    partial: list[Any] | None

    def __init__(
        self, task_id: str, reason: str = DEFAULT_CANCEL_REASON, partial: list[Any] | None = None
    ) -> None:
        super().__init__(task_id, reason)
        self.task_id = task_id
        self.reason = reason
        #: What a guarded stream delivered before the cancel stopped it (``token.guard``); None elsewhere.
        self.partial = partial

    def __str__(self) -> str:
        # The default reason says nothing the sentence does not: "was cancelled: cancelled" read as a stutter.
        if self.reason == DEFAULT_CANCEL_REASON:
            return f"task {_quoted(self.task_id)} was cancelled"
        return f"task {_quoted(self.task_id)} was cancelled: {self.reason}"


class DuplicateTaskError(SubagentTrackerError, ValueError):
    """A task with this id is still live (not finished) in the session."""


class UnknownTaskError(SubagentTrackerError, LookupError):
    """No retained task has this id, or the named parent has already finished."""

    def __str__(self) -> str:
        # LookupError's str() would quote the message as a key; show it as written.
        return str(self.args[0]) if self.args else ""


class SessionClosedError(SubagentTrackerError):
    """The session was closed and accepts no new tasks."""


class SessionLostError(SubagentTrackerError):
    """The session's keys are gone from Redis though nobody closed it: evicted under a ``maxmemory-policy``
    that evicts any key (connected with ``allow_eviction=True``), or lost otherwise while the registry still
    listed the session. Nothing of it can be read or changed any more, and its runners' tokens fire with
    ``SESSION_LOST_REASON``. Retrying does not help."""


class RegistryUnavailableError(SubagentTrackerError, ConnectionError):
    """Redis could not be reached, did not answer within the registry's timeout, or answered that it cannot
    serve now (``OOM``, ``READONLY``, ``LOADING``, ``TRYAGAIN``, ``CLUSTERDOWN``, ``MASTERDOWN``,
    ``NOREPLICAS``, ``MOVED``, ``ASK``, ``UNBLOCKED``, ``MISCONF``, ``BUSY``, as a cluster says during a
    failover): a retry may succeed. Runners keep running and
    their tokens keep working; the registry reconciles with Redis once it is back."""


class ReplicationTimeoutError(SubagentTrackerError):
    """With ``wait_for_replicas``: the cancel took effect on the session's primary, but fewer replicas than
    asked confirmed it within the timeout, so a failover now could lose it. Cancelling the task again returns
    false (it is cancelled already); read the task once the servers are healthy to know whether the cancel
    survived."""


class RegistryProtocolError(SubagentTrackerError):
    """Redis answered something this package does not expect: an error reply it does not know, or a reply of
    another shape. Retrying does not help; the message carries the server's answer."""
