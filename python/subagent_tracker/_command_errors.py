"""The command line's failures: each is one line on stderr with an exit status, never a traceback."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from subagent_tracker._errors import RegistryUnavailableError
from subagent_tracker._native import RedisRegistry

#: A failure while running: Redis unreachable, a port in use, a task left unfinished.
EXIT_FAILURE = 1
#: A usage mistake: an unknown option, a bad value, options that do not go together, a URL that is not a
#: Redis's.
EXIT_USAGE = 2
#: What a shell reports for a process that SIGINT stopped (128 + 2).
EXIT_INTERRUPTED = 130
EXIT_STATUSES = (
    "exit status: 0 done; 1 failed while running (Redis unreachable, a port in use, a task left unfinished); "
    "2 a usage mistake (an unknown option, a bad value, options that do not go together, a URL that is not "
    "a Redis's); 130 stopped by Ctrl-C."
)
#: A password in a Redis URL's query (``unix:///run/redis.sock?pass=...``), up to the next parameter.
PASSWORD_IN_QUERY = re.compile(r"([?&](?:pass|password)=)[^&#]*")


class CommandError(Exception):
    """A failure the command line reports in one line, with its exit status."""

    def __init__(self, message: str, status: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.status = status


def usage_error(message: str) -> CommandError:
    """A usage mistake found after parsing, reported as argparse's are."""
    return CommandError(f"{message} (see --help)", EXIT_USAGE)


def connect_redis(url: str, where: str | None = None, **options: Any) -> RedisRegistry:
    """``RedisRegistry(url, **options)``, its failures as the command line reports them: a URL or server that
    cannot work is a usage mistake, an unreachable one a failure; ``where`` names the server in the message
    (by default, the URL without its passwords)."""
    try:
        return RedisRegistry(url, **options)
    except RegistryUnavailableError as unavailable:
        shown = where or f"at {without_password(url)}"
        raise CommandError(f"cannot reach Redis {shown}: {unavailable}") from None
    except ValueError as refused:
        raise CommandError(str(refused), EXIT_USAGE) from None


def without_password(url: str) -> str:
    """``url`` as the user gave it, its passwords (in the authority or the query) shown as ``***``: a terminal
    is often shared."""
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None  # a port that is not a number: there is no authority to hide
    if password is not None:
        url = url.replace(f":{password}@", ":***@", 1)
    return PASSWORD_IN_QUERY.sub(r"\1***", url)
