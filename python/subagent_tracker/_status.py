"""The lifecycle status of a subagent task."""

from __future__ import annotations

import enum


class SubagentStatus(str, enum.Enum):
    """Where a subagent task stands. ``RUNNING`` until the first transition out of it, which wins for good.

    Members compare equal to their lowercase string values, so ``status == "cancelled"`` also works.
    """

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value

    @property
    def is_terminal(self) -> bool:
        """True for every status but ``RUNNING``."""
        return self is not SubagentStatus.RUNNING
