"""A waiter whose database restarts under it leaves no claim blocking the key.

The restart is made for the waiter's backend only (other suites share the servers): it
reaches the real server through a TCP proxy of the test's own, which refuses new
connections while the server "restarts", and the server kills the waiter's session
(``pg_terminate_backend``, MariaDB's ``KILL``). The waiter's next try and its clean-up
both fail then; before, its pending claim stayed, so the key stayed blocked for up to
``PENDING_TTL`` after the server was back, while ``holder()`` said it was free.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from django.db import connections

import occupy
from occupy.backends import get_backend
from occupy.backends.db import DatabaseBackend
from tests.support.aliases import DATABASE_BACKENDS, backend_params
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import wait_for_waiters

KEY = "restart:1"


@pytest.fixture(params=backend_params(DATABASE_BACKENDS))
def alias(request: pytest.FixtureRequest, live_db: None) -> str:
    if get_backend(request.param).store.dialect.vendor == "sqlite":
        pytest.skip("SQLite has no server to restart")
    return request.param


@pytest.fixture
def proxied(alias: str) -> Iterator[tuple[DatabaseBackend, TcpProxy]]:
    """A database backend on the same database as ``alias``, reached through a proxy."""
    database = get_backend(alias).database
    settings_dict = connections[database].settings_dict
    proxy = TcpProxy((settings_dict["HOST"] or "127.0.0.1", int(settings_dict["PORT"] or 0)))
    name = f"{database}-proxied"
    connections.settings[name] = {**settings_dict, "HOST": "127.0.0.1", "PORT": proxy.port}
    backend = DatabaseBackend(
        "restarted", {"OPTIONS": {"DATABASE": name, "PENDING_TTL": 60, "POLL_INTERVAL": 0.05}}
    )
    try:
        yield backend, proxy
    finally:
        backend.close()
        proxy.close()
        del connections.settings[name]


def _kill_sessions_through(alias: str, proxy: TcpProxy) -> int:
    """Kill, on the server, the sessions that came through ``proxy``; return how many."""
    ports = [sock.getsockname()[1] for sock in proxy.sockets[1::2]]
    backend = get_backend(alias)
    if backend.store.dialect.vendor == "postgresql":
        found = backend.store.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND client_port = ANY(%s)",
            [ports],
        )[1]
        return len(found)
    rows = backend.store.execute("SELECT ID, HOST FROM information_schema.PROCESSLIST", [])[1]
    killed = 0
    for session, host in rows:
        if host and host.rsplit(":", 1)[-1].isdigit() and int(host.rsplit(":", 1)[-1]) in ports:
            backend.store.execute(f"KILL {int(session)}", [])
            killed += 1
    return killed


def test_a_waiter_whose_database_restarted_leaves_no_claim(alias: str, proxied) -> None:
    backend, proxy = proxied
    holder = occupy.acquire(KEY, owner="holder", ttl=60, backend=alias)
    outcome: list[object] = []

    def wait_for_it() -> None:
        try:
            outcome.append(backend.acquire(KEY, owner="waiter", ttl=60, timeout=30))
        except BaseException as e:  # reported by the main thread
            outcome.append(e)

    thread = threading.Thread(target=wait_for_it)
    thread.start()
    wait_for_waiters(alias, KEY)
    proxy.open = False  # the server is restarting: no new connection gets through
    assert _kill_sessions_through(alias, proxy) >= 1
    thread.join(20)
    assert outcome and isinstance(outcome[0], occupy.StoreUnavailable), outcome
    # The clean-up failed with the try: the pending claim is still in the table.
    assert [c.owner for c in get_backend(alias).claims() if c.state == "pending"] == ["waiter"]
    proxy.open = True  # the server is back
    occupy.release(holder)
    assert occupy.holder(KEY, backend=alias) is None
    # The backend's next statement runs the clean-up first: the key is free at once,
    # not after the waiter's PENDING_TTL (60 s).
    lease = backend.acquire(KEY, owner="newcomer", ttl=60, timeout=0)
    assert [c.owner for c in get_backend(alias).claims()] == ["newcomer"]
    occupy.release(lease)
    assert list(get_backend(alias).claims()) == []
