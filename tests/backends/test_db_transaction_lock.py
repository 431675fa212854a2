"""``occupy.lock(key, scope="transaction")`` on PostgreSQL: the key held for the
caller's own transaction, excluding and excluded by the same key's leases; tests named
after the pitfalls of transaction-scoped advisory locks
(shared/research/anchors-2026-11-28.md, section 2.2).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.conf import settings
from django.db import connections, transaction

import occupy
from occupy.backends.db.dialects.postgresql import advisory_id
from occupy.leases import TransactionHold

pytestmark = pytest.mark.skipif(
    "postgresql" in settings.SKIPS, reason=f"needs {settings.SKIPS.get('postgresql')}"
)

DATABASE = "postgresql"
BACKEND = "db-postgresql"


def advisory_held(key: str) -> list[int]:
    """Return the server processes that hold ``key``'s advisory lock (granted), read on
    a connection of its own (not the transaction's)."""
    import psycopg

    settings_dict = connections[DATABASE].settings_dict
    ident = advisory_id(key) & 0xFFFFFFFFFFFFFFFF
    with psycopg.connect(
        host=settings_dict["HOST"],
        port=settings_dict["PORT"],
        user=settings_dict["USER"],
        dbname=settings_dict["NAME"],
        autocommit=True,
    ) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND classid = %s AND objid = %s AND objsubid = 1",
            [ident >> 32, ident & 0xFFFFFFFF],
        ).fetchall()
    return [pid for (pid,) in rows]


def backend_pid(alias: str = DATABASE) -> int:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


@pytest.mark.usefixtures("live_db")
class TestTransactionLock:
    def test_held_until_commit_on_the_transactions_own_connection(self) -> None:
        with transaction.atomic(using=DATABASE):
            with occupy.lock("tx:1", scope="transaction", using=BACKEND) as held:
                assert isinstance(held, TransactionHold)
                assert held.database == DATABASE
            # The block is over, the transaction is not: still held, by this session.
            assert advisory_held("tx:1") == [backend_pid()]
            with pytest.raises(occupy.Occupied):
                occupy.acquire("tx:1", owner="other", timeout=0, using=BACKEND)
        assert advisory_held("tx:1") == []
        lease = occupy.acquire("tx:1", owner="other", timeout=0, using=BACKEND)
        occupy.release(lease)

    def test_released_at_rollback(self) -> None:
        with pytest.raises(RuntimeError), transaction.atomic(using=DATABASE):
            with occupy.lock("tx:2", scope="transaction", using=BACKEND):
                pass
            raise RuntimeError("roll back")
        assert advisory_held("tx:2") == []

    def test_refused_outside_atomic(self) -> None:
        with pytest.raises(occupy.TransactionLockRefused, match="transaction.atomic"):
            with occupy.lock("tx:3", scope="transaction", using=BACKEND):
                pass

    def test_a_live_lease_excludes_it(self) -> None:
        lease = occupy.acquire("tx:4", owner="editor", using=BACKEND)
        try:
            with transaction.atomic(using=DATABASE):
                with pytest.raises(occupy.Occupied) as info:
                    with occupy.lock("tx:4", scope="transaction", timeout=0, using=BACKEND):
                        pass
                assert info.value.holder is not None
                assert info.value.holder.owner == "editor"
                # Nothing held for the transaction, which stays usable.
                assert advisory_held("tx:4") == []
                assert backend_pid() > 0
        finally:
            occupy.release(lease)

    def test_it_waits_for_a_lease_to_end(self) -> None:
        lease = occupy.acquire("tx:5", owner="editor", using=BACKEND)
        threading.Timer(0.3, occupy.release, [lease]).start()
        started = time.monotonic()
        with transaction.atomic(using=DATABASE):
            with occupy.lock("tx:5", scope="transaction", timeout=5, using=BACKEND):
                pass
        assert 0.25 < time.monotonic() - started < 3
