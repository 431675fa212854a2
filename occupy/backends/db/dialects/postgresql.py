"""PostgreSQL: prepared statements, a session in UTC, and waiters woken by ``NOTIFY``.

Each queued claim listens on a channel of its own (``occupy_<id>``), and a release or a
cancelled waiter notifies only the next claim in line, so one release wakes one waiter
instead of the whole queue.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError

from occupy.backends.db.dialects.base import TABLE, Dialect, statement

if TYPE_CHECKING:
    from occupy.backends.db.own import OwnConnection

__all__ = [
    "PG_GUARD",
    "PG_NEXT_IN_LINE",
    "PG_RELEASE_AND_WAKE",
    "PG_SESSION",
    "PG_WAKE_NEXT",
    "TX_SAVEPOINT",
    "TX_TRY",
    "TX_WAIT",
    "PostgreSQLDialect",
    "advisory_id",
]

# Every statement finds its rows through an index (a key's digest or slot, an id, the
# expiry for sweeps). A lock table is small and churns, so its statistics often say
# "empty"; a plan made then (and kept, when prepared) would scan the whole table on
# every lock once it has grown. And the session is in UTC: with USE_TZ = False Django
# puts it in TIME_ZONE and reads timestamptz values as naive local times, which
# Dialect.to_datetime would label UTC (off by the zone's offset).
PG_SESSION = (
    "SELECT set_config('enable_seqscan', 'off', false), set_config('TimeZone', 'UTC', false)"
)
# The oldest live queued claim on a digest: the one to wake. The key's claims are
# gathered first (MATERIALIZED: through the digest index), because "ORDER BY id LIMIT 1"
# over the table could be planned, and the plan kept, as a walk of the primary key
# through every older claim of every key.
PG_NEXT_IN_LINE = (
    f"WITH queued AS MATERIALIZED (SELECT o.id FROM {TABLE} o WHERE o.digest = {{digest}} "
    "AND o.state = 'pending' AND (o.expires_at > statement_timestamp()) IS TRUE) "
    "SELECT min(id) AS id FROM queued"
)
# Release and wake the next claim in line, if any, in one statement.
PG_RELEASE_AND_WAKE = (
    f"WITH gone AS (DELETE FROM {TABLE} WHERE slot = %s AND token = %s AND depth = 1 "
    "AND (expires_at > statement_timestamp()) IS TRUE RETURNING digest), "
    "woken AS (SELECT pg_notify('occupy_' || n.id, '') FROM ("
    + PG_NEXT_IN_LINE.format(digest="(SELECT digest FROM gone)")
    + ") n WHERE n.id IS NOT NULL) "
    "SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM woken)"
)
# Wake the next claim in line (after a queued claim left).
PG_WAKE_NEXT = (
    "SELECT count(*) FROM (SELECT pg_notify('occupy_' || n.id, '') FROM ("
    + PG_NEXT_IN_LINE.format(digest="%s")
    + ") n WHERE n.id IS NOT NULL) w"
)
#: SQLSTATEs of a statement that did nothing and may run again: a serialization
#: failure, a deadlock.
TRANSIENT = frozenset({"40001", "40P01"})
UNDEFINED_TABLE = "42P01"
#: ``lock_not_available``: a lock wait ran past ``lock_timeout``.
LOCK_NOT_AVAILABLE = "55P03"
#: ``out_of_memory``: the server's shared lock table is full
#: (``max_locks_per_transaction``).
OUT_OF_MEMORY = "53200"
#: The grant guard (see :attr:`Dialect.holds_for_transaction`): the key's transaction
#: lock, waited for in PostgreSQL's own queue, bounded by a ``lock_timeout`` set for
#: the grant's own transaction (one statement in autocommit); parameters: the key's
#: advisory id, the bound. ``OFFSET 0`` keeps the bound set before the lock is asked.
PG_GUARD = (
    "WITH occupy_guard AS MATERIALIZED (SELECT pg_advisory_xact_lock(%s::bigint) AS g "
    "FROM (SELECT set_config('lock_timeout', %s, true) OFFSET 0) b) "
)


#: The savepoint a transaction lock is taken in: a lock that cannot be had, or is
#: found leased, is given back by rolling back to it, leaving the caller's transaction
#: usable (an error in a transaction without one would abort it).
TX_SAVEPOINT = "occupy_lock"
#: What a transaction lock's statements raise, in the text of a failed cast (plain SQL
#: has no RAISE), so that the savepoint is released in the same round trip only when
#: the lock was granted: the transaction is not READ COMMITTED, the key's advisory lock
#: is taken (``pg_try_*``), a live lease holds the key, the caller's lease does not.
TX_REFUSED = {
    "isolation": "occupy-isolation",
    "busy": "occupy-busy",
    "leased": "occupy-leased",
    "lost": "occupy-lost",
}
_TX_RAISE = "CAST('{marker}:' || current_setting('transaction_isolation') AS int)"
_TX_ISOLATION = (
    "CASE WHEN current_setting('transaction_isolation') <> 'read committed' "
    f"THEN {_TX_RAISE.format(marker=TX_REFUSED['isolation'])} ELSE 0 END"
)
#: Take the key's advisory lock at once or raise (``timeout=0``); parameter: its id.
TX_TRY = (
    f"SELECT CASE WHEN current_setting('transaction_isolation') <> 'read committed' "
    f"THEN {_TX_RAISE.format(marker=TX_REFUSED['isolation'])} "
    "WHEN NOT pg_try_advisory_xact_lock(%s::bigint) "
    f"THEN {_TX_RAISE.format(marker=TX_REFUSED['busy'])} END"
)
#: Wait for the key's advisory lock in PostgreSQL's queue, up to the ``lock_timeout``
#: set before (``SET LOCAL``, as ``set_config(…, true)``, which takes a parameter; the
#: caller's is kept in ``occupy.lock_timeout`` and put back after);
#: parameters: the bound, the id. The isolation is checked before the wait.
TX_WAIT = (
    "SELECT set_config('occupy.lock_timeout', current_setting('lock_timeout'), true); "
    "SELECT set_config('lock_timeout', %s, true); "
    f"SELECT pg_advisory_xact_lock(%s::bigint) FROM (SELECT {_TX_ISOLATION} OFFSET 0) i; "
    "SELECT set_config('lock_timeout', current_setting('occupy.lock_timeout'), true)"
)


def advisory_id(key: str) -> int:
    """Return the advisory lock id of ``key``: the first 64 bits of the SHA-256 of the
    key in occupy's own hash domain (a prefix no other key text can produce), as the
    signed ``bigint`` ``pg_advisory_xact_lock`` takes. Never a 32-bit hash: those
    collide by the birthday bound at about 10^5 keys; two of 10^6 keys share an id with
    a chance of about 3 in 100 million."""
    raw = hashlib.sha256(b"occupy advisory lock\x00" + key.encode("utf-8")).digest()
    return int.from_bytes(raw[:8], "big", signed=True)


def _sqlstate(error: BaseException | None) -> str | None:
    """Return the SQLSTATE of a Django database error (psycopg 3 or psycopg2)."""
    cause = getattr(error, "__cause__", None)
    state = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
    return state if isinstance(state, str) else None


class PostgreSQLDialect(Dialect):
    """PostgreSQL: the statements' clock is ``statement_timestamp()``."""

    vendor = "postgresql"
    now = "statement_timestamp()"
    later = "(statement_timestamp() + %s * interval '1 second')"
    clock_us = "(extract(epoch from clock_timestamp()) * 1000000)::bigint"
    wakes_waiters = True
    holds_for_transaction = True
    guard_with = PG_GUARD
    guard_join = "occupy_guard, "
    guard_update = " FROM occupy_guard"
    guard_from = "FROM occupy_guard"

    def guard_params(self, key: str, left: float | None) -> list[Any]:
        """Return the key's advisory id and the guard's ``lock_timeout`` (``0``: no
        bound), for the grant guard."""
        return [advisory_id(key), self.tx_bound(left)]

    def is_guard_timeout(self, error: BaseException | None) -> bool:
        """Return whether ``error`` is ``lock_not_available`` (the guard's bound)."""
        return _sqlstate(error) == LOCK_NOT_AVAILABLE

    def live(self, column: str = "expires_at") -> str:
        """Return SQL that is true while ``column`` is in the future.

        Written so that it cannot use the expiry index: statements are prepared and
        their plans cached, and a plan made while the statistics call the table empty
        could otherwise walk that index through every live claim to find one.
        """
        return f"({super().live(column)}) IS TRUE"

    def expired(self, column: str = "expires_at") -> str:
        """Return SQL that is true once ``column`` has passed (see :meth:`live`)."""
        return f"({super().expired(column)}) IS TRUE"

    def release_and_wake(self) -> str:
        """Release and wake the next claim in line, in one statement."""
        return PG_RELEASE_AND_WAKE

    def released(self, rowcount: int, rows: list[Any]) -> int:
        """Return how many claims :meth:`release_and_wake` deleted (its first column)."""
        return int(rows[0][0])

    @statement
    def promote_when_released(self) -> str:
        """Promote as :meth:`promote` does, once a release in flight has committed;
        parameters: the grant guard's, digest (the slot), then :meth:`promote`'s
        (without the guard's).

        A release picks the next in line from its statement's snapshot. One that began
        before a claim was committed does not see it and notifies nobody; one that
        notified a waiter that was just leaving has woken nobody either (the leaving
        waiter wakes the next, who reads the key held if the release has not committed
        yet). So a promotion locks the key's live holder row (``FOR KEY SHARE``), which
        waits for a release in flight to commit, and reads the key as free if the row is
        gone. Only the queue is read from the statement's snapshot; a holder that came in
        after it makes the unique ``slot`` refuse the promotion.
        """
        return (
            f"{PG_GUARD.rstrip()}, holder AS MATERIALIZED (SELECT id FROM {TABLE} WHERE "
            f"slot = %s AND {self.live()} FOR KEY SHARE) "
            + self.promotion(
                "o.state = 'pending' AND o.id < %s", free=" AND NOT EXISTS (SELECT 1 FROM holder)"
            )
        )

    def sweep_windows(self, *, returning: bool = False) -> tuple[str, str]:
        """Return the probe and the window of a sweep of the claims whose expiry has
        passed (:mod:`occupy.backends.db.windows`); ``statement_timestamp()`` is one
        value for the whole statement, so each bound is a range of the expiry index."""
        keys = f" RETURNING {self.quote}key{self.quote}" if returning else ""
        passed = (
            f"expires_at >= COALESCE(%s, '-infinity'::timestamptz) AND expires_at <= {self.now}"
        )
        return (
            f"SELECT (SELECT min(expires_at) FROM {TABLE} WHERE {passed}), (SELECT "
            f"expires_at FROM {TABLE} WHERE {passed} ORDER BY expires_at OFFSET %s LIMIT 1), "
            f"{self.now}",
            f"DELETE FROM {TABLE} WHERE expires_at >= %s AND expires_at < %s "
            f"AND expires_at <= {self.now}{keys}",
        )

    def sweep_batches(self, *, returning: bool = False) -> tuple[str, ...]:
        """Return the statement that sweeps the claims that say they expire beyond
        :attr:`farthest` (see :meth:`expired`), after :meth:`sweep_windows`: the range of
        the expiry index past it, walked from its end. ``ANY(ARRAY(…))`` runs the batch's
        ``SELECT`` once, then deletes by row address (``id IN (SELECT …)`` may be
        hash-joined against every such row). A row renewed meanwhile has a new address
        and a live expiry, and the range, checked again on its latest version, keeps it.
        """
        keys = f" RETURNING {self.quote}key{self.quote}" if returning else ""
        where = f"expires_at > {self.farthest}"
        return (
            f"DELETE FROM {TABLE} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {TABLE} "
            f"WHERE {where} ORDER BY expires_at DESC LIMIT %s)) AND {where}{keys}",
        )

    # --- transaction locks --------------------------------------------------------------
    def tx_savepoint(self) -> str:
        """Return the name of the savepoint a transaction lock is taken in."""
        return TX_SAVEPOINT

    def tx_try(self) -> str:
        """Return the statement that takes the key's advisory lock at once or raises
        ``busy``; parameter: the advisory id (see :data:`TX_TRY`)."""
        return TX_TRY

    def tx_hold(self) -> str:
        """Return the call of ``occupy_hold`` (migration 0001): holds a free key at once,
        else returns why not; parameters: digest, advisory id, the caller's lease token
        (``NULL``: no lease of its own)."""
        return "SELECT occupy_hold(%s, %s::bigint, %s)"

    def tx_has_hold(self) -> str:
        """Return the statement that says whether ``occupy_hold`` exists."""
        return "SELECT to_regprocedure('occupy_hold(text,bigint,text)') IS NOT NULL"

    def tx_wait(self) -> str:
        """Return the statements that wait for the key's advisory lock up to a bound;
        parameters: the bound, the advisory id (see :data:`TX_WAIT`)."""
        return TX_WAIT

    def tx_bound(self, seconds: float | None) -> str:
        """Return ``seconds`` as a ``lock_timeout`` (``"0"``: no bound)."""
        return "0" if seconds is None else f"{max(1, math.ceil(seconds * 1000))}ms"

    @statement
    def tx_no_lease(self) -> str:
        """Raise ``leased`` if a live lease holds the key; parameter: digest. Run in a
        statement after the lock's, so that its snapshot is taken after the lock was
        granted (READ COMMITTED): a grant that committed while the lock was awaited is
        seen."""
        return (
            f"SELECT CASE WHEN EXISTS (SELECT 1 FROM {TABLE} WHERE slot = %s AND "
            f"{self.live()}) THEN {_TX_RAISE.format(marker=TX_REFUSED['leased'])} END"
        )

    @statement
    def tx_own_lease(self) -> str:
        """Raise ``lost`` unless the live lease of the key is the caller's (its token);
        parameters: digest, token (see :meth:`tx_no_lease`)."""
        return (
            f"SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM {TABLE} WHERE slot = %s AND "
            f"token = %s AND {self.live()}) "
            f"THEN {_TX_RAISE.format(marker=TX_REFUSED['lost'])} END"
        )

    def tx_id(self, key: str) -> int:
        """Return the advisory lock id of ``key`` (see :func:`advisory_id`)."""
        return advisory_id(key)

    def tx_refusal(self, error: BaseException) -> str | None:
        """Return which of :data:`TX_REFUSED` a transaction lock's statement raised, or
        ``"timeout"`` (its ``lock_timeout``), ``"capacity"`` (the server's lock table is
        full), ``"deadlock"``; ``None`` for any other failure."""
        state = _sqlstate(error)
        if state == LOCK_NOT_AVAILABLE:
            return "timeout"
        if state == OUT_OF_MEMORY:
            return "capacity"
        if state == "40P01":
            return "deadlock"
        text = str(error)
        return next((name for name, marker in TX_REFUSED.items() if marker in text), None)

    # --- waking waiters -----------------------------------------------------------------
    def listen(self, channel: str) -> str:
        """Return ``LISTEN`` on ``channel``."""
        return f"LISTEN {channel}"

    def unlisten(self, channel: str) -> str:
        """Return ``UNLISTEN`` of ``channel``."""
        return f"UNLISTEN {channel}"

    def wake_next(self) -> str:
        """Return the statement that notifies the next claim in line on a digest."""
        return PG_WAKE_NEXT

    def hears_notifications(self) -> bool:
        """Return whether the driver can wait for a notification with a timeout and
        keeps those that arrive while a statement runs: psycopg 3.2.4 or later (psycopg2
        cannot wait; psycopg 3.1 has no timeout; 3.2.0 to 3.2.3 lose such
        notifications). Elsewhere waiters poll."""
        from django.db.backends.postgresql.psycopg_any import is_psycopg3

        if not is_psycopg3:
            return False
        import psycopg

        version = tuple(int(part) for part in re.findall(r"\d+", psycopg.__version__)[:3])
        return version >= (3, 2, 4)

    def await_wake(self, own: OwnConnection, channel: str, seconds: float) -> None:
        """Block until ``channel`` is notified or ``seconds`` pass; polls with a driver
        that cannot wait for a notification with a timeout (psycopg older than 3.2,
        psycopg2). A connection that fails is closed: the next try reconnects."""
        wrapper = own.wrapper
        try:
            # Notifications for channels this connection listened on before are stale.
            for note in wrapper.connection.notifies(timeout=seconds):
                if note.channel == channel:
                    break
        except TypeError:
            time.sleep(seconds)
        except wrapper.Database.Error:  # type: ignore[attr-defined]
            with suppress(DatabaseError):
                wrapper.close()

    # --- connections --------------------------------------------------------------------
    def connection_options(
        self, options: dict[str, Any], *, prepare: bool
    ) -> tuple[dict[str, Any], bool]:
        """With psycopg 3 and ``prepare``, bind parameters on the server and prepare each
        statement the second time it runs on a connection (one-off statements, such as
        ``LISTEN`` on a claim's own channel, are never prepared). Never on a connection
        from Django's pool, which is shared with the app."""
        if not prepare or "pool" in options:
            return options, False
        from django.db.backends.postgresql.psycopg_any import is_psycopg3

        if not is_psycopg3:
            return options, False
        return {**options, "server_side_binding": True, "prepare_threshold": 1}, True

    def has_rows(self, cursor: Any) -> bool:
        """Return whether the statement returned rows; with psycopg 3, from the result's
        field count: ``description`` builds a column object per field every time."""
        result = getattr(cursor, "pgresult", None)
        if result is None:
            return cursor.description is not None
        return bool(result.nfields)

    def on_connect(self, own: OwnConnection) -> None:
        """Set the session up: index lookups only, and UTC (see ``PG_SESSION``)."""
        with own.wrapper.cursor() as cursor:
            cursor.execute(PG_SESSION)

    def server_session(self, own: OwnConnection) -> int:
        """Return the server process id of the connection's session."""
        return int(own.wrapper.connection.info.backend_pid)

    def end_session(self) -> str:
        """Return the statement that ends a server process's session."""
        return "SELECT pg_terminate_backend(%s)"

    # --- errors -------------------------------------------------------------------------
    def is_transient(self, error: BaseException | None) -> bool:
        """Return whether ``error`` is a serialization failure or a deadlock."""
        return _sqlstate(error) in TRANSIENT

    def is_missing_table(self, error: BaseException | None) -> bool:
        """Return whether ``error`` is ``undefined_table``."""
        return _sqlstate(error) == UNDEFINED_TABLE
