"""On SQLite, a lock that cannot be written because the file's one write lock is held
says so: at once when the caller's own transaction holds it, at the timeout when another
writer does.

SQLite has one write lock per file. The caller's transaction that has written holds it
until it commits, and the backend's claims commit on a connection of their own: before,
``acquire(timeout=0)`` waited out SQLite's busy timeout a dozen times (six minutes with
a 30 s timeout) and then raised a generic error. Another writer that kept the lock for
the whole wait made ``acquire(timeout=0)`` raise ``Occupied`` by nobody (seen with eight
processes on one file), and a waiter whose claim could not be queued gave up before its
timeout.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.conf import settings
from django.db import connections, transaction

import occupy
from occupy.backends import get_backend
from occupy.backends.base import STORE_GRACE
from tests.testapp.models import Counter

#: The SQLite database and the backend on it, whichever database is the default.
DATABASE = "default" if settings.DEFAULT_DB == "sqlite" else "sqlite"
BACKEND = "default" if settings.DEFAULT_DB == "sqlite" else "db-sqlite"


@contextmanager
def another_writer() -> Iterator[sqlite3.Connection]:
    """Hold the file's write lock from another connection (as another process's long
    write transaction would) until the block ends or the connection commits."""
    other = sqlite3.connect(
        connections[DATABASE].settings_dict["NAME"],
        timeout=0,
        isolation_level=None,
        check_same_thread=False,
    )
    other.execute("BEGIN IMMEDIATE")
    try:
        yield other
    finally:
        if other.in_transaction:
            other.execute("ROLLBACK")
        other.close()


def test_a_lock_inside_a_transaction_that_wrote_fails_at_once(live_db: None) -> None:
    with transaction.atomic(using=DATABASE):
        Counter.objects.using(DATABASE).create(name="written")
        started = time.monotonic()
        with pytest.raises(occupy.StoreUnavailable) as info:
            occupy.acquire("atomic:1", owner="alice", timeout=0, backend=BACKEND)
        assert time.monotonic() - started < 2
    error = info.value
    assert error.key == "atomic:1" and error.backend == BACKEND
    assert repr(DATABASE) in str(error) and "transaction" in str(error)
    # Nothing was left behind: once the transaction committed, the key is free.
    occupy.release(occupy.acquire("atomic:1", owner="bob", timeout=0, backend=BACKEND))


def test_a_lock_inside_a_transaction_that_only_read_is_taken(live_db: None) -> None:
    with transaction.atomic(using=DATABASE):
        assert not Counter.objects.using(DATABASE).exists()
        lease = occupy.acquire("atomic:2", owner="alice", timeout=0, backend=BACKEND)
        assert occupy.holder("atomic:2", backend=BACKEND).owner == "alice"
        occupy.release(lease)


def test_a_lock_waits_for_another_writer_no_longer_than_its_timeout(live_db: None) -> None:
    """SQLite's busy wait is held to the caller's timeout: before, a writer that kept
    the file locked made ``acquire(timeout=1)`` wait out the busy timeout (30 s here)
    once per retry."""
    with another_writer():
        started = time.monotonic()
        with pytest.raises(occupy.StoreUnavailable, match="write-locked by another writer"):
            occupy.acquire("busy:1", owner="alice", timeout=1, backend=BACKEND)
        assert time.monotonic() - started < 1 + 2.5
    occupy.release(occupy.acquire("busy:1", owner="bob", timeout=0, backend=BACKEND))


def test_no_wait_on_a_file_another_writer_keeps_locked_is_unavailable(live_db: None) -> None:
    """Not ``Occupied`` with no holder: whether anyone holds the key is not known."""
    with another_writer():
        started = time.monotonic()
        with pytest.raises(occupy.StoreUnavailable) as info:
            occupy.acquire("busy:2", owner="alice", timeout=0, backend=BACKEND)
        assert time.monotonic() - started < STORE_GRACE + 1
    error = info.value
    assert error.key == "busy:2" and error.backend == BACKEND
    assert f"occupy backend {BACKEND!r}" in str(error) and "'busy:2'" in str(error)
    assert "stayed write-locked by another writer" in str(error)
    # Nothing was left behind: once the other writer is done, the key is free.
    occupy.release(occupy.acquire("busy:2", owner="bob", timeout=0, backend=BACKEND))


def test_a_waiter_takes_the_key_once_the_other_writer_commits(
    live_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the caller has time left, a statement that met the write lock is one more
    try: here every statement gives up after 50 ms (a short busy timeout), so the first
    try, and the insert that would queue the waiter, fail long before the writer
    commits."""
    own = get_backend(BACKEND).store.own_connections.get()  # this thread's, the acquire's
    monkeypatch.setattr(own, "wait_ms", 50)
    with another_writer() as other:
        commit = threading.Timer(1.5, other.execute, args=["COMMIT"])
        commit.start()
        started = time.monotonic()
        try:
            lease = occupy.acquire("busy:3", owner="alice", timeout=10, backend=BACKEND)
        finally:
            commit.join()
        assert 1.4 < time.monotonic() - started < 10
    assert occupy.holder("busy:3", backend=BACKEND).owner == "alice"
    occupy.release(lease)
