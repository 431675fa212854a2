"""``acquire(timeout=…)`` returns within its timeout when the database stalls, and never
with a lease granted after it.

Before, with the server paused 25 s, ``acquire(timeout=1)`` blocked 25 s on PostgreSQL
and MariaDB and then returned a lease granted 24 s past its deadline. Here the stall is
made for the backend's own session only (other suites share the servers): on PostgreSQL
its server process is stopped (``SIGSTOP``), on MariaDB another session holds a write
lock on the claims table. A safety timer ends the stall after ``STALL`` seconds either
way, so a regression shows as a slow call, not a hung suite.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import pytest
from django.db import connections

import occupy
from occupy.backends import get_backend
from occupy.backends.base import STORE_GRACE
from tests.support.aliases import DATABASE_BACKENDS, backend_params
from tests.support.waiting import wait_until

#: How long the store stalls at most; far longer than any bound below.
STALL = 8.0
TIMEOUT = 1.0
#: What a call may take beyond its timeout: the last statement's grace, and a second
#: bounded statement (the cancel) on a fresh connection.
SLACK = 2 * STORE_GRACE + 0.5


@pytest.fixture(params=backend_params(DATABASE_BACKENDS))
def alias(request: pytest.FixtureRequest, live_db: None) -> str:
    if get_backend(request.param).store.dialect.vendor == "sqlite":
        pytest.skip("SQLite has no server to stall (its busy wait is bounded instead)")
    return request.param


@contextmanager
def _stopped(alias: str) -> Iterator[int]:
    """Stop the PostgreSQL server process of the backend's session in this thread; give
    its pid."""
    backend = get_backend(alias)
    pid = backend.store.execute("SELECT pg_backend_pid()", [])[1][0][0]
    try:
        os.kill(pid, signal.SIGSTOP)
    except PermissionError:
        pytest.skip("cannot signal the PostgreSQL server's processes from this user")
    timer = threading.Timer(STALL, os.kill, args=[pid, signal.SIGCONT])
    timer.start()
    try:
        yield pid
    finally:
        timer.cancel()
        os.kill(pid, signal.SIGCONT)


@contextmanager
def _table_locked(alias: str) -> Iterator[None]:
    """Hold a write lock on the claims table from another MariaDB session."""
    import MySQLdb

    settings_dict = connections[get_backend(alias).database].settings_dict
    other = MySQLdb.connect(
        host=settings_dict["HOST"],
        port=int(settings_dict["PORT"]),
        user=settings_dict["USER"],
        password=settings_dict["PASSWORD"],
        database=settings_dict["NAME"],
    )
    cursor = other.cursor()
    cursor.execute("LOCK TABLES occupy_occupation WRITE")
    timer = threading.Timer(STALL, other.close)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with suppress(MySQLdb.Error):  # closed by the timer already
            other.close()


def _stall(alias: str):
    """Stall the backend's session in this thread; give the pid of its PostgreSQL server
    process (``None`` on MariaDB)."""
    if get_backend(alias).store.dialect.vendor == "postgresql":
        return _stopped(alias)
    return _table_locked(alias)


def _server_process_alive(alias: str, pid: int) -> bool:
    rows = get_backend(alias).store.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid]
    )[1]
    return rows[0][0] > 0


def test_a_stalled_database_does_not_outlast_the_timeout(alias: str) -> None:
    with _stall(alias) as stopped:
        started = time.monotonic()
        with pytest.raises((occupy.LockTimeout, occupy.StoreUnavailable)) as info:
            occupy.acquire("stall:1", owner="alice", ttl=30, timeout=TIMEOUT, backend=alias)
        took = time.monotonic() - started
    assert took < TIMEOUT + SLACK, f"took {took:.1f} s: {info.value!r}"
    assert info.value.key == "stall:1"
    # The stall is over. The stopped session, which had the grant in its socket, was
    # ended from a new connection before the attempt was cancelled: resumed, it grants
    # nothing (else alice's orphan would hold the key for its ttl). Looked at once that
    # session has ended, whatever the load, so a grant it made would be seen.
    if stopped is not None:
        wait_until(
            lambda: not _server_process_alive(alias, stopped), what="the stopped session to end"
        )
    else:
        time.sleep(0.5)
    assert occupy.holder("stall:1", backend=alias) is None
    lease = occupy.acquire("stall:1", owner="bob", ttl=30, timeout=5, backend=alias)
    occupy.release(lease)


@pytest.mark.parametrize("huge", [1e10, 1e300])
def test_a_huge_timeout_leaves_the_next_stalled_call_bounded(alias: str, huge: float) -> None:
    # Before, acquire(timeout=1e10) armed a cut-off 1e10 s ahead, which killed the cut-off
    # thread (OverflowError) for the life of the process: every later call against a
    # stalled server blocked for the whole stall.
    occupy.release(occupy.acquire("stall:1", owner="alice", ttl=30, timeout=huge, backend=alias))
    test_a_stalled_database_does_not_outlast_the_timeout(alias)
    assert any(t.name == "occupy-cutoff" and t.is_alive() for t in threading.enumerate())


def test_a_grant_after_the_deadline_is_given_back(
    alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = get_backend(alias)
    make_attempt = backend.attempt

    def slow_attempt(key: str, owner: str, ttl: float):
        attempt = make_attempt(key, owner, ttl)
        try_acquire = attempt.try_acquire

        def slow() -> object:
            lease = try_acquire()
            time.sleep(TIMEOUT + STORE_GRACE + 0.2)  # the reply took that long
            return lease

        attempt.try_acquire = slow
        return attempt

    monkeypatch.setattr(backend, "attempt", slow_attempt)
    with pytest.raises(occupy.LockTimeout) as info:
        occupy.acquire("late:1", owner="alice", ttl=30, timeout=TIMEOUT, backend=alias)
    assert "after the timeout" in str(info.value)
    monkeypatch.undo()
    assert occupy.holder("late:1", backend=alias) is None
