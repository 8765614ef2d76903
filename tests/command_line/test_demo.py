"""The demo: a seed reproduces a run (the same tasks, the same cancels), and a short run ends clean."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import httpx
import pytest

from subagent_tracker import SubagentStatus
from subagent_tracker._demo import DemoOptions, Orchestrator, plan_for, run_demo


def test_a_seed_fixes_every_subagents_plan_and_the_cancel_targets() -> None:
    options = DemoOptions(subagents=120, seed=3, live=False)
    plans = [plan_for(3, f"sub-{index:03d}", 0)[0] for index in range(120)]
    assert plans == [plan_for(3, f"sub-{index:03d}", 0)[0] for index in range(120)]
    assert Orchestrator(options).targets() == Orchestrator(options).targets()
    others = [
        Orchestrator(DemoOptions(subagents=120, seed=seed, live=False)).targets() for seed in range(4, 9)
    ]
    assert any(targets != Orchestrator(options).targets() for targets in others)


def test_a_fast_demo_run_ends_with_every_task_finished_and_nothing_running() -> None:
    summary = asyncio.run(run_demo(DemoOptions(subagents=40, seed=5, speed=10, live=False)))
    assert summary.all_finished
    assert summary.counts[SubagentStatus.RUNNING] == 0
    assert summary.counts[SubagentStatus.CANCELLED] > 0
    assert any("by id" in entry for entry in summary.log)
    # The log counts the whole tree, not only the top-level subagents, and says why each failed task failed.
    fanned_out = next(entry for entry in summary.log if "fanned out" in entry)
    assert f"tracks {sum(summary.counts.values())} tasks" in fanned_out
    # The first failure is named with its cause; the next ones are counted in the status lines, so that they
    # never flood the log panel that shows the cancels.
    failures = [entry for entry in summary.log if "failed on purpose (" in entry]
    assert len(failures) == min(1, summary.counts[SubagentStatus.FAILED])
    # Nothing goes quiet for long while the slow subagents run.
    status_lines = [entry for entry in summary.log if "tasks finished (" in entry]
    assert len(status_lines) == 3
    assert all("failed on purpose)" in entry for entry in status_lines)


def test_the_banner_follows_the_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(run_demo(DemoOptions(subagents=20, seed=5, speed=10, live=False)))
    first = capsys.readouterr().out.splitlines()[0]
    assert "fans out 20 subagents" in first
    assert "for about 1 s" in first


def test_a_failed_subagent_floods_no_log(capsys: pytest.CaptureFixture[str]) -> None:
    # Seed 7's 300 plans hold several failures: the log names one.
    summary = asyncio.run(run_demo(DemoOptions(subagents=300, seed=7, speed=20, live=False)))
    capsys.readouterr()
    assert summary.counts[SubagentStatus.FAILED] > 3
    assert sum("failed on purpose (" in entry for entry in summary.log) == 1


def test_the_multi_process_demo_stops_work_across_processes_and_ends_clean() -> None:
    finished = subprocess.run(
        [
            sys.executable,
            "-m",
            "subagent_tracker",
            "demo",
            "--workers",
            "2",
            "--subagents",
            "30",
            "--speed",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    output = finished.stdout
    assert "cancel a running subagent by id" in output
    assert "worker-0; its subagents fail" in output
    assert "every task finished" in output


def test_the_web_demo_serves_its_session_on_the_dashboard_and_prints_the_address() -> None:
    demo = subprocess.Popen(
        [sys.executable, "-m", "subagent_tracker", "demo", "--web", "--speed", "4", "--linger", "1"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert demo.stdout is not None
        address = demo.stdout.readline().split()
        assert address[0] == "dashboard:" and address[1].startswith("http://127.0.0.1:")
        assert demo.stdout.readline().startswith("the demo starts when the page connects")
        # The first request starts the demo (it waits up to 5 s for one): its session shows soon after.
        sessions: list[dict[str, object]] = []
        for _ in range(100):
            sessions = httpx.get(address[1] + "api/sessions", timeout=10).json()["sessions"]
            if sessions:
                break
            time.sleep(0.05)
        assert [view["session_id"] for view in sessions] == ["demo"]
        output, _ = demo.communicate(timeout=120)
    finally:
        demo.kill()
    assert demo.returncode == 0 and "every task finished: yes" in output
    assert "the page connected: starting the demo" in output


def test_the_web_demo_starts_by_itself_when_no_page_connects() -> None:
    started = time.monotonic()
    finished = subprocess.run(
        [
            *(sys.executable, "-m", "subagent_tracker", "demo", "--web", "--speed", "8", "--linger", "0"),
            *("--subagents", "20", "--start-wait", "0.5"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "no page connected within 0.5 s: starting the demo" in finished.stdout
    assert "every task finished: yes" in finished.stdout
    assert time.monotonic() - started >= 0.5
