"""``occupy.lock(key, scope="transaction")`` on PostgreSQL: the key held for the
caller's own transaction, excluding and excluded by the same key's leases; tests named
after the pitfalls of transaction-scoped advisory locks
(shared/research/anchors-2026-11-28.md, section 2.2).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.conf import settings
from django.db import connections, transaction

import occupy
from occupy.backends import get_backend
from occupy.backends.db.dialects.postgresql import advisory_id
from occupy.leases import TransactionHold
from tests.support.pgbouncer import pgbouncer, pgbouncer_missing
from tests.support.private_postgres import postgres_bin, private_postgres
from tests.support.waiting import release_once_waiting

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
            with occupy.lock("tx:1", scope="transaction", backend=BACKEND) as held:
                assert isinstance(held, TransactionHold)
                assert held.database == DATABASE
            # The block is over, the transaction is not: still held, by this session.
            assert advisory_held("tx:1") == [backend_pid()]
            with pytest.raises(occupy.Occupied):
                occupy.acquire("tx:1", owner="other", timeout=0, backend=BACKEND)
        assert advisory_held("tx:1") == []
        lease = occupy.acquire("tx:1", owner="other", timeout=0, backend=BACKEND)
        occupy.release(lease)

    def test_released_at_rollback(self) -> None:
        with pytest.raises(RuntimeError), transaction.atomic(using=DATABASE):
            with occupy.lock("tx:2", scope="transaction", backend=BACKEND):
                pass
            raise RuntimeError("roll back")
        assert advisory_held("tx:2") == []

    def test_refused_outside_atomic(self) -> None:
        with (
            pytest.raises(occupy.TransactionLockRefused, match=r"transaction\.atomic"),
            occupy.lock("tx:3", scope="transaction", backend=BACKEND),
        ):
            pass

    def test_a_live_lease_excludes_it(self) -> None:
        lease = occupy.acquire("tx:4", owner="editor", backend=BACKEND)
        try:
            with transaction.atomic(using=DATABASE):
                with (
                    pytest.raises(occupy.Occupied) as info,
                    occupy.lock("tx:4", scope="transaction", timeout=0, backend=BACKEND),
                ):
                    pass
                assert info.value.holder is not None
                assert info.value.holder.owner == "editor"
                # Nothing held for the transaction, which stays usable.
                assert advisory_held("tx:4") == []
                assert backend_pid() > 0
        finally:
            occupy.release(lease)

    def test_a_free_key_is_held_in_one_statement_without_a_savepoint(self) -> None:
        """The uncontended hold is one statement (``occupy_hold``), not a savepoint and
        the statements in it; a refusal (a lease) is one statement too, and the
        transaction stays usable."""
        from django.test.utils import CaptureQueriesContext

        database = connections[DATABASE]
        with transaction.atomic(using=DATABASE):
            with occupy.lock("tx:warm", scope="transaction", backend=BACKEND):
                pass
            with (
                CaptureQueriesContext(database) as captured,
                occupy.lock("tx:once", scope="transaction", backend=BACKEND),
            ):
                pass
            assert advisory_held("tx:once") == [backend_pid()]
        sent = [query["sql"] for query in captured.captured_queries]
        assert len(sent) == 1 and "SAVEPOINT" not in sent[0], sent
        lease = occupy.acquire("tx:once", owner="editor", backend=BACKEND)
        try:
            with transaction.atomic(using=DATABASE):
                with (
                    CaptureQueriesContext(database) as captured,
                    pytest.raises(occupy.Occupied),
                    occupy.lock("tx:once", scope="transaction", timeout=0, backend=BACKEND),
                ):
                    pass
                assert advisory_held("tx:once") == []
                assert backend_pid() > 0
            sent = [query["sql"] for query in captured.captured_queries]
            assert "SAVEPOINT" not in sent[0], sent
        finally:
            occupy.release(lease)

    def test_without_the_function_the_savepoint_path_holds_and_refuses(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A database migrated before ``occupy_hold`` existed: the key is held by the
        savepoint's statements, refused all the same, and the transaction stays usable."""
        from occupy.backends.db import transaction as held_for_transactions

        monkeypatch.setattr(held_for_transactions, "_holds_at_once", lambda *args: False)
        with (
            transaction.atomic(using=DATABASE),
            occupy.lock("tx:old", scope="transaction", timeout=0, backend=BACKEND),
        ):
            assert advisory_held("tx:old") == [backend_pid()]
        lease = occupy.acquire("tx:old", owner="editor", backend=BACKEND)
        try:
            with transaction.atomic(using=DATABASE):
                with (
                    pytest.raises(occupy.Occupied),
                    occupy.lock("tx:old", scope="transaction", timeout=0, backend=BACKEND),
                ):
                    pass
                assert advisory_held("tx:old") == []
                assert backend_pid() > 0
        finally:
            occupy.release(lease)

    def test_it_waits_for_a_lease_to_end(self, monkeypatch: pytest.MonkeyPatch) -> None:
        lease = occupy.acquire("tx:5", owner="editor", backend=BACKEND)
        released = release_once_waiting(BACKEND, lease, monkeypatch)
        started = time.monotonic()
        try:
            with (
                transaction.atomic(using=DATABASE),
                occupy.lock("tx:5", scope="transaction", timeout=5, backend=BACKEND),
            ):
                held = time.monotonic()
        finally:
            release_began = released()  # fails unless the hold waited
        assert release_began <= held < started + 3

    def test_the_waiting_hook_is_told_once_however_many_polls(self) -> None:
        """The hook's contract (``BaseBackend.acquire``): called once, when the hold
        first finds the key held, not at each of the polls a lease's wait makes."""
        lease = occupy.acquire("tx:6", owner="editor", backend=BACKEND)
        calls: list[float] = []

        def release_later() -> None:
            time.sleep(0.6)  # several polls: the first pauses are milliseconds
            occupy.release(lease)

        releaser = threading.Thread(target=release_later)

        def waiting() -> None:
            calls.append(time.monotonic())
            if len(calls) == 1:
                releaser.start()

        try:
            with transaction.atomic(using=DATABASE):
                hold = get_backend(BACKEND).hold_for_transaction("tx:6", timeout=5, waiting=waiting)
                assert isinstance(hold, TransactionHold)
        finally:
            if calls:
                releaser.join(10)
            else:  # it never waited: the assertion below says so
                occupy.release(lease)
        assert len(calls) == 1, calls


@pytest.mark.usefixtures("live_db")
class TestPitfalls:
    def test_repeatable_read_is_refused(self) -> None:
        """Pitfall 3: the snapshot of REPEATABLE READ is fixed before the lock is
        granted, so it would not see the previous holder's commit: refused, and the
        transaction holds nothing and stays usable."""
        with transaction.atomic(using=DATABASE):
            with connections[DATABASE].cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            with (
                pytest.raises(occupy.TransactionLockRefused, match="REPEATABLE READ"),
                occupy.lock("tx:rr", scope="transaction", backend=BACKEND),
            ):
                pass
            assert advisory_held("tx:rr") == []
            assert backend_pid() > 0

    def test_a_lock_timeout_leaves_the_outer_transaction_usable(self) -> None:
        """Pitfall 6: a lock wait that times out must not abort the caller's
        transaction (25P02): it runs in a savepoint, rolled back."""
        from tests.testapp.models import Counter

        other_done = threading.Event()
        holding = threading.Event()

        def other_transaction() -> None:
            try:
                with (
                    transaction.atomic(using=DATABASE),
                    occupy.lock("tx:timeout", scope="transaction", backend=BACKEND),
                ):
                    holding.set()
                    other_done.wait(10)
            finally:
                connections[DATABASE].close()

        thread = threading.Thread(target=other_transaction)
        thread.start()
        try:
            assert holding.wait(10)
            with transaction.atomic(using=DATABASE):
                Counter.objects.using(DATABASE).create(name="before")
                started = time.monotonic()
                with (
                    pytest.raises(occupy.LockTimeout),
                    occupy.lock("tx:timeout", scope="transaction", timeout=0.3, backend=BACKEND),
                ):
                    pass
                assert 0.25 < time.monotonic() - started < 2
                # Usable: it writes and reads, and its lock_timeout is the caller's again.
                Counter.objects.using(DATABASE).create(name="after")
                with connections[DATABASE].cursor() as cursor:
                    cursor.execute("SHOW lock_timeout")
                    assert cursor.fetchone()[0] == "0"
            names = set(Counter.objects.using(DATABASE).values_list("name", flat=True))
            assert {"before", "after"} <= names
        finally:
            other_done.set()
            thread.join()

    def test_a_million_keys_map_to_distinct_ids(self) -> None:
        """Pitfall 5: 32-bit hashes collide at about 10^5 keys; the ids are 64-bit."""
        ids = {advisory_id(f"library.book:{n}") for n in range(10**6)}
        assert len(ids) == 10**6
        assert all(-(2**63) <= i < 2**63 for i in list(ids)[:1000])
        # Not the bare SHA-256 of the key: occupy's own hash domain.
        import hashlib

        bare = int.from_bytes(hashlib.sha256(b"k").digest()[:8], "big", signed=True)
        assert advisory_id("k") != bare

    def test_lease_grants_wait_for_the_transaction(self) -> None:
        """Every lease grant takes the key's advisory lock: one asked while a
        transaction holds the key is granted only after its commit."""
        granted_at: list[float] = []

        def lease_taker() -> None:
            lease = occupy.acquire("tx:grant", owner="taker", timeout=5, backend=BACKEND)
            granted_at.append(time.monotonic())
            occupy.release(lease)

        with transaction.atomic(using=DATABASE):
            with occupy.lock("tx:grant", scope="transaction", backend=BACKEND):
                thread = threading.Thread(target=lease_taker)
                thread.start()
                time.sleep(0.4)
                assert granted_at == []
            committed_at = time.monotonic()
        thread.join()
        assert granted_at and granted_at[0] >= committed_at


class ReplicaRouter:
    """Reads to the replica alias, writes to the primary (what read/write routers do)."""

    def db_for_read(self, model: Any, **hints: Any) -> str:
        return DATABASE + "-replica"

    def db_for_write(self, model: Any, **hints: Any) -> str:
        return DATABASE


@pytest.mark.usefixtures("live_db")
def test_a_replica_alias_cannot_take_the_lock() -> None:
    """Pitfall 4: lock statements routed to a read replica exclude nobody. A backend on
    the alias routers read from is refused; the lock never follows db_for_read."""
    from django.db import router
    from django.test import override_settings

    from occupy.backends import get_backend

    replica = {
        **connections.settings[DATABASE],
        "TEST": {"MIRROR": DATABASE},
    }
    backends = {
        **settings.OCCUPY["BACKENDS"],
        "on-replica": {
            "BACKEND": "occupy.backends.db.DatabaseBackend",
            "OPTIONS": {"DATABASE": DATABASE + "-replica"},
        },
    }
    databases = {**settings.DATABASES, DATABASE + "-replica": replica}
    with override_settings(
        DATABASES=databases,
        DATABASE_ROUTERS=[ReplicaRouter()],
        OCCUPY={**settings.OCCUPY, "BACKENDS": backends},
    ):
        connections.settings[DATABASE + "-replica"] = replica
        router.routers = [ReplicaRouter()]
        try:
            with (
                transaction.atomic(using=DATABASE + "-replica"),
                pytest.raises(occupy.TransactionLockRefused, match="replica"),
                occupy.lock("tx:replica", scope="transaction", backend="on-replica"),
            ):
                pass
            # The primary's backend locks on the primary's transaction only.
            with (
                transaction.atomic(using=DATABASE),
                occupy.lock("tx:replica", scope="transaction", backend=BACKEND),
            ):
                assert advisory_held("tx:replica") == [backend_pid(DATABASE)]
        finally:
            router.routers = []
            # Its atomic() opened a session on the test database: one DROP DATABASE
            # would find in its way.
            connections[DATABASE + "-replica"].close()
            del connections.settings[DATABASE + "-replica"]
            get_backend("on-replica").close()


@contextmanager
def alias_through_pgbouncer(port: int) -> Iterator[tuple[str, str]]:
    """Yield a database alias and an occupy backend alias that reach the test database
    through PgBouncer on ``port`` (no prepared statements: PgBouncer before 1.21
    cannot keep them in transaction pooling)."""
    from django.test import override_settings

    from occupy.backends import get_backend

    alias, backend = "bouncer", "db-bouncer"
    through = {**connections.settings[DATABASE], "PORT": port, "HOST": "127.0.0.1"}
    backends = {
        **settings.OCCUPY["BACKENDS"],
        backend: {
            "BACKEND": "occupy.backends.db.DatabaseBackend",
            "OPTIONS": {"DATABASE": alias, "PREPARE": False},
        },
    }
    connections.settings[alias] = through
    try:
        with override_settings(OCCUPY={**settings.OCCUPY, "BACKENDS": backends}):
            try:
                yield alias, backend
            finally:
                get_backend(backend).close()
    finally:
        connections[alias].close()
        del connections.settings[alias]


@pytest.mark.skipif(
    pgbouncer_missing() is not None and not settings.REQUIRE_SERVERS,
    reason=str(pgbouncer_missing()),
)
@pytest.mark.usefixtures("live_db")
def test_through_pgbouncer_in_transaction_pooling_nothing_is_stranded() -> None:
    """Pitfall 1: a session lock stays on the pooled server connection and its unlock
    lands on another one (authentik #23876). Through PgBouncer in transaction pooling,
    with one server connection shared by every client, the transaction lock is held for
    its transaction, excludes leases and other transactions meanwhile, and leaves
    nothing on the server connection after commit or rollback."""
    with pgbouncer(pool_size=2) as port, alias_through_pgbouncer(port) as (alias, backend):
        holding, finish = threading.Event(), threading.Event()

        def holder() -> None:
            try:
                with (
                    transaction.atomic(using=alias),
                    occupy.lock("tx:bouncer", scope="transaction", backend=backend),
                ):
                    holding.set()
                    finish.wait(10)
            finally:
                connections[alias].close()

        thread = threading.Thread(target=holder)
        thread.start()
        try:
            assert holding.wait(10)
            assert len(advisory_held("tx:bouncer")) == 1
            with pytest.raises(occupy.Occupied):
                occupy.acquire("tx:bouncer", owner="lease", timeout=0, backend=backend)
            with (
                transaction.atomic(using=alias),
                pytest.raises(occupy.Occupied),
                occupy.lock("tx:bouncer", scope="transaction", timeout=0, backend=backend),
            ):
                pass
        finally:
            finish.set()
            thread.join()
        assert advisory_held("tx:bouncer") == []
        # Many short transactions from several clients over two server connections.
        errors: list[BaseException] = []

        def client(n: int) -> None:
            try:
                for i in range(20):
                    with transaction.atomic(using=alias):
                        with occupy.lock(
                            f"tx:bouncer:{i % 3}", scope="transaction", backend=backend
                        ):
                            pass
                        if i % 5 == 0:
                            transaction.set_rollback(True, using=alias)
            except BaseException as e:
                errors.append(e)
            finally:
                connections[alias].close()

        clients = [threading.Thread(target=client, args=(n,)) for n in range(4)]
        for each in clients:
            each.start()
        for each in clients:
            each.join()
        assert errors == []
        assert [advisory_held(f"tx:bouncer:{i}") for i in range(3)] == [[], [], []]
        lease = occupy.acquire("tx:bouncer", owner="lease", timeout=0, backend=backend)
        occupy.release(lease)


@pytest.mark.skipif(postgres_bin() is None, reason="PostgreSQL's initdb is not installed")
@pytest.mark.usefixtures("live_db")
def test_max_locks_per_transaction_exhausted_is_a_clear_error() -> None:
    """Pitfall 7: every held key takes a slot of the server's shared lock table until
    its transaction ends; a full table is an error that names the setting, and leaves
    the transaction usable (on a server of the test's own, whose table is tiny)."""
    from django.core.management import call_command
    from django.test import override_settings

    from occupy.backends import get_backend

    tiny = {
        "max_locks_per_transaction": "10",
        "max_connections": "5",
        "max_worker_processes": "0",
        "autovacuum": "off",
        "max_wal_senders": "0",
        "wal_level": "minimal",
    }
    with private_postgres(**tiny) as port:
        alias, backend = "tiny", "db-tiny"
        connections.settings[alias] = {
            **connections.settings[DATABASE],
            "NAME": "postgres",
            "PORT": port,
        }
        backends = {
            **settings.OCCUPY["BACKENDS"],
            backend: {
                "BACKEND": "occupy.backends.db.DatabaseBackend",
                "OPTIONS": {"DATABASE": alias},
            },
        }
        try:
            call_command("migrate", "occupy", database=alias, verbosity=0)
            with override_settings(OCCUPY={**settings.OCCUPY, "BACKENDS": backends}):
                held = 0
                with transaction.atomic(using=alias):
                    with pytest.raises(occupy.StoreUnavailable) as info:
                        for n in range(100_000):
                            with occupy.lock(f"many:{n}", scope="transaction", backend=backend):
                                held += 1
                    with connections[alias].cursor() as cursor:
                        cursor.execute("SELECT 1")  # the transaction is usable
                        assert cursor.fetchone() == (1,)
                get_backend(backend).close()
            assert "max_locks_per_transaction" in str(info.value)
            assert 10 < held < 100_000
        finally:
            connections[alias].close()
            del connections.settings[alias]


@pytest.mark.multiprocess
@pytest.mark.usefixtures("live_db")
def test_transaction_locks_and_leases_of_a_key_never_overlap() -> None:
    """Several OS processes, half holding the key for their transactions, half under
    leases of the lock table, each a slow read-modify-write of one counter: no two
    critical sections overlap, no increment is lost, and the leases' fences rise in the
    order they were granted."""
    from tests.support import multiproc
    from tests.support.exclusion import count_in_either_scope
    from tests.testapp.models import Counter

    key = "tx:race"
    Counter.objects.using(DATABASE).create(name=key)
    scopes = ["transaction", "lease"] * 3
    results = multiproc.run(
        count_in_either_scope, [(BACKEND, key, 12, 0.004, scope) for scope in scopes]
    )
    spans = sorted(span for worker in results for span in worker)
    for (_, left, _), (entered, _, _) in itertools.pairwise(spans):
        assert entered >= left, f"two holders overlapped: {spans}"
    fences = [fence for _, _, fence in spans if fence]
    assert fences == sorted(fences) and len(set(fences)) == len(fences)
    assert len(fences) == 36
    assert Counter.objects.using(DATABASE).get(name=key).value == len(spans) == 72


@pytest.mark.usefixtures("live_db")
def test_with_server_side_binding_the_statements_go_one_by_one() -> None:
    """psycopg 3 with ``server_side_binding`` prepares one statement at a time: the lock
    is taken all the same (one statement per round trip), refused all the same, and the
    caller's transaction stays usable; a lease of the caller's own is accepted."""
    from django.test import override_settings

    from occupy.backends import get_backend

    alias, backend = "bound", "db-bound"
    connections.settings[alias] = {
        **connections.settings[DATABASE],
        "OPTIONS": {"server_side_binding": True},
    }
    backends = {
        **settings.OCCUPY["BACKENDS"],
        backend: {"BACKEND": "occupy.backends.db.DatabaseBackend", "OPTIONS": {"DATABASE": alias}},
    }
    try:
        with override_settings(OCCUPY={**settings.OCCUPY, "BACKENDS": backends}):
            with (
                transaction.atomic(using=alias),
                occupy.lock("tx:bound", scope="transaction", timeout=1, backend=backend),
            ):
                assert len(advisory_held("tx:bound")) == 1
            assert advisory_held("tx:bound") == []
            lease = occupy.acquire("tx:bound", owner="editor", backend=backend)
            try:
                with transaction.atomic(using=alias):
                    with (
                        pytest.raises(occupy.LockTimeout),
                        occupy.lock("tx:bound", scope="transaction", timeout=0.2, backend=backend),
                    ):
                        pass
                    with connections[alias].cursor() as cursor:
                        cursor.execute("SELECT 1")
                    with occupy.lock(
                        "tx:bound", scope="transaction", lease=lease, timeout=0, backend=backend
                    ):
                        assert len(advisory_held("tx:bound")) == 1
            finally:
                occupy.release(lease)
            get_backend(backend).close()
    finally:
        connections[alias].close()
        del connections.settings[alias]


@pytest.mark.usefixtures("live_db")
def test_a_lease_of_the_callers_own_or_lost() -> None:
    """With ``lease=``, the key is held for the transaction while that lease is the key's
    live one; a lease taken over meanwhile is ``LeaseLost``."""
    lease = occupy.acquire("tx:own", owner="editor", backend=BACKEND)
    with (
        transaction.atomic(using=DATABASE),
        occupy.lock("tx:own", scope="transaction", lease=lease, timeout=0, backend=BACKEND),
    ):
        pass
    occupy.takeover("tx:own", owner="supervisor", backend=BACKEND)
    with (
        transaction.atomic(using=DATABASE),
        pytest.raises(occupy.LeaseLost),
        occupy.lock("tx:own", scope="transaction", lease=lease, timeout=0, backend=BACKEND),
    ):
        pass
    assert advisory_held("tx:own") == []
