"""On SQLite, a lock taken inside a transaction that has written fails at once, saying why.

SQLite has one write lock per file. The caller's transaction that has written holds it
until it commits, and the backend's claims commit on a connection of their own: before,
``acquire(timeout=0)`` waited out SQLite's busy timeout a dozen times (six minutes with
a 30 s timeout) and then raised a generic error.
"""

from __future__ import annotations

import time

import pytest
from django.conf import settings
from django.db import transaction

import occupy
from tests.testapp.models import Counter

#: The SQLite database and the backend on it, whichever database is the default.
DATABASE = "default" if settings.DEFAULT_DB == "sqlite" else "sqlite"
BACKEND = "default" if settings.DEFAULT_DB == "sqlite" else "db-sqlite"


def test_a_lock_inside_a_transaction_that_wrote_fails_at_once(live_db: None) -> None:
    with transaction.atomic(using=DATABASE):
        Counter.objects.using(DATABASE).create(name="written")
        started = time.monotonic()
        with pytest.raises(occupy.StoreUnavailable) as info:
            occupy.acquire("atomic:1", owner="alice", timeout=0, using=BACKEND)
        assert time.monotonic() - started < 2
    error = info.value
    assert error.key == "atomic:1" and error.using == BACKEND
    assert repr(DATABASE) in str(error) and "transaction" in str(error)
    # Nothing was left behind: once the transaction committed, the key is free.
    occupy.release(occupy.acquire("atomic:1", owner="bob", timeout=0, using=BACKEND))


def test_a_lock_inside_a_transaction_that_only_read_is_taken(live_db: None) -> None:
    with transaction.atomic(using=DATABASE):
        assert not Counter.objects.using(DATABASE).exists()
        lease = occupy.acquire("atomic:2", owner="alice", timeout=0, using=BACKEND)
        assert occupy.holder("atomic:2", using=BACKEND).owner == "alice"
        occupy.release(lease)


def test_a_lock_waits_for_another_writer_no_longer_than_its_timeout(live_db: None) -> None:
    """SQLite's busy wait is held to the caller's timeout: before, a writer that kept
    the file locked made ``acquire(timeout=1)`` wait out the busy timeout (30 s here)
    once per retry."""
    import sqlite3

    from django.db import connections

    other = sqlite3.connect(connections[DATABASE].settings_dict["NAME"], timeout=0,
                            isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's long write transaction
    try:
        started = time.monotonic()
        with pytest.raises((occupy.LockTimeout, occupy.StoreUnavailable)):
            occupy.acquire("busy:1", owner="alice", timeout=1, using=BACKEND)
        assert time.monotonic() - started < 1 + 2.5
    finally:
        other.execute("ROLLBACK")
        other.close()
    occupy.release(occupy.acquire("busy:1", owner="bob", timeout=0, using=BACKEND))
