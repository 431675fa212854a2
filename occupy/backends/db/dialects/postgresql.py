"""PostgreSQL: prepared statements, a session in UTC, and waiters woken by ``NOTIFY``.

Each queued claim listens on a channel of its own (``occupy_<id>``), and a release or a
cancelled waiter notifies only the next claim in line, so one release wakes one waiter
instead of the whole queue.
"""

from __future__ import annotations

import re
import time
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError

from occupy.backends.db.dialects.base import TABLE, Dialect, statement

if TYPE_CHECKING:
    from occupy.backends.db.own import OwnConnection

__all__ = [
    "PG_NEXT_IN_LINE",
    "PG_RELEASE_AND_WAKE",
    "PG_SESSION",
    "PG_WAKE_NEXT",
    "PostgreSQLDialect",
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
        parameters: digest (the slot), then :meth:`promote`'s.

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
            f"WITH holder AS MATERIALIZED (SELECT id FROM {TABLE} WHERE slot = %s "
            f"AND {self.live()} FOR KEY SHARE) "
            + self.promotion(
                "o.state = 'pending' AND o.id < %s", free=" AND NOT EXISTS (SELECT 1 FROM holder)"
            )
        )

    def sweep_batches(self, *, returning: bool = False) -> tuple[str, ...]:
        """Return the two statements of a sweep: claims whose expiry has passed, then
        claims that say they expire beyond :attr:`farthest` (see :meth:`expired`).

        Each half of :meth:`expired` is a range of the expiry index, walked in its order
        from the end nearest the range (an ``OR`` of the two, or :meth:`expired`'s
        ``IS TRUE``, would scan the table, or bitmap every expired row, once per batch).
        ``statement_timestamp()`` is one value for the whole statement, so the planner
        may compare the index with it. ``ANY(ARRAY(…))`` runs the batch's ``SELECT``
        once, then deletes the batch by row address (with ``id IN (SELECT …)`` the
        planner may hash-join the batch against every expired row). A row renewed
        meanwhile has a new address and a later expiry: the range, checked again on the
        row's latest version, keeps it.
        """
        keys = f" RETURNING {self.quote}key{self.quote}" if returning else ""
        return tuple(
            f"DELETE FROM {TABLE} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {TABLE} "
            f"WHERE {where} ORDER BY expires_at{order} LIMIT %s)) AND {where}{keys}"
            for where, order in (
                (f"expires_at <= {self.now}", ""),
                (f"expires_at > {self.farthest}", " DESC"),
            )
        )

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
