"""The dashboard's JSON API, live stream, metrics and guards, against a live registry over real HTTP."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from dashboard_support import ServedDashboard, stream_events
from prometheus_client.parser import text_string_to_metric_families
from redis_support import RedisServer, Worker

from subagent_tracker import Registry, SubagentStatus
from subagent_tracker._loopback import free_port
from subagent_tracker.dashboard import ACTION_HEADER, DASHBOARD_CANCEL_REASON, app


@pytest.fixture
def registry() -> Registry:
    return Registry()


@pytest.fixture
def served(registry: Registry) -> Iterator[ServedDashboard]:
    dashboard = ServedDashboard(registry)
    yield dashboard
    dashboard.stop()


def test_sessions_tasks_and_one_task_are_listed_with_their_state(
    registry: Registry, served: ServedDashboard
) -> None:
    session = registry.session("team/alpha")
    root = session.start_subagent_task("root", agent="orchestrator", description="plan the work")
    child = session.start_subagent_task("a/1", parent_id="root", agent="researcher")
    child.progress("reading sources")
    root.complete()
    with served.client() as client:
        sessions = client.get("/api/sessions").json()["sessions"]
        assert sessions == [
            {
                "session_id": "team/alpha",
                "counts": {
                    "queued": 0,
                    "running": 1,
                    "paused": 0,
                    "completed": 1,
                    "failed": 0,
                    "cancelled": 0,
                },
                "pending": 1,
                "total": 2,
            }
        ]
        listed = client.get("/api/sessions/team%2Falpha/tasks").json()
        assert {task["task_id"]: task["status"] for task in listed["tasks"]} == {
            "root": "completed",
            "a/1": "running",
        }
        # The page takes the pending rule from the views, never from a copy of its own.
        assert {task["task_id"]: task["pending"] for task in listed["tasks"]} == {"root": False, "a/1": True}
        one = client.get("/api/sessions/team%2Falpha/tasks/a%2F1").json()
        assert (one["parent_id"], one["agent"], one["progress"], one["finished"]) == (
            "root",
            "researcher",
            "reading sources",
            False,
        )
        assert client.get("/api/sessions/nobody/tasks").status_code == 404
        missing = client.get("/api/sessions/team%2Falpha/tasks/nothing")
        assert (missing.status_code, missing.json()) == (
            404,
            {"error": 'no task "nothing" in session "team/alpha"'},
        )
    child.complete()


def test_results_metadata_and_errors_are_shown_only_when_the_settings_say_so(registry: Registry) -> None:
    session = registry.session("s")
    session.start_subagent_task("secret", metadata={"user": "alice@example.com"}).complete("the answer")
    session.start_subagent_task("broken").fail(
        "token sk-123 rejected", error_type="AuthError", error_code="key-sk-123"
    )
    shown_when_asked = {"metadata", "result", "error", "error_type", "error_code"}
    for details, expected in ((False, set()), (True, shown_when_asked)):
        served = ServedDashboard(registry, details=details)
        try:
            with served.client() as client:
                for task in client.get("/api/sessions/s/tasks").json()["tasks"]:
                    assert expected == shown_when_asked & task.keys()
                shown = client.get("/api/sessions/s/tasks/secret").json()
                if details:
                    assert (shown["metadata"], shown["result"]) == (
                        {"user": "alice@example.com"},
                        "the answer",
                    )
                    broken = client.get("/api/sessions/s/tasks/broken").json()
                    assert (broken["error_type"], broken["error_code"]) == ("AuthError", "key-sk-123")
                else:
                    assert "alice" not in client.get("/api/sessions/s/tasks").text
                    assert "sk-123" not in client.get("/api/sessions/s/tasks").text
        finally:
            served.stop()


def test_a_cancel_reaches_the_subtree_and_a_finished_task_is_a_conflict(
    registry: Registry, served: ServedDashboard
) -> None:
    session = registry.session("s")
    handles = [session.start_subagent_task("root")]
    handles += [session.start_subagent_task(f"child-{index}", parent_id="root") for index in range(3)]
    handles += [session.start_subagent_task("grandchild", parent_id="child-0")]
    handles[2].complete()
    with served.client() as client:
        assert client.get("/api/sessions/s/tasks/root/subtree").json() == {"pending": 4}
        assert client.get("/api/sessions/s/tasks/child-1/subtree").json() == {"pending": 0}
        answer = client.post("/api/sessions/s/tasks/root/cancel", json={"reason": "runaway"})
        assert (answer.status_code, answer.json()) == (200, {"cancelled": True})
        for task_id in ("root", "child-0", "child-2", "grandchild"):
            snapshot = session.subagent_task(task_id)
            assert snapshot is not None and snapshot.status == SubagentStatus.CANCELLED
            assert snapshot.cancel_reason == "runaway"
        assert handles[0].token.is_cancelled and handles[4].token.is_cancelled
        again = client.post("/api/sessions/s/tasks/root/cancel")
        assert again.status_code == 409 and "not pending" in again.json()["error"]
        assert client.post("/api/sessions/s/tasks/nothing/cancel").status_code == 404
        assert client.post("/api/sessions/s/tasks/root/cancel", content=b"[1]").status_code == 400
        assert client.post("/api/sessions/s/tasks/root/cancel", json={"reason": 3}).status_code == 400
    for handle in handles:
        handle.complete()


def test_a_session_cancel_uses_the_dashboard_reason_and_counts(
    registry: Registry, served: ServedDashboard
) -> None:
    session = registry.session("s")
    handles = [session.start_subagent_task(f"task-{index}") for index in range(5)]
    handles[0].complete()
    with served.client() as client:
        assert client.post("/api/sessions/s/cancel").json() == {"cancelled": 4}
    snapshot = session.subagent_task("task-3")
    assert snapshot is not None and snapshot.cancel_reason == DASHBOARD_CANCEL_REASON
    assert snapshot.cancel_cause == "session"


def test_cross_site_requests_cannot_cancel(registry: Registry, served: ServedDashboard) -> None:
    session = registry.session("s")
    handle = session.start_subagent_task("job")
    with httpx.Client(base_url=served.url) as bare:
        # What a cross-site form can send: no custom header.
        refused = bare.post("/api/sessions/s/tasks/job/cancel", data={"reason": "x"})
        assert refused.status_code == 403 and "x-subagent-tracker-action" in refused.json()["error"]
        foreign = bare.post(
            "/api/sessions/s/tasks/job/cancel",
            headers={"x-subagent-tracker-action": "1", "origin": "https://evil.example"},
        )
        assert foreign.status_code == 403
        assert bare.get("/api/sessions/s/tasks/job/cancel").status_code == 405
        # A page whose DNS name was rebound to 127.0.0.1 addresses its requests to its own name.
        rebound = bare.get("/api/sessions", headers={"host": "evil.example:8000"})
        assert rebound.status_code == 403
    assert not handle.token.is_cancelled
    page = httpx.get(served.url + "/")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"
    handle.complete()


def test_with_a_token_every_api_call_the_stream_and_metrics_need_it(registry: Registry) -> None:
    registry.session("s")
    served = ServedDashboard(registry, token="s3cret")
    try:
        with httpx.Client(base_url=served.url) as bare:
            for path in ("/api/sessions", "/api/stream", "/metrics", "/api/sessions/s/tasks"):
                answer = bare.get(path)
                assert answer.status_code == 401, path
                assert answer.headers["www-authenticate"].startswith("Bearer")
            assert bare.get("/api/sessions", headers={"authorization": "Bearer wrong"}).status_code == 401
            assert bare.get("/api/sessions", headers={"authorization": "Basic s3cret"}).status_code == 401
            # The page itself holds no data: it loads, then asks for the token.
            assert bare.get("/").status_code == 200
            assert bare.get("/static/dashboard.js").status_code == 200
        with served.client(token="s3cret") as client:
            assert client.get("/api/sessions").status_code == 200
            assert client.get("/metrics").status_code == 200
    finally:
        served.stop()
    with pytest.raises(ValueError, match="token"):
        app(registry, token=" ")


def test_the_live_stream_shows_a_task_start_progress_and_end(
    registry: Registry, served: ServedDashboard
) -> None:
    session = registry.session("live")
    steps = iter(["start", "progress", "end"])
    handles: list[Any] = []

    def act() -> None:
        step = next(steps, None)
        if step == "start":
            handles.append(session.start_subagent_task("job", agent="coder"))
        elif step == "progress":
            handles[0].progress("half way")
        elif step == "end":
            handles[0].complete()

    statuses: list[tuple[str, str | None]] = []

    def until(event: str, data: Any) -> bool:
        # A snapshot comes first, and again whenever the dashboard (re)subscribes to the session.
        if event in ("snapshot", "tasks"):
            for task in data["tasks"]:
                statuses.append((task["status"], task["progress"]))
            act()
        return bool(statuses) and statuses[-1] == ("completed", "half way")

    with served.client() as client:
        seen = stream_events(client, "/api/stream?session=live", until)
    assert seen[0][0] == "overview" and seen[1][0] == "snapshot"
    assert ("running", None) in statuses and ("running", "half way") in statuses


def test_the_stream_of_an_unknown_session_is_not_found(served: ServedDashboard) -> None:
    with served.client() as client:
        assert client.get("/api/stream?session=nobody").status_code == 404


def test_metrics_parse_and_count_lifecycles_cancels_and_latency(
    registry: Registry, served: ServedDashboard
) -> None:
    with served.client() as client:
        client.get("/api/sessions")  # the dashboard starts following sessions
        session = registry.session("m")
        time.sleep(1.5)  # the session list is refreshed every second: now followed
        session.start_subagent_task("done").complete()
        cancelled = session.start_subagent_task("stopped")
        session.cancel_subagent_task("stopped")
        time.sleep(0.02)
        cancelled.complete()
        running = session.start_subagent_task("running")
        deadline = time.monotonic() + 10
        while True:
            families = {
                family.name: family for family in text_string_to_metric_families(client.get("/metrics").text)
            }
            samples = {
                (sample.name, tuple(sorted(sample.labels.items()))): sample.value
                for family in families.values()
                for sample in family.samples
            }
            if samples.get(("subagent_tracker_cancel_to_stopped_seconds_count", ()), 0) >= 1:
                break
            assert time.monotonic() < deadline, samples
            time.sleep(0.1)
    assert samples[("subagent_tracker_task_starts_total", ())] == 3
    assert samples[("subagent_tracker_task_lifecycles_total", (("status", "completed"),))] == 1
    assert samples[("subagent_tracker_task_lifecycles_total", (("status", "cancelled"),))] == 1
    assert samples[("subagent_tracker_task_cancels_total", ())] == 1
    assert samples[("subagent_tracker_cancel_to_stopped_seconds_sum", ())] >= 0.02
    assert samples[("subagent_tracker_tasks", (("status", "running"),))] == 1
    assert samples[("subagent_tracker_sessions", ())] == 1
    assert families["subagent_tracker_cancel_to_stopped_seconds"].type == "histogram"
    running.complete()


def test_serve_refuses_an_address_off_loopback_without_a_token() -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "subagent_tracker", "serve", "--host", "0.0.0.0", "--port", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "without a token" in refused.stderr


def test_serve_redis_shows_the_tasks_of_three_worker_processes_live() -> None:
    redis_server = RedisServer()
    workers = [Worker(redis_server.url, f"worker-{index}") for index in range(3)]
    port_number = free_port()
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "subagent_tracker",
            "serve",
            "--redis",
            redis_server.url,
            "--port",
            str(port_number),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert serve.stdout is not None and "dashboard" in serve.stdout.readline()
        with httpx.Client(base_url=f"http://127.0.0.1:{port_number}", timeout=10) as client:
            workers[0].ask(op="start", session="shared", task="root")
            shown: dict[str, str] = {}

            def until(event: str, data: Any) -> bool:
                if event in ("snapshot", "tasks"):
                    shown.update({task["task_id"]: task["worker"] for task in data["tasks"]})
                    if len(shown) == 1:
                        for index, worker in enumerate(workers):
                            worker.ask(op="start", session="shared", task=f"job-{index}", parent="root")
                return len(shown) == 4

            stream_events(client, "/api/stream?session=shared", until, timeout=20)
        assert shown == {"root": "worker-0", "job-0": "worker-0", "job-1": "worker-1", "job-2": "worker-2"}
    finally:
        serve.terminate()
        serve.wait(10)
        for worker in workers:
            worker.stop()
        redis_server.stop()


def test_the_app_mounts_under_a_prefix_with_ids_that_hold_slashes(registry: Registry) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    session = registry.session("team/alpha")
    handle = session.start_subagent_task("a/1")
    server = Starlette(routes=[Mount("/ops", app=app(registry))])

    async def main() -> None:
        transport = httpx.ASGITransport(app=server)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            assert (await client.get("/ops/")).text.startswith("<!doctype html>")
            assert (await client.get("/ops/static/dashboard.js")).status_code == 200
            one = await client.get("/ops/api/sessions/team%2Falpha/tasks/a%2F1")
            assert one.json()["task_id"] == "a/1"
            cancel = await client.post(
                "/ops/api/sessions/team%2Falpha/tasks/a%2F1/cancel", headers={ACTION_HEADER: "1"}
            )
            assert cancel.json() == {"cancelled": True}

    asyncio.run(main())
    handle.complete()


def test_a_task_the_registry_no_longer_retains_is_streamed_as_removed(
    registry: Registry, served: ServedDashboard
) -> None:
    session = registry.session("small", max_finished_tasks=1)
    first = session.start_subagent_task("first")
    removed: list[str] = []
    started = False

    def until(event: str, data: Any) -> bool:
        nonlocal started
        if event == "snapshot" and not started:
            started = True
            first.complete()
            session.start_subagent_task("second").complete()  # evicts "first"
        if event == "tasks":
            removed.extend(data["removed"])
        return "first" in removed

    with served.client() as client:
        client.get("/api/sessions")
        time.sleep(1.5)  # the session list is refreshed every second: now followed
        stream_events(client, "/api/stream?session=small", until)


def test_a_session_closed_and_opened_again_under_its_id_is_followed_anew(
    registry: Registry, served: ServedDashboard
) -> None:
    with served.client() as client:
        client.get("/api/sessions")
        old = registry.session("again")
        time.sleep(1.5)  # followed
        old.close()
        new = registry.session("again")
        handle = new.start_subagent_task("after")
        seen: set[str] = set()

        def until(event: str, data: Any) -> bool:
            if event in ("snapshot", "tasks"):
                seen.update(task["task_id"] for task in data["tasks"])
                if seen == {"after"} and handle.snapshot().status == SubagentStatus.RUNNING:
                    handle.progress("seen")
            return event == "tasks" and any(task["progress"] == "seen" for task in data["tasks"])

        stream_events(client, "/api/stream?session=again", until, timeout=15)
        handle.complete()


def test_counters_stay_exact_when_the_dashboard_falls_behind_the_event_buffer(
    registry: Registry, served: ServedDashboard
) -> None:
    with served.client() as client:
        client.get("/api/sessions")
        session = registry.session("burst", max_finished_tasks=5_000, event_buffer=16)
        time.sleep(1.5)  # followed, with a buffer far smaller than the burst
        handles = [session.start_subagent_task("root")]
        handles += [session.start_subagent_task(f"task-{index}", parent_id="root") for index in range(2_000)]
        session.cancel_subagent_task("root")
        for handle in handles:
            handle.complete()
        deadline = time.monotonic() + 15
        while True:
            samples = {
                (sample.name, tuple(sorted(sample.labels.items()))): sample.value
                for family in text_string_to_metric_families(client.get("/metrics").text)
                for sample in family.samples
            }
            lifecycles = samples.get(
                ("subagent_tracker_task_lifecycles_total", (("status", "cancelled"),)), 0
            )
            if lifecycles >= 2_001:
                break
            assert time.monotonic() < deadline, samples
            time.sleep(0.2)
    assert lifecycles == 2_001
    assert samples[("subagent_tracker_task_starts_total", ())] == 2_001
    assert samples[("subagent_tracker_task_cancels_total", ())] == 2_001
    assert samples[("subagent_tracker_cancel_to_stopped_seconds_count", ())] == 2_001


def test_bad_ids_and_an_unreachable_redis_get_json_errors() -> None:
    from subagent_tracker import RedisRegistry

    redis_server = RedisServer()
    registry = RedisRegistry(redis_server.url, timeout=0.5)
    registry.session("s")
    served = ServedDashboard(registry)
    try:
        with served.client() as client:
            too_long = client.get("/api/sessions/s/tasks/" + "x" * 300)
            assert too_long.status_code == 400 and "error" in too_long.json()
            redis_server.stop()
            unreachable = client.get("/api/sessions/s/tasks")
            assert unreachable.status_code == 503 and "error" in unreachable.json()
    finally:
        served.stop()


def test_the_stream_says_when_the_registry_is_unavailable_and_logs_no_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The page shows "connected" only while its data is live: the stream says when it is not, with the
    registry's error, rather than an overview that stops changing; nothing escapes a started response."""
    from subagent_tracker import RedisRegistry

    redis_server = RedisServer()
    registry = RedisRegistry(redis_server.url, timeout=0.5)
    registry.session("s")
    served = ServedDashboard(registry)
    # uvicorn's loggers do not propagate to the root logger, where caplog listens: its own, where it reports
    # an app's exception ("Exception in ASGI application"), is listened to directly.
    server_log = logging.getLogger("uvicorn.error")
    server_log.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.ERROR), served.client() as client:
            live = stream_events(client, "/api/stream", lambda event, _data: event == "overview")
            assert [session["session_id"] for session in live[-1][1]["sessions"]] == ["s"]

            stopped: list[bool] = []

            def paused(event: str, data: Any) -> bool:
                if event == "unavailable":
                    assert "the Redis registry is unavailable" in data["error"], data
                    return True
                if not stopped:
                    redis_server.stop()
                    stopped.append(True)
                return False

            stream_events(client, "/api/stream", paused, timeout=15)
            # A stream opened while Redis is down starts with the same event, not a broken response.
            (first, data), *_ = stream_events(client, "/api/stream", lambda _event, _data: True)
            assert first == "unavailable" and "unavailable" in data["error"]
    finally:
        # Before the stop: the test's server is stopped by force, which its lifespan logs.
        server_log.removeHandler(caplog.handler)
        served.stop()
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR] == []


def test_a_notice_is_sent_with_every_overview(registry: Registry) -> None:
    served = ServedDashboard(registry, notice="this registry is the server's own")
    try:
        with served.client() as client:
            (event, data), *_ = stream_events(client, "/api/stream", lambda _event, _data: True)
    finally:
        served.stop()
    assert event == "overview" and data["notice"] == "this registry is the server's own"


def test_no_notice_by_default(served: ServedDashboard) -> None:
    with served.client() as client:
        (_event, data), *_ = stream_events(client, "/api/stream", lambda _event, _data: True)
    assert data["notice"] is None


@pytest.mark.parametrize("task_id", [".", "..", "a/../b", "%2e"])
def test_the_query_forms_reach_any_id_even_a_path_segment(
    registry: Registry, served: ServedDashboard, task_id: str
) -> None:
    session = registry.session(".")
    handle = session.start_subagent_task(task_id)
    bystander = session.start_subagent_task("bystander")
    with served.client() as client:
        ids = {"session": ".", "task": task_id}
        assert client.get("/api/task", params=ids).json()["task_id"] == task_id
        assert client.get("/api/task/subtree", params=ids).json() == {"pending": 1}
        listed = client.get("/api/session/tasks", params={"session": "."}).json()["tasks"]
        assert {task["task_id"] for task in listed} == {task_id, "bystander"}
        assert client.post("/api/task/cancel", params=ids).json() == {"cancelled": True}
        assert handle.token.is_cancelled and not bystander.token.is_cancelled
        missing = client.get("/api/task", params={"session": "."})
        assert (missing.status_code, missing.json()) == (400, {"error": "the query needs ?task=<id>"})
        assert client.post("/api/session/cancel", params={"session": "."}).json() == {"cancelled": 1}
        assert bystander.token.is_cancelled
    handle.complete()
    bystander.complete()


def test_a_query_form_cancel_needs_the_action_header_too(registry: Registry, served: ServedDashboard) -> None:
    handle = registry.session("s").start_subagent_task("t")
    with httpx.Client(base_url=served.url, timeout=10) as bare:
        refused = bare.post("/api/task/cancel", params={"session": "s", "task": "t"})
    assert refused.status_code == 403
    assert not handle.token.is_cancelled
    handle.complete()


def test_a_paused_task_shows_its_status_and_what_it_waits_for(
    registry: Registry, served: ServedDashboard
) -> None:
    session = registry.session("approvals")
    handle = session.start_subagent_task("deploy", agent="coder")
    assert handle.pause("approve the deploy to production")
    with served.client() as client:
        (overview,) = client.get("/api/sessions").json()["sessions"]
        assert (overview["counts"]["paused"], overview["pending"]) == (1, 1)
        shown = client.get("/api/task", params={"session": "approvals", "task": "deploy"}).json()
        assert (shown["status"], shown["pending"], shown["pause_reason"]) == (
            "paused",
            True,
            "approve the deploy to production",
        )
    assert session.resume_subagent_task("deploy")
    handle.complete()
