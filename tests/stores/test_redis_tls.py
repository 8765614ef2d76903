"""``rediss://``: the Redis store over TLS, against Debian's ``redis-server`` started with ``--tls-port`` and
a certificate that the fixture's own authority signed. The client trusts the system's authorities and whatever
``SSL_CERT_FILE`` names; a certificate that does not verify is a ``ValueError`` that says what to do."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from redis_support import CertificateAuthority, RedisServer, Worker

from subagent_tracker import AsyncRedisRegistry, RedisRegistry, RegistryUnavailableError, SubagentStatus
from subagent_tracker._loopback import free_port


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> CertificateAuthority:
    return CertificateAuthority(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_server(authority: CertificateAuthority) -> Iterator[RedisServer]:
    server = RedisServer(tls=authority)
    yield server
    server.stop()


@pytest.fixture
def trusted(authority: CertificateAuthority, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process trusts the tests' authority, as a user trusts a private one."""
    monkeypatch.setenv("SSL_CERT_FILE", str(authority.ca))


@pytest.mark.usefixtures("trusted")
def test_a_cancel_over_tls_reaches_a_runner_in_another_process_at_once(tls_server: RedisServer) -> None:
    assert tls_server.url.startswith("rediss://")
    # The worker process inherits SSL_CERT_FILE.
    runner = Worker(tls_server.url, "runner")
    try:
        runner.ask(op="start", session="tls", task="job")
        session = RedisRegistry(tls_server.url).session("tls")
        sent = time.monotonic()
        assert session.cancel_subagent_task("job", "stop") is True
        assert runner.ask(op="wait_cancelled", session="tls", task="job", timeout=5) == {
            "cancelled": True,
            "reason": "stop",
        }
        # The worker's reconcile interval is 0.5 s: well under it, the notification fired the token.
        assert time.monotonic() - sent < 0.4
        task = session.subagent_task("job")
        assert task is not None and task.status is SubagentStatus.CANCELLED
    finally:
        runner.stop()


@pytest.mark.usefixtures("trusted")
def test_events_and_the_asyncio_api_work_over_tls(tls_server: RedisServer) -> None:
    async def main() -> list[str]:
        registry = await AsyncRedisRegistry.connect(tls_server.url)
        session = await registry.session("tls-events")
        events = await session.events()
        handle = await session.start_subagent_task("a")
        await handle.complete("done")
        kinds: list[str] = []
        async for event in events:
            kinds.append(event.kind)
            if event.kind == "ended":
                break
        events.close()
        return kinds

    assert asyncio.run(asyncio.wait_for(main(), 10)) == ["started", "ended"]


def test_a_certificate_from_an_authority_not_trusted_is_refused_clearly(tls_server: RedisServer) -> None:
    started = time.monotonic()
    with pytest.raises(ValueError, match="certificate that did not verify") as refused:
        RedisRegistry(tls_server.url, timeout=2)
    message = str(refused.value)
    assert "SSL_CERT_FILE" in message and "UnknownIssuer" in message
    assert not isinstance(refused.value, RegistryUnavailableError), "retrying cannot help"
    assert time.monotonic() - started < 3


@pytest.mark.usefixtures("trusted")
def test_a_server_named_otherwise_than_its_certificate_is_refused(tls_server: RedisServer) -> None:
    assert tls_server.tls_port is not None
    with pytest.raises(ValueError, match=r'not valid for name "localhost"'):
        RedisRegistry(f"rediss://localhost:{tls_server.tls_port}/0", timeout=2)


def test_a_plain_url_to_the_tls_port_says_the_server_speaks_tls(tls_server: RedisServer) -> None:
    """``redis://`` on a TLS port: the server closes the connection, which alone looks like a server that went
    away; a TLS handshake that it takes tells the two apart."""
    assert tls_server.tls_port is not None
    with pytest.raises(ValueError) as refused:
        RedisRegistry(f"redis://127.0.0.1:{tls_server.tls_port}/0", timeout=1)
    assert not isinstance(refused.value, RegistryUnavailableError)
    message = str(refused.value)
    assert message.startswith(f"the server at redis://127.0.0.1:{tls_server.tls_port}/0 speaks TLS"), message
    assert "Use rediss://" in message and "\n" not in message


def test_a_tls_url_to_a_plain_server_says_it_does_not_speak_tls(tls_server: RedisServer) -> None:
    """``rediss://`` on a plain port: the server never answers the handshake, which alone looks like a
    timeout; a plain PING that it answers tells the two apart, within the timeout and a second."""
    started = time.monotonic()
    with pytest.raises(ValueError) as refused:
        RedisRegistry(f"rediss://127.0.0.1:{tls_server.port}/0", timeout=1)
    assert time.monotonic() - started < 3
    assert not isinstance(refused.value, RegistryUnavailableError)
    message = str(refused.value)
    assert "does not speak TLS: it answered a plain PING but not a TLS handshake" in message, message
    assert "Use redis://" in message and "\n" not in message


def test_a_tls_url_where_nothing_listens_stays_unavailable() -> None:
    with pytest.raises(RegistryUnavailableError):
        RedisRegistry(f"rediss://127.0.0.1:{free_port()}/0", timeout=1)
