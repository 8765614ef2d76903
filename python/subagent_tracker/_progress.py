"""The entries of a snapshot's progress log."""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["ProgressEntry"]


class ProgressEntry(NamedTuple):
    """One progress report of a task's runner (``handle.progress(message, data=...)``): when it was made,
    in seconds since the epoch, its message, and its data, read-only as snapshot metadata is (``None`` if
    none was given)."""

    at: float
    message: str
    data: Any = None
