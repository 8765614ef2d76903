"""The process's own registry of sessions, for code that must stop a run by id without being handed its
session (a signal handler, a web route, a message from another service)."""

from __future__ import annotations

import os
import threading

from subagent_tracker._native import Registry

_made = threading.Lock()
_registry: Registry | None = None


def default_registry() -> Registry:
    """The registry of this process, made on first use: every call, from any thread, returns the same one.

    Sessions made through it (``default_registry().session("user-42")``) can be stopped from anywhere in the
    process: ``default_registry().get_session("user-42").cancel()``. A forked child starts
    with a registry of its own, empty: its parent's tasks do not run in it."""
    global _registry
    registry = _registry
    if registry is None:
        with _made:
            if _registry is None:
                _registry = Registry()
            registry = _registry
    return registry


def _forget_in_forked_child() -> None:
    # The lock is made anew too: a thread of the parent may have held it at the fork, and no thread of the
    # child would ever release it.
    global _made, _registry
    _made = threading.Lock()
    _registry = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_forked_child)
