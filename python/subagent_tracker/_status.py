"""The lifecycle status of a subagent task."""

from __future__ import annotations

import enum

from subagent_tracker._native import _PENDING_STATUSES


class SubagentStatus(str, enum.Enum):
    """Where a subagent task stands: ``QUEUED`` from a reservation until a runner claims it, ``RUNNING`` from
    a start or a claim, ``PAUSED`` while its runner waits to be resumed. The first transition out of these
    pending statuses wins for good.

    Members compare equal to their lowercase string values, so ``status == "cancelled"`` also works.
    """

    QUEUED = "queued"
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value

    @property
    def is_terminal(self) -> bool:
        """True for ``COMPLETED``, ``FAILED`` and ``CANCELLED``."""
        return not self.is_pending

    @property
    def is_pending(self) -> bool:
        """True for ``QUEUED``, ``RUNNING`` and ``PAUSED``, the statuses a cancel moves to ``CANCELLED``: the
        core's rule, which this reads rather than repeats."""
        return self.value in _PENDING_STATUSES
