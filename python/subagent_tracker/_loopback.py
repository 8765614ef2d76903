"""A free port on 127.0.0.1, for the servers the demo and the dashboard start (and the tests)."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now; the caller binds it next (another process could take it meanwhile)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port
