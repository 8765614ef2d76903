"""A live dashboard of a registry's sessions, with a JSON API and Prometheus metrics.

    from subagent_tracker import Registry
    from subagent_tracker.dashboard import app

    registry = Registry()
    asgi_app = app(registry)              # mount it in Starlette or FastAPI, or serve it with uvicorn

or on its own: ``python -m subagent_tracker serve [--redis URL]``. Needs the ``server`` extra (Starlette,
uvicorn, prometheus-client).
"""

from __future__ import annotations

from subagent_tracker.dashboard._app import DASHBOARD_CANCEL_REASON, app
from subagent_tracker.dashboard._security import ACTION_HEADER

__all__ = ["ACTION_HEADER", "DASHBOARD_CANCEL_REASON", "app"]
