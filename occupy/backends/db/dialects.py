"""The SQL of the database backend, per vendor.

Hot paths are single hand-written statements, because the ORM would need several
round trips for what one ``INSERT … SELECT … WHERE NOT EXISTS`` does atomically. Every
time is the database's own clock; nothing here compares app-server clocks.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from django.db import OperationalError

__all__ = ["PG_RELEASE_AND_WAKE", "PG_SESSION", "PG_WAKE_NEXT", "Dialect", "dialect_for",
           "is_busy"]

TABLE = "occupy_occupation"
# "key" is reserved in MySQL; {q} is the vendor's identifier quote.
COLUMNS = (
    "{q}key{q}, digest, slot, content_type_id, object_id, owner, token, state, fence, depth, "
    "expires_at, created_at"
)


@dataclass(frozen=True)
class Dialect:
    """What differs between vendors, and the statements built from it."""

    vendor: str
    #: The store's now.
    now: str
    #: The store's now plus ``%s`` (see :meth:`seconds`).
    later: str
    #: The store's clock in microseconds since the epoch: the floor of every fence.
    clock_us: str
    greatest: str = "GREATEST"
    insert_ignore: str = "INSERT INTO"
    on_conflict: str = "ON CONFLICT DO NOTHING"
    #: Whether ``UPDATE … RETURNING`` exists (MariaDB has it for INSERT and DELETE only,
    #: SQLite from 3.35).
    update_returning: bool = True
    quote: str = '"'
    #: The FROM clause of a ``SELECT`` of constants that has a ``WHERE`` (MySQL's).
    from_nothing: str = ""

    @property
    def columns(self) -> str:
        """Return the insert column list, quoted for the vendor."""
        return COLUMNS.format(q=self.quote)

    def seconds(self, seconds: float) -> Any:
        """Return the parameter that :attr:`later` takes for ``seconds``."""
        if self.vendor == "mysql":
            return round(seconds * 1_000_000)
        if self.vendor == "sqlite":
            return f"+{seconds:.6f} seconds"
        return seconds

    def object_id_text(self, column: str) -> Any:
        """Return ``column`` (text) as an ORM expression that compares equal with a
        ``Cast(..., TextField())`` of a primary key: cast too on MySQL, so that columns
        of different collations never meet."""
        from django.db.models import F, TextField
        from django.db.models.functions import Cast

        return Cast(column, TextField()) if self.vendor == "mysql" else F(column)

    def to_datetime(self, value: Any) -> datetime:
        """Return a column or expression value of the store's time as an aware UTC datetime."""
        if isinstance(value, str):  # SQLite keeps naive UTC text
            value = datetime.fromisoformat(value)
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)

    def live(self, column: str = "expires_at") -> str:
        """Return SQL that is true while ``column`` is in the future, as a filter on rows
        found by key, digest or id.

        On PostgreSQL it is written so that it cannot use the expiry index: statements are
        prepared and their plans cached, and a plan made while the statistics call the
        table empty could otherwise walk that index through every live claim to find one.
        """
        test = f"{column} > {self.now}"
        return f"({test}) IS TRUE" if self.vendor == "postgresql" else test

    def expired(self, column: str = "expires_at") -> str:
        """Return SQL that is true once ``column`` has passed (see :meth:`live`)."""
        test = f"{column} <= {self.now}"
        return f"({test}) IS TRUE" if self.vendor == "postgresql" else test

    def fence_expr(self) -> str:
        """Return SQL for the next fence of the key whose digest is the parameter.

        The store's clock in microseconds is the floor, so a fence survives restarts,
        sweeps and releases (the key's rows are gone, the clock has moved on); one
        more than the highest fence still recorded for the key covers a clock that
        stepped back while rows exist.
        """
        return (
            f"{self.greatest}({self.clock_us}, COALESCE((SELECT MAX(f.fence) FROM {TABLE} f "
            f"WHERE f.digest = %s), 0) + 1)"
        )

    # --- statements -------------------------------------------------------------
    def grant_if_free(self) -> str:
        """Insert a granted claim if the key has no live claim at all (the fast path).

        Parameters: key, digest, digest (the slot), content_type_id, object_id, owner,
        token, seconds, digest. One pass over the key's claims (its digest index) finds
        both whether any is live (pending or using: then nothing is inserted) and the
        highest fence recorded, the floor of the new one (see :meth:`fence_expr`). The
        unique ``slot`` refuses the claim if a concurrent grant or an expired holder
        holds the slot.
        """
        return (
            f"{self.insert_ignore} {TABLE} ({self.columns}) "
            f"SELECT %s, %s, %s, %s, %s, %s, %s, 'using', "
            f"{self.greatest}({self.clock_us}, COALESCE(k.top, 0) + 1), 1, "
            f"{self.later}, {self.now} FROM (SELECT MAX(fence) AS top, "
            f"MAX(CASE WHEN expires_at > {self.now} THEN 1 ELSE 0 END) AS live "
            f"FROM {TABLE} WHERE digest = %s) k WHERE COALESCE(k.live, 0) = 0 "
            f"{self.on_conflict} RETURNING fence, expires_at"
        )

    def seize(self) -> str:
        """Hand the live using claim of a token to a new owner and token with a higher
        fence, as a new grant (takeover). Parameters: owner, token, digest (fence),
        seconds, digest (slot), the current token. ``RETURNING fence, expires_at``
        where ``UPDATE … RETURNING`` exists."""
        returning = " RETURNING fence, expires_at" if self.update_returning else ""
        return (
            f"UPDATE {TABLE} SET owner = %s, token = %s, fence = {self.fence_expr()}, "
            f"depth = 1, expires_at = {self.later}, created_at = {self.now} "
            f"WHERE slot = %s AND token = %s AND {self.live()}{returning}"
        )

    def grant_over_queue(self) -> str:
        """Insert a granted claim whatever is queued (takeover of a key nobody holds);
        the unique ``slot`` refuses it if a holder got there first. Parameters: key,
        digest, digest (the slot), content_type_id, object_id, owner, token, digest
        (the fence), seconds. (SQLite needs the ``WHERE`` to parse ``ON CONFLICT``.)"""
        return (
            f"{self.insert_ignore} {TABLE} ({self.columns}) "
            f"SELECT %s, %s, %s, %s, %s, %s, %s, 'using', {self.fence_expr()}, 1, "
            f"{self.later}, {self.now} {self.from_nothing} WHERE 1 = 1 "
            f"{self.on_conflict} RETURNING fence, expires_at"
        )

    def holding(self) -> str:
        """Token, owner, expiry, fence and grant time of a digest's live using claim."""
        return (
            f"SELECT token, owner, expires_at, fence, created_at FROM {TABLE} "
            f"WHERE slot = %s AND {self.live()}"
        )

    def enqueue(self) -> str:
        """Insert a pending claim (the ticket); parameters: key, digest, content_type_id,
        object_id, owner, token, seconds."""
        return (
            f"INSERT INTO {TABLE} ({self.columns}) VALUES (%s, %s, NULL, %s, %s, %s, %s, "
            f"'pending', NULL, 1, {self.later}, {self.now}) RETURNING id"
        )

    def promote(self) -> str:
        """Promote pending claim ``id`` to using if it is the oldest live claim and no
        live claim is using the key. Parameters: digest, digest, seconds, id, digest, id.
        Where ``UPDATE … RETURNING`` exists, the promoted claim's fence and expiry come
        back with it (one round trip less between a release and the next grant).

        The seed checks pending claims before the using claim because they are two
        reads; here both are one NOT EXISTS in the same statement as the write, and
        ties go to the lowest id (first come, first served) instead of random sleeps.
        """
        returning = " RETURNING fence, expires_at" if self.update_returning else ""
        return (
            f"UPDATE {TABLE} SET state = 'using', slot = %s, fence = {self.fence_expr()}, "
            f"expires_at = {self.later}, created_at = {self.now} WHERE id = %s "
            f"AND state = 'pending' "
            f"AND {self.live()} AND NOT EXISTS (SELECT 1 FROM {TABLE} o "
            f"WHERE o.digest = %s AND {self.live('o.expires_at')} "
            f"AND (o.state = 'using' OR o.id < %s)){returning}"
        )

    def heartbeat(self) -> str:
        """Keep pending claim ``id`` alive while its owner waits; parameters: seconds, id."""
        return (
            f"UPDATE {TABLE} SET expires_at = {self.later} WHERE id = %s "
            f"AND state = 'pending' AND {self.live()}"
        )

    def queued(self) -> str:
        """The id of the pending claim with a token; digest, token."""
        return f"SELECT id FROM {TABLE} WHERE digest = %s AND token = %s AND state = 'pending'"

    def resume(self) -> str:
        """Add levels (0 or 1) to the live using claim of a token and keep it at least
        ``seconds`` more; parameters: levels, seconds, digest, token. Where
        ``UPDATE … RETURNING`` exists, the claim's owner, fence, expiry and depth come
        back with it (else read them with :meth:`resumed`)."""
        returning = " RETURNING owner, fence, expires_at, depth" if self.update_returning else ""
        return (
            f"UPDATE {TABLE} SET depth = depth + %s, "
            f"expires_at = {self.greatest}(expires_at, {self.later}) "
            f"WHERE slot = %s AND token = %s AND {self.live()}{returning}"
        )

    def resumed(self) -> str:
        """Owner, fence, expiry and depth of the live using claim of a token; digest,
        token (after :meth:`resume` where ``UPDATE … RETURNING`` does not exist)."""
        return (
            f"SELECT owner, fence, expires_at, depth FROM {TABLE} WHERE slot = %s "
            f"AND token = %s AND {self.live()}"
        )

    def claims_of_key(self) -> str:
        """All claims on a digest with the store's now: id, owner, token, state, fence,
        depth, expires_at, now; in no particular order (an ORDER BY id could lead a
        cached plan to walk the primary key through every claim of every key)."""
        return (
            f"SELECT id, owner, token, state, fence, depth, expires_at, {self.now} "
            f"FROM {TABLE} WHERE digest = %s"
        )

    def purge_expired_of_key(self) -> str:
        """Delete the expired claims of a digest."""
        return f"DELETE FROM {TABLE} WHERE digest = %s AND {self.expired()}"

    def granted(self) -> str:
        """Fence, expiry and depth of the live using claim with a token; digest, token."""
        return (
            f"SELECT fence, expires_at, depth FROM {TABLE} WHERE slot = %s AND token = %s "
            f"AND {self.live()}"
        )

    def release(self) -> str:
        """Delete the live last level of a lease; digest, token."""
        return (
            f"DELETE FROM {TABLE} WHERE slot = %s AND token = %s AND depth = 1 "
            f"AND {self.live()}"
        )

    def unwind(self) -> str:
        """Remove one of several levels of a live lease, if it still has the depth read
        (a compare-and-set: run again after a lost reply, it takes no second level);
        digest, token, depth."""
        return (
            f"UPDATE {TABLE} SET depth = depth - 1 WHERE slot = %s AND token = %s "
            f"AND depth = %s AND depth > 1 AND {self.live()}"
        )

    def forget(self) -> str:
        """Delete whatever claim a token still has on a digest (cancel, late release)."""
        return f"DELETE FROM {TABLE} WHERE digest = %s AND token = %s"

    def extend(self) -> str:
        """Set a live lease to expire later; seconds, digest, token."""
        return (
            f"UPDATE {TABLE} SET expires_at = {self.later} WHERE slot = %s AND token = %s "
            f"AND {self.live()}"
        )

    def holder(self) -> str:
        """Owner, expiry, fence, grant time and now of a digest's live using claim."""
        return (
            f"SELECT owner, expires_at, fence, created_at, {self.now} FROM {TABLE} "
            f"WHERE slot = %s AND {self.live()}"
        )

    def count_expired(self) -> str:
        """Count every expired claim."""
        return f"SELECT COUNT(*) FROM {TABLE} WHERE expires_at <= {self.now}"

    def sweep_batch(self) -> str:
        """Delete up to ``%s`` expired claims without loading them.

        The outer condition is checked again on each row, so a claim renewed while the
        batch runs is kept.
        """
        if self.vendor == "mysql":
            return (
                f"DELETE FROM {TABLE} WHERE expires_at <= {self.now} "
                f"ORDER BY expires_at LIMIT %s"
            )
        if self.vendor == "postgresql":
            # ANY(ARRAY(…)) runs the batch's SELECT once, then deletes the batch by row
            # address (a TID scan: no plan can do otherwise). With ``id IN (SELECT …)``
            # the planner may hash-join the batch against a scan of every expired row,
            # once per batch: quadratic in the backlog (measured: 60,000 rows/s instead
            # of 300,000 on 100,000 rows). A row renewed meanwhile has a new address and
            # a later expiry: the expiry, checked again on the row's latest version, keeps it.
            return (
                f"DELETE FROM {TABLE} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {TABLE} "
                f"WHERE expires_at <= {self.now} LIMIT %s)) AND expires_at <= {self.now}"
            )
        return (
            f"DELETE FROM {TABLE} WHERE id IN (SELECT id FROM {TABLE} "
            f"WHERE expires_at <= {self.now} LIMIT %s) AND expires_at <= {self.now}"
        )


# PostgreSQL, on the backend's own connections: every statement finds its rows through an
# index (a key's digest or slot, an id, the expiry for sweeps). A lock table is small and
# churns, so its statistics often say "empty"; a plan made then (and kept, when prepared)
# would scan the whole table on every lock once it has grown. And the session is in UTC:
# with USE_TZ = False Django puts it in TIME_ZONE and reads timestamptz values as naive
# local times, which Dialect.to_datetime would label UTC (off by the zone's offset).
PG_SESSION = (
    "SELECT set_config('enable_seqscan', 'off', false), set_config('TimeZone', 'UTC', false)"
)
# PostgreSQL: the oldest live queued claim on a digest: the one to wake. The key's claims
# are gathered first (MATERIALIZED: through the digest index), because "ORDER BY id
# LIMIT 1" over the table could be planned, and the plan kept, as a walk of the primary
# key through every older claim of every key.
PG_NEXT_IN_LINE = (
    f"WITH queued AS MATERIALIZED (SELECT o.id FROM {TABLE} o WHERE o.digest = {{digest}} "
    "AND o.state = 'pending' AND (o.expires_at > statement_timestamp()) IS TRUE) "
    "SELECT min(id) AS id FROM queued"
)
# PostgreSQL: release and wake the next claim in line, if any, in one statement.
PG_RELEASE_AND_WAKE = (
    f"WITH gone AS (DELETE FROM {TABLE} WHERE slot = %s AND token = %s AND depth = 1 "
    "AND (expires_at > statement_timestamp()) IS TRUE RETURNING digest), "
    "woken AS (SELECT pg_notify('occupy_' || n.id, '') FROM ("
    + PG_NEXT_IN_LINE.format(digest="(SELECT digest FROM gone)")
    + ") n WHERE n.id IS NOT NULL) "
    "SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM woken)"
)
# PostgreSQL: wake the next claim in line (after a queued claim left).
PG_WAKE_NEXT = (
    "SELECT count(*) FROM (SELECT pg_notify('occupy_' || n.id, '') FROM ("
    + PG_NEXT_IN_LINE.format(digest="%s")
    + ") n WHERE n.id IS NOT NULL) w"
)


def _sqlite_clock_us() -> int:
    return time.time_ns() // 1000


SQLITE_FUNCTIONS = {"occupy_clock_us": _sqlite_clock_us}

_DIALECTS = {
    "postgresql": Dialect(
        vendor="postgresql",
        now="statement_timestamp()",
        later="(statement_timestamp() + %s * interval '1 second')",
        clock_us="(extract(epoch from clock_timestamp()) * 1000000)::bigint",
    ),
    "mysql": Dialect(
        vendor="mysql",
        now="UTC_TIMESTAMP(6)",
        later="(UTC_TIMESTAMP(6) + INTERVAL %s MICROSECOND)",
        clock_us="TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))",
        insert_ignore="INSERT IGNORE INTO",
        on_conflict="",
        from_nothing="FROM DUAL",
        quote="`",
        update_returning=False,
    ),
    "sqlite": Dialect(
        vendor="sqlite",
        now="strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')",
        later="strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', %s)",
        # Called inside the statement, under SQLite's write lock, so two grants of a
        # key read it in the order they are granted.
        clock_us="occupy_clock_us()",
        greatest="MAX",
        update_returning=sqlite3.sqlite_version_info >= (3, 35),
    ),
}


def is_busy(vendor: str, error: BaseException | None) -> bool:
    """Return whether ``error`` says that SQLite is write-locked by another connection."""
    return vendor == "sqlite" and isinstance(error, OperationalError) and (
        "locked" in str(error) or "busy" in str(error)
    )


def dialect_for(vendor: str) -> Dialect:
    """Return the dialect for a Django ``connection.vendor``."""
    try:
        return _DIALECTS[vendor]
    except KeyError:
        raise NotImplementedError(
            f"occupy's DatabaseBackend supports PostgreSQL, MySQL/MariaDB and SQLite, "
            f"not {vendor!r}."
        ) from None
