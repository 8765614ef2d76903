"""Shared helpers for the pytest suite."""

from __future__ import annotations

import gc

import pytest

from subagent_tracker import Session


@pytest.fixture
def session() -> Session:
    return Session("test-session", max_finished_tasks=100_000)


@pytest.fixture(autouse=True)
def _collect_garbage_between_tests() -> None:
    # Handles end their tasks when collected; collect now so no test sees another's leftovers.
    gc.collect()
