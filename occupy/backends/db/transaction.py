"""Keys held for the caller's own transaction: ``occupy.lock(key, scope="transaction")``.

On PostgreSQL the key's advisory lock (``pg_advisory_xact_lock``, a 64-bit id from the
SHA-256 of the key, see :func:`~occupy.backends.db.dialects.postgresql.advisory_id`) is
taken on the connection of the caller's ``transaction.atomic()`` on the lock table's
database, and held until that transaction commits or rolls back. Invariants:

- One statement when the key is free: ``SELECT occupy_hold(…)``, a PL/pgSQL function
  (migration 0001) that takes the lock (``pg_try_*``), then checks that no live lease
  holds the key in a snapshot taken after the lock was granted (a ``VOLATILE``
  function's queries each take a fresh one, READ COMMITTED), and gives the lock back
  by leaving its ``BEGIN … EXCEPTION`` block when one does. It returns why not instead
  of raising, so no savepoint of the caller's is needed; its plans are kept for the
  session. Plain SQL cannot do it in one statement: a statement's snapshot is taken
  before anything it calls, so "check, then ``pg_try``" misses a grant that commits
  between the two, and "``pg_try``, then check" cannot give the lock back.
- Waiting (and a database without the function): ``SAVEPOINT``, the lock, the check
  as a statement of its own (its snapshot taken after the lock was granted, so a lease
  granted while the lock was awaited is seen), ``RELEASE SAVEPOINT``, sent as one query.
- Every lease grant of the database backend takes the same advisory lock for its own
  short transaction (the dialect's grant guard), so a transaction lock and a lease of
  one key never overlap: a grant waits for the transaction to end, and the transaction
  lock finds the lease a grant committed.
- Whatever refuses the lock (taken by another transaction, a lease, a wait that ran out,
  the server's lock table full) raises inside the function's block or the savepoint,
  which is rolled back: the caller's transaction stays usable and holds nothing for
  the key. (Plain SQL has no
  ``RAISE``: the statements fail a cast whose text names the reason.)
- A key is never held for a transaction that reads from a snapshot older than the
  lock: REPEATABLE READ and SERIALIZABLE fix their snapshot at the first statement,
  which is at the latest the lock's own, taken before it waited. They are refused.

Waiting: for another transaction, in PostgreSQL's queue (``lock_timeout`` set for the
wait only, in the savepoint); for a lease, by polling every ``POLL_INTERVAL`` up to a
second apart, without holding anything, so a lease granted meanwhile goes first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.db import DatabaseError, connections, router

from occupy.backends.claims import digest
from occupy.backends.outcomes import occupied
from occupy.exceptions import LeaseLost, LockTimeout, StoreUnavailable, TransactionLockRefused
from occupy.leases import Lease, TransactionHold

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

    from occupy.backends.db.store import DatabaseStore

__all__ = ["hold_for_transaction", "refusal"]

#: The longest pause between two looks at a lease that holds the key.
LONGEST_PAUSE = 1.0


def refusal(store: DatabaseStore, database: str | None = None) -> str | None:
    """Return why the backend that holds ``store`` cannot hold a key for a transaction
    (on ``database``, the alias the caller's writes go to, if given), or ``None``."""
    if not store.dialect.holds_for_transaction:
        return (
            f"occupy backend {store.alias!r} keeps its claims in {store.describe()}: "
            "a key is held for a transaction only on PostgreSQL, whose transaction-scoped "
            "advisory locks end with the transaction on its own connection (MariaDB's "
            "GET_LOCK belongs to the session, not the transaction; SQLite has one write "
            "lock per file). Take a lease instead: occupy.lock(key) without scope."
        )
    if database is not None and database != store.database:
        return (
            f"occupy backend {store.alias!r} keeps its claims in database "
            f"{store.database!r}, not in {database!r}: a lock held by a transaction on "
            f"{database!r} would not exclude the leases of {store.database!r}."
        )
    writes_to = _routed_writes()
    if writes_to is not None and writes_to != store.database:
        return (
            f"occupy backend {store.alias!r} keeps its claims in database "
            f"{store.database!r}, but the database routers send writes to {writes_to!r}: "
            f"{store.database!r} is a replica for them, where a lock excludes nobody. "
            f"Set OPTIONS['DATABASE'] of backend {store.alias!r} to {writes_to!r}."
        )
    return None


def _routed_writes() -> str | None:
    """Return the database the routers send occupy's writes to, or ``None`` when no
    router says (Django's ``router.db_for_write`` would then answer ``"default"``,
    which says nothing about a backend on another alias)."""
    occupation = apps.get_model("occupy", "Occupation")
    for each in router.routers:
        chosen = getattr(each, "db_for_write", lambda model, **hints: None)(occupation)
        if chosen:
            return str(chosen)
    return None


def hold_for_transaction(
    store: DatabaseStore,
    key: str,
    *,
    timeout: float | None,
    lease: Lease | None = None,
    waiting: Callable[[], None] | None = None,
) -> TransactionHold:
    """Hold ``key`` for the transaction open on the database of ``store`` (the
    backend's), until it ends.

    ``timeout`` bounds the wait for another transaction or a lease (``0``: none,
    ``None``: for ever): raise :class:`~occupy.Occupied` or :class:`~occupy.LockTimeout`.
    With ``lease``, the caller holds the key's lease itself: the key is held for the
    transaction only while that lease is the key's live one, else
    :class:`~occupy.LeaseLost`. ``waiting`` is called once, when it first finds the key
    held and goes on to wait.
    """
    why = refusal(store)
    if why is not None:
        raise TransactionLockRefused(why, key=key)
    database = store.database
    connection = connections[database]
    if not connection.in_atomic_block:
        raise TransactionLockRefused(
            f"occupy.lock({key!r}, scope='transaction') holds the key until the "
            f"transaction on database {database!r} ends, and none is open: call it inside "
            f"transaction.atomic(using={database!r}).",
            key=key,
        )
    sql = store.dialect
    deadline = None if timeout is None else time.monotonic() + timeout
    ident, slot = sql.tx_id(key), digest(key)
    pause = store.poll_interval
    wait = False
    at_once = _holds_at_once(store, connection)
    while True:
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        if at_once and not wait:
            why = _hold_at_once(store, connection, key, [slot, ident, lease and lease.token])
        else:
            take = (sql.tx_wait(), [sql.tx_bound(left), ident]) if wait else (sql.tx_try(), [ident])
            check = (
                (sql.tx_no_lease(), [slot])
                if lease is None
                else (sql.tx_own_lease(), [slot, lease.token])
            )
            why = _run(store, connection, key, [take, check])
        if why is None:
            return TransactionHold(key=key, alias=store.alias, database=database)
        if why == "isolation":
            raise TransactionLockRefused(
                f"occupy.lock({key!r}, scope='transaction') was refused: the transaction on "
                f"database {database!r} runs under REPEATABLE READ or SERIALIZABLE, whose "
                "snapshot is fixed at its first statement, before the lock is granted, so "
                "it would not see what the previous holder committed. Run it under READ "
                "COMMITTED (Django's default), or take a lease (occupy.lock(key)) before "
                "the transaction begins.",
                key=key,
            )
        if why == "lost":
            raise LeaseLost(
                f"The lease on {key!r} is no longer held: it expired or was taken over.",
                key=key,
            )
        if why == "deadlock":
            raise LockTimeout(
                f"{key!r} was not held for the transaction: waiting for it would have "
                "deadlocked (the transaction holding it waits for a key this one holds). "
                "Take keys in one order (sorted).",
                key=key,
            )
        out_of_time = deadline is not None and time.monotonic() >= deadline
        if why == "busy":
            if timeout == 0:
                raise occupied(key, None, None, waited=None)
            wait = True  # wait in PostgreSQL's queue
            if waiting is not None:
                waiting()
                waiting = None  # told once, as the hook's contract says
            continue
        if why == "timeout":
            raise occupied(key, None, None, waited=timeout or None)
        # A lease holds the key.
        if timeout == 0 or out_of_time:
            found = store.holder_and_remaining(key)
            holder, remaining = (None, None) if found is None else found
            raise occupied(key, holder, remaining, waited=timeout or None)
        left = None if deadline is None else deadline - time.monotonic()
        if waiting is not None:
            waiting()
            waiting = None
        time.sleep(pause if left is None else max(0.0, min(pause, left)))
        pause = min(pause * 2, LONGEST_PAUSE)
        wait = False


def _run(
    store: DatabaseStore,
    connection: BaseDatabaseWrapper,
    key: str,
    statements: list[tuple[str, list[Any]]],
) -> str | None:
    """Run ``statements`` in the savepoint, as one query where the driver can send
    several (client-side binding), else one by one; return ``None`` when they passed
    (the savepoint released), else why not (it rolled back)."""
    sql = store.dialect
    savepoint = sql.tx_savepoint()
    parts: list[tuple[str, list[Any]]] = [(f"SAVEPOINT {savepoint}", [])]
    parts += statements
    parts.append((f"RELEASE SAVEPOINT {savepoint}", []))
    try:
        with connection.cursor() as cursor:
            if _sends_several(connection):
                cursor.execute("; ".join(s for s, _ in parts), [p for _, ps in parts for p in ps])
            else:
                for statement, params in parts:
                    for one in statement.split("; "):
                        count = one.count("%s")
                        cursor.execute(one, params[:count])
                        params = params[count:]
    except DatabaseError as e:
        why = sql.tx_refusal(e)
        try:
            with connection.cursor() as cursor:
                cursor.execute(f"ROLLBACK TO SAVEPOINT {savepoint}")
                cursor.execute(f"RELEASE SAVEPOINT {savepoint}")
        except DatabaseError as failed:
            raise store.statements.failure(key, failed) from e
        if why == "capacity":
            raise _lock_table_full(store, key) from e
        if why is None:
            raise store.statements.failure(key, e) from e
        return why
    return None


def _sends_several(connection: BaseDatabaseWrapper) -> bool:
    """Return whether one query may hold several statements with parameters: psycopg 2,
    or psycopg 3 with client-side binding (Django's default), not with
    ``server_side_binding``, whose statements are prepared one at a time."""
    options = connection.settings_dict.get("OPTIONS") or {}
    return not options.get("server_side_binding")


def _lock_table_full(store: DatabaseStore, key: str) -> StoreUnavailable:
    """Return the error for a server whose shared lock table is full."""
    return StoreUnavailable(
        f"occupy could not hold {key!r} for the transaction on database "
        f"{store.database!r}: the server's lock table is full (out of shared "
        "memory). Each held key takes a slot of it until its transaction ends; "
        "the server has max_locks_per_transaction x (max_connections + "
        "max_prepared_transactions) slots in all. Hold fewer keys per transaction, "
        "or raise max_locks_per_transaction (a server restart).",
        key=key,
        backend=store.alias,
    )


def _hold_at_once(
    store: DatabaseStore, connection: BaseDatabaseWrapper, key: str, params: list[Any]
) -> str | None:
    """Hold ``key`` if it is free now, in one statement (the ``occupy_hold`` function of
    migration 0001, which gives the lock back itself when a lease holds the key), given
    ``params``: its digest, its advisory id, the caller's lease token or ``None``; return
    ``None`` when held, else why not. Never leaves the caller's transaction aborted for
    a refusal: only a failure of the statement itself (a lost connection) raises."""
    try:
        with connection.cursor() as cursor:
            cursor.execute(store.dialect.tx_hold(), params)
            (why,) = cursor.fetchone()
    except DatabaseError as e:
        raise store.statements.failure(key, e) from e
    if why == "ok":
        return None
    if why == "capacity":
        raise _lock_table_full(store, key)
    return str(why)


#: Whether ``occupy_hold`` is there, by database (alias, server, name): looked up once.
_AT_ONCE: dict[tuple[str, Any, Any, Any], bool] = {}


def _holds_at_once(store: DatabaseStore, connection: BaseDatabaseWrapper) -> bool:
    """Return whether the database has the ``occupy_hold`` function (its migration is
    applied there); without it, a free key is held by the statements of the savepoint
    path. The look-up cannot fail, so it may run in the caller's transaction."""
    settings = connection.settings_dict
    where = (connection.alias, settings.get("HOST"), settings.get("PORT"), settings.get("NAME"))
    found = _AT_ONCE.get(where)
    if found is None:
        try:
            with connection.cursor() as cursor:
                cursor.execute(store.dialect.tx_has_hold())
                found = bool(cursor.fetchone()[0])
        except DatabaseError as e:
            raise store.statements.failure("", e) from e
        _AT_ONCE[where] = found
    return found
