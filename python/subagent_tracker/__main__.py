"""Command line: ``python -m subagent_tracker demo [options]`` and ``... serve [options]``."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from urllib.parse import urlsplit

from subagent_tracker import _demo, _demo_workers
from subagent_tracker._errors import RegistryUnavailableError

#: The modules of the ``server`` extra: without them ``serve`` and ``demo --web`` cannot run.
SERVER_EXTRA_MODULES = frozenset({"starlette", "uvicorn", "prometheus_client"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m subagent_tracker")
    # The metavar lists the public commands only: argparse would list the hidden worker command too.
    commands = parser.add_subparsers(dest="command", required=True, metavar="{demo,serve}")
    demo = commands.add_parser("demo", help="run a simulated orchestrator and cancel parts of it live")
    demo.add_argument(
        "--subagents", type=int, default=300, help="how many subagents to fan out (default 300)"
    )
    demo.add_argument("--seed", type=int, default=7, help="random seed of the simulated work (default 7)")
    demo.add_argument("--speed", type=float, default=1.0, help="time scale: 2 runs twice as fast (default 1)")
    demo.add_argument(
        "--plain", action="store_true", help="print status lines instead of redrawing (the default off a TTY)"
    )
    demo.add_argument(
        "--workers",
        type=int,
        default=0,
        help="run the subagents in this many worker processes, one session on Redis (default: in memory)",
    )
    demo.add_argument("--redis", help="the Redis for --workers (default: start a local redis-server)")
    demo.add_argument(
        "--web",
        action="store_true",
        help="serve the dashboard on a local port while the demo runs, and print its address",
    )
    demo.add_argument(
        "--port", type=int, default=0, help="the dashboard's port with --web (default: a free one)"
    )
    demo.add_argument(
        "--start-wait",
        type=float,
        default=_demo.WEB_START_WAIT_SECONDS,
        help="with --web, start the demo once the page connects or after this many seconds "
        f"(default {_demo.WEB_START_WAIT_SECONDS:g})",
    )
    demo.add_argument(
        "--linger",
        type=float,
        default=None,
        help="with --web, keep the dashboard up this many seconds after the demo (default: until Ctrl-C)",
    )
    serve = commands.add_parser("serve", help="serve the live dashboard of a registry's sessions")
    serve.add_argument("--redis", help="the Redis whose sessions to show (default: an in-memory registry)")
    serve.add_argument("--host", default="127.0.0.1", help="the address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="the port (default 8000)")
    serve.add_argument(
        "--token",
        help="the token every API call must carry; required off loopback (or set SUBAGENT_TRACKER_TOKEN)",
    )
    serve.add_argument(
        "--details", action="store_true", help="show tasks' metadata, results and errors (may hold user data)"
    )
    worker = commands.add_parser("_demo-worker")
    worker.add_argument("parameters", nargs=4)
    arguments = parser.parse_args(argv)
    # A first user meets these two before anything else: one line that says what to do, not a traceback.
    try:
        return _run(parser, arguments)
    except RegistryUnavailableError as unavailable:
        url = getattr(arguments, "redis", None)
        where = f"at {_without_password(url)}" if url else "(the local redis-server the demo started)"
        parser.exit(1, f"{parser.prog} {arguments.command}: cannot reach Redis {where}: {unavailable}\n")
    except ModuleNotFoundError as missing:
        if missing.name not in SERVER_EXTRA_MODULES:
            raise
        parser.exit(
            1,
            f"{parser.prog} {arguments.command}: the dashboard needs the 'server' extra "
            f"(no module named {missing.name!r}): pip install 'subagent-tracker[server]'\n",
        )


#: A password in a Redis URL's query (``unix:///run/redis.sock?pass=...``), up to the next parameter.
PASSWORD_IN_QUERY = re.compile(r"([?&](?:pass|password)=)[^&#]*")


def _without_password(url: str) -> str:
    """``url`` as the user gave it, its passwords (in the authority or the query) shown as ``***``: a terminal
    is often shared."""
    password = urlsplit(url).password
    if password is not None:
        url = url.replace(f":{password}@", ":***@", 1)
    return PASSWORD_IN_QUERY.sub(r"\1***", url)


def _run(parser: argparse.ArgumentParser, arguments: argparse.Namespace) -> int:
    if arguments.command == "_demo-worker":
        _demo_workers.worker_main(arguments.parameters)
        return 0
    if arguments.command == "serve":
        from subagent_tracker.dashboard import _serve

        token = arguments.token or os.environ.get(_serve.TOKEN_VARIABLE) or None
        try:
            _serve.check_binding(arguments.host, token)
        except ValueError as refused:
            parser.error(str(refused))
        _serve.serve(
            redis_url=arguments.redis,
            host=arguments.host,
            port=arguments.port,
            token=token,
            details=arguments.details,
        )
        return 0
    if arguments.subagents < 10:
        parser.error("--subagents must be at least 10")
    if arguments.speed <= 0:
        parser.error("--speed must be positive")
    if not 0 <= arguments.start_wait <= 3600:
        parser.error("--start-wait must be between 0 and 3600 seconds")
    if arguments.workers:
        if arguments.workers < 2:
            parser.error("--workers must be at least 2 (one of them is killed to show leases)")
        workers = _demo_workers.WorkersOptions(
            workers=arguments.workers,
            subagents=min(arguments.subagents, 200),
            seed=arguments.seed,
            speed=arguments.speed,
            redis_url=arguments.redis,
        )
        return 0 if _demo_workers.run_workers_demo(workers) else 1
    if arguments.web and arguments.workers:
        parser.error("--web runs the in-memory demo; for workers, run `serve --redis URL` beside it")
    live = sys.stdout.isatty() and not arguments.plain and not arguments.web
    options = _demo.DemoOptions(
        subagents=arguments.subagents, seed=arguments.seed, speed=arguments.speed, live=live
    )
    if arguments.web:
        from subagent_tracker.dashboard import _demo_web

        summary = asyncio.run(
            _demo_web.run_demo_with_dashboard(options, arguments.port, arguments.linger, arguments.start_wait)
        )
    else:
        summary = asyncio.run(_demo.run_demo(options))
    return 0 if summary.all_finished else 1


if __name__ == "__main__":
    sys.exit(main())
