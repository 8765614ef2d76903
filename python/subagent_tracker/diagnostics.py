"""Diagnostics: counts that tell whether the process leaks what the tracker schedules.

They are for tests and monitoring, not for control flow.
"""

from __future__ import annotations

from subagent_tracker._native import pending_deadlines

__all__ = ["pending_deadlines"]
