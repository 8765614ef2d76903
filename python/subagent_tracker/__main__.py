"""Command line: ``python -m subagent_tracker demo [options]`` and ``... serve [options]``.

Every mistake and every failure answers in one line on stderr, never a traceback; the exit status says which
it was (``EXIT_STATUSES``). Ctrl-C stops every command at once, with status 130.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from subagent_tracker import _demo, _demo_workers
from subagent_tracker._command_errors import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_STATUSES,
    EXIT_USAGE,
    CommandError,
    usage_error,
)
from subagent_tracker._errors import RegistryUnavailableError
from subagent_tracker._install import install_hint

#: The modules of the ``server`` extra: without them ``serve`` and ``demo --web`` cannot run.
SERVER_EXTRA_MODULES = frozenset({"starlette", "uvicorn", "prometheus_client"})
#: The most subagents the multi-process demo runs: its workers claim them one by one, a few per process.
MOST_WORKER_SUBAGENTS = 200


class _OneLineParser(argparse.ArgumentParser):
    """argparse, whose usage mistakes are one line (its own print the whole usage block first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see --help)\n")


def _whole_number(least: int, most: int) -> Callable[[str], int]:
    """An argparse type: an int from ``least`` to ``most``, refused with what was expected."""

    def parse(text: str) -> int:
        expected = f"a whole number from {least} to {most}"
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {_shown(text)}") from None
        if not least <= value <= most:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {_shown(text)}")
        return value

    return parse


def _number(least: float, most: float, *, exclusive_least: bool = False) -> Callable[[str], float]:
    """An argparse type: a number within the bounds, refused with what was expected."""

    def parse(text: str) -> float:
        above = f"above {least:g}" if exclusive_least else f"at least {least:g}"
        expected = f"a number {above} and at most {most:g}"
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {_shown(text)}") from None
        too_low = value <= least if exclusive_least else value < least
        if math.isnan(value) or too_low or value > most:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {_shown(text)}")
        return value

    return parse


def _shown(text: str) -> str:
    """A value as the user typed it, quoted, and cut short if it would flood the line."""
    if len(text) > 20:
        text = f"{text[:8]}…{text[-4:]} ({len(text)} characters)"
    return repr(text)


PORT = _whole_number(0, 65535)


def _parser() -> _OneLineParser:
    parser = _OneLineParser(prog="python -m subagent_tracker", epilog=EXIT_STATUSES)
    commands = parser.add_subparsers(dest="command", required=True, metavar="{demo,serve}")
    demo = commands.add_parser(
        "demo",
        help="run a simulated orchestrator and cancel parts of it live",
        description="A simulated orchestrator fans out subagents, which start children of their own; the "
        "demo cancels one by id, a subtree, and at its deadline the rest. Ctrl-C cancels the whole session.",
        epilog=EXIT_STATUSES,
    )
    demo.add_argument(
        "--subagents",
        type=_whole_number(10, 100_000),
        help=f"how many subagents to fan out (default 300; with --workers, {MOST_WORKER_SUBAGENTS}, the most "
        "it runs)",
    )
    demo.add_argument(
        "--seed",
        type=_whole_number(-(2**63), 2**63 - 1),
        default=7,
        help="random seed of the simulated work (default 7)",
    )
    demo.add_argument(
        "--speed",
        type=_number(0, 100, exclusive_least=True),
        default=1.0,
        help="time scale: 2 runs twice as fast (default 1)",
    )
    demo.add_argument(
        "--plain", action="store_true", help="print status lines instead of redrawing (the default off a TTY)"
    )
    demo.add_argument(
        "--workers",
        type=_whole_number(2, 64),
        help="run the subagents in this many worker processes (at least 2: one is killed to show leases), "
        "sharing one session on Redis (default: one process, in memory)",
    )
    demo.add_argument(
        "--redis",
        help="with --workers, the Redis to use (default: the demo starts a redis-server of its own)",
    )
    demo.add_argument(
        "--web",
        action="store_true",
        help="serve the dashboard on a local port while the in-memory demo runs, and print its address",
    )
    demo.add_argument("--port", type=PORT, help="with --web, the dashboard's port (default: a free one)")
    demo.add_argument(
        "--start-wait",
        type=_number(0, 3600),
        help="with --web, start the demo once the page connects or after this many seconds "
        f"(default {_demo.WEB_START_WAIT_SECONDS:g})",
    )
    demo.add_argument(
        "--linger",
        type=_number(0, 86_400),
        help="with --web, keep the dashboard up this many seconds after the demo (default: until Ctrl-C)",
    )
    serve = commands.add_parser(
        "serve",
        help="serve the live dashboard of a registry's sessions",
        description="Serves the dashboard of the sessions kept in Redis, by every process that uses it. "
        "Without --redis it shows an in-memory registry of its own, which no other process can reach, so it "
        "stays empty: give --redis URL to see a fleet's work, or run `demo --web` to watch the demo.",
        epilog=EXIT_STATUSES,
    )
    serve.add_argument(
        "--redis",
        help="the Redis whose sessions to show (default: an empty in-memory registry, to try the page)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="the address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=PORT, default=8000, help="the port; 0 picks a free one (default 8000)")
    serve.add_argument(
        "--token",
        help="the token every API call must carry; required off loopback (or set SUBAGENT_TRACKER_TOKEN)",
    )
    serve.add_argument(
        "--details", action="store_true", help="show tasks' metadata, results and errors (may hold user data)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    arguments = parser.parse_args(argv)
    try:
        return _run(arguments)
    except CommandError as failed:
        parser.exit(failed.status, f"{parser.prog} {arguments.command}: {failed}\n")
    except KeyboardInterrupt:
        # A Ctrl-C outside the commands' own handling (while connecting, say): one line, never a traceback.
        parser.exit(EXIT_INTERRUPTED, f"{parser.prog} {arguments.command}: stopped by Ctrl-C\n")
    except RegistryUnavailableError as unavailable:
        # Redis gone while a command runs (`connect_redis` reports a Redis unreachable at the start).
        parser.exit(EXIT_FAILURE, f"{parser.prog} {arguments.command}: lost Redis: {unavailable}\n")
    except ModuleNotFoundError as missing:
        if missing.name not in SERVER_EXTRA_MODULES:
            raise
        parser.exit(
            EXIT_FAILURE,
            f"{parser.prog} {arguments.command}: the dashboard needs the 'server' extra "
            f"(no module named {missing.name!r}): {install_hint('server')}\n",
        )


def _run(arguments: argparse.Namespace) -> int:
    if arguments.command == "serve":
        return _serve(arguments)
    _refuse_silent_options(arguments)
    if arguments.subagents is None:
        arguments.subagents = MOST_WORKER_SUBAGENTS if arguments.workers is not None else 300
    outcome: _demo.DemoSummary | _demo_workers.WorkersOutcome
    if arguments.workers is not None:
        workers = _demo_workers.WorkersOptions(
            workers=arguments.workers,
            subagents=arguments.subagents,
            seed=arguments.seed,
            speed=arguments.speed,
            redis_url=arguments.redis,
        )
        outcome = _demo_workers.run_workers_demo(workers)
    else:
        live = sys.stdout.isatty() and not arguments.plain and not arguments.web
        options = _demo.DemoOptions(
            subagents=arguments.subagents, seed=arguments.seed, speed=arguments.speed, live=live
        )
        if arguments.web:
            outcome = _run_web_demo(options, arguments)
        else:
            outcome = asyncio.run(_demo.run_demo_until_interrupted(options))
    if outcome.interrupted:
        return EXIT_INTERRUPTED
    return 0 if outcome.all_finished else EXIT_FAILURE


def _run_web_demo(options: _demo.DemoOptions, arguments: argparse.Namespace) -> _demo.DemoSummary:
    from subagent_tracker.dashboard import _demo_web, _serve

    start_wait = _demo.WEB_START_WAIT_SECONDS if arguments.start_wait is None else arguments.start_wait
    try:
        return asyncio.run(
            _demo_web.run_demo_with_dashboard(options, arguments.port or 0, arguments.linger, start_wait)
        )
    except _serve.ServeError as failed:
        raise CommandError(str(failed)) from None


def _refuse_silent_options(arguments: argparse.Namespace) -> None:
    """Refuses a combination of ``demo`` options one of which would otherwise be ignored."""
    if arguments.workers is not None and arguments.web:
        raise usage_error(
            "--web runs the in-memory demo; for workers, run `serve --redis URL` beside the demo"
        )
    if arguments.redis is not None and arguments.workers is None:
        raise usage_error("--redis is the Redis of --workers; the demo without --workers runs in memory")
    if arguments.workers is not None and (arguments.subagents or 0) > MOST_WORKER_SUBAGENTS:
        raise usage_error(
            f"--workers runs at most {MOST_WORKER_SUBAGENTS} subagents, got {arguments.subagents}"
        )
    if not arguments.web:
        for option in ("port", "start_wait", "linger"):
            if getattr(arguments, option) is not None:
                raise usage_error(f"--{option.replace('_', '-')} goes with --web, which serves the dashboard")


def _serve(arguments: argparse.Namespace) -> int:
    from subagent_tracker.dashboard import _serve

    token = arguments.token or os.environ.get(_serve.TOKEN_VARIABLE) or None
    try:
        _serve.check_binding(arguments.host, token)
    except ValueError as refused:
        raise usage_error(str(refused)) from None
    try:
        stopped = _serve.serve(
            redis_url=arguments.redis,
            host=arguments.host,
            port=arguments.port,
            token=token,
            details=arguments.details,
        )
    except _serve.ServeError as failed:
        raise CommandError(str(failed)) from None
    return EXIT_INTERRUPTED if stopped else 0


if __name__ == "__main__":
    sys.exit(main())
