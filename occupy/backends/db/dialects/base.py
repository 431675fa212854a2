"""The SQL every vendor shares, and the hooks by which a vendor's dialect differs.

Hot paths are single hand-written statements, because the ORM would need several
round trips for what one ``INSERT … SELECT … WHERE NOT EXISTS`` does atomically. Every
time is the database's own clock; nothing here compares app-server clocks.

A :class:`Dialect` is to the database backend what Django's ``DatabaseOperations`` is
to a database: the statements, built from a few vendor words (:attr:`~Dialect.now`,
:attr:`~Dialect.insert_ignore`, …), and every behaviour that differs between vendors:
how a connection is set up and bounded, which errors may be retried, whether waiters
are woken. Callers ask the dialect; none asks which vendor it is.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime, timezone
from functools import cached_property
from typing import Any, ClassVar, TypeVar

from occupy.backends.db.dialects.sessions import Sessions
from occupy.backends.db.dialects.transactions import TransactionLocks
from occupy.validation import MAX_FENCE, MAX_TTL

__all__ = ["COLUMNS", "TABLE", "Dialect", "statement"]

TABLE = "occupy_occupation"
# "key" is reserved in MySQL; {q} is the vendor's identifier quote.
COLUMNS = (
    "{q}key{q}, digest, slot, content_type_id, object_id, owner, token, state, fence, depth, "
    "expires_at, created_at"
)


DialectT = TypeVar("DialectT", bound="Dialect")


def statement(build: Callable[[DialectT], str]) -> Callable[[DialectT], str]:
    """Build a statement once per dialect: it depends on the dialect's words only, and
    building one (a few f-strings) cost an uncontended lock as much client time as a
    third of its round trip. Cached per dialect instance and per defining function, so
    that a subclass's override and the base's method it calls are cached apart."""

    @functools.wraps(build)
    def built(self: DialectT) -> str:
        cache: dict[Callable[[DialectT], str], str] = self.__dict__.setdefault("_built", {})
        sql = cache.get(build)
        if sql is None:
            sql = cache[build] = build(self)
        return sql

    return built


class Dialect(Sessions, TransactionLocks):
    """What differs between vendors, and the statements built from it.

    The base class writes the statements and the behaviour of a database server reached
    over a socket; each vendor's subclass sets the vendor words and overrides the hooks
    where it differs. Instances hold no state: one per vendor serves every backend.
    """

    #: Django's ``connection.vendor`` this dialect is for.
    vendor: ClassVar[str]
    #: The store's now.
    now: ClassVar[str]
    #: The store's now plus ``%s`` (see :meth:`seconds`).
    later: ClassVar[str]
    #: The store's clock in microseconds since the epoch: the floor of every fence.
    clock_us: ClassVar[str]
    greatest: ClassVar[str] = "GREATEST"
    insert_ignore: ClassVar[str] = "INSERT INTO"
    on_conflict: ClassVar[str] = "ON CONFLICT DO NOTHING"
    #: Whether ``UPDATE … RETURNING`` exists.
    update_returning: ClassVar[bool] = True
    quote: ClassVar[str] = '"'
    #: The FROM clause of a ``SELECT`` of constants that has a ``WHERE``.
    from_nothing: ClassVar[str] = ""

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"

    # --- values ---------------------------------------------------------------------
    @property
    def columns(self) -> str:
        """Return the insert column list, quoted for the vendor."""
        return COLUMNS.format(q=self.quote)

    def seconds(self, seconds: float) -> Any:
        """Return the parameter that :attr:`later` takes for ``seconds``."""
        return seconds

    def object_id_text(self, column: str) -> Any:
        """Return ``column`` (text) as an ORM expression that compares equal with a
        ``Cast(..., TextField())`` of a primary key."""
        from django.db.models import F

        return F(column)

    def to_datetime(self, value: Any) -> datetime:
        """Return a column or expression value of the store's time as an aware UTC datetime."""
        moment: datetime = datetime.fromisoformat(value) if isinstance(value, str) else value
        if moment.tzinfo is None:
            return moment.replace(tzinfo=timezone.utc)
        return moment.astimezone(timezone.utc)

    @cached_property
    def farthest(self) -> str:
        """Return SQL for the latest expiry a claim may have: the store's now plus
        :data:`~occupy.validation.MAX_TTL`. occupy writes none later (no ttl is longer);
        a row that says it lives longer (a hand edit, a restored snapshot, another
        program) is not occupy's, and counts as expired, so that it blocks nothing."""
        seconds = self.seconds(MAX_TTL)
        literal = f"'{seconds}'" if isinstance(seconds, str) else str(seconds)
        return self.later.replace("%s", literal)

    def live(self, column: str = "expires_at") -> str:
        """Return SQL that is true while ``column`` is in the future, and no further
        than :attr:`farthest`, as a filter on rows found by key, digest or id."""
        return f"{column} > {self.now} AND {column} <= {self.farthest}"

    def expired(self, column: str = "expires_at") -> str:
        """Return SQL that is true once ``column`` has passed, or for an expiry beyond
        :attr:`farthest` (the negation of :meth:`live`)."""
        return f"({column} <= {self.now} OR {column} > {self.farthest})"

    def fence_expr(self) -> str:
        """Return SQL for the next fence of the key whose digest is the parameter.

        The store's clock in microseconds is the floor, so a fence survives restarts,
        sweeps and releases (the key's rows are gone, the clock has moved on); one
        more than the highest fence still recorded for the key covers a clock that
        stepped back while rows exist. Every statement that writes it is guarded (in
        its ``WHERE``, which is checked first) against a recorded fence of
        :data:`~occupy.validation.MAX_FENCE`, one above which a ``BIGINT`` cannot hold
        (PostgreSQL and MariaDB would fail, SQLite would turn it into an inexact float).
        """
        return (
            f"{self.greatest}({self.clock_us}, COALESCE((SELECT MAX(f.fence) FROM {TABLE} f "
            f"WHERE f.digest = %s), 0) + 1)"
        )

    # --- statements -------------------------------------------------------------------
    @statement
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
            f"{self.guard_with}{self.insert_ignore} {TABLE} ({self.columns}) "
            f"SELECT %s, %s, %s, %s, %s, %s, %s, 'using', "
            f"{self.greatest}({self.clock_us}, COALESCE(k.top, 0) + 1), 1, "
            f"{self.later}, {self.now} FROM {self.guard_join}(SELECT MAX(fence) AS top, "
            f"MAX(CASE WHEN {self.live()} THEN 1 ELSE 0 END) AS live "
            f"FROM {TABLE} WHERE digest = %s) k WHERE COALESCE(k.live, 0) = 0 "
            f"AND COALESCE(k.top, 0) < {MAX_FENCE} "
            f"{self.on_conflict} RETURNING fence, expires_at"
        )

    @statement
    def seize(self) -> str:
        """Hand the live using claim of a token to a new owner and token with a higher
        fence, as a new grant (takeover). Parameters: owner, token, digest (fence),
        seconds, digest (slot), the current token. ``RETURNING fence, expires_at``
        where ``UPDATE … RETURNING`` exists."""
        returning = " RETURNING fence, expires_at" if self.update_returning else ""
        return (
            f"{self.guard_with}UPDATE {TABLE} SET owner = %s, token = %s, "
            f"fence = {self.fence_expr()}, depth = 1, expires_at = {self.later}, "
            f"created_at = {self.now}{self.guard_update} "
            f"WHERE slot = %s AND token = %s AND {self.live()}{returning}"
        )

    @statement
    def grant_over_queue(self) -> str:
        """Insert a granted claim whatever is queued (takeover of a key nobody holds);
        the unique ``slot`` refuses it if a holder got there first. Parameters: key,
        digest, digest (the slot), content_type_id, object_id, owner, token, digest
        (the fence), seconds. (SQLite needs the ``WHERE`` to parse ``ON CONFLICT``.)"""
        return (
            f"{self.guard_with}{self.insert_ignore} {TABLE} ({self.columns}) "
            f"SELECT %s, %s, %s, %s, %s, %s, %s, 'using', {self.fence_expr()}, 1, "
            f"{self.later}, {self.now} {self.guard_from or self.from_nothing} WHERE 1 = 1 "
            f"{self.on_conflict} RETURNING fence, expires_at"
        )

    @statement
    def holding(self) -> str:
        """Token, owner, expiry, fence and grant time of a digest's live using claim,
        and now."""
        return (
            f"SELECT token, owner, expires_at, fence, created_at, {self.now} FROM {TABLE} "
            f"WHERE slot = %s AND {self.live()}"
        )

    @statement
    def enqueue(self) -> str:
        """Insert a pending claim (the ticket); parameters: key, digest, content_type_id,
        object_id, owner, token, seconds."""
        return (
            f"INSERT INTO {TABLE} ({self.columns}) VALUES (%s, %s, NULL, %s, %s, %s, %s, "
            f"'pending', NULL, 1, {self.later}, {self.now}) RETURNING id"
        )

    @statement
    def promote(self) -> str:
        """Promote pending claim ``id`` to using if it is the oldest live claim and no
        live claim is using the key. Parameters: digest, digest, seconds, id, digest, id.
        Where ``UPDATE … RETURNING`` exists, the promoted claim's fence and expiry come
        back with it (one round trip less between a release and the next grant).

        Whether the key is free and whether this claim is first in line is one
        ``NOT EXISTS`` in the same statement as the write, so no other grant can come
        between the two; ties go to the lowest id (first come, first served).
        """
        return self.guard_with + self.promotion("(o.state = 'using' OR o.id < %s)")

    def promotion(self, blocked_by: str, *, free: str = "") -> str:
        """Return the ``UPDATE`` that promotes pending claim ``id`` unless a live claim
        ``o`` of its digest matches ``blocked_by`` (or ``free`` is false); parameters:
        digest (the slot), digest (the fence), seconds, id, digest, then those of
        ``blocked_by``. ``RETURNING fence, expires_at`` where ``UPDATE … RETURNING``
        exists."""
        returning = " RETURNING fence, expires_at" if self.update_returning else ""
        return (
            f"UPDATE {TABLE} SET state = 'using', slot = %s, fence = {self.fence_expr()}, "
            f"expires_at = {self.later}, created_at = {self.now}{self.guard_update} "
            f"WHERE id = %s AND state = 'pending' "
            f"AND {self.live()}{free} AND NOT EXISTS (SELECT 1 FROM {TABLE} o "
            f"WHERE o.digest = %s AND (({self.live('o.expires_at')} AND {blocked_by}) "
            f"OR o.fence >= {MAX_FENCE})){returning}"
        )

    @statement
    def queue_position(self) -> str:
        """How many live claims are queued ahead of pending claim ``id``, and whether a
        live claim is using the key; parameters: digest, id, digest (the slot). A
        waiter behind others reads this instead of trying to promote itself: a read,
        which takes no write lock, and whose answer sets its pause."""
        return (
            f"SELECT (SELECT COUNT(*) FROM {TABLE} o WHERE o.digest = %s AND "
            f"o.state = 'pending' AND o.id < %s AND {self.live('o.expires_at')}), "
            f"(SELECT COUNT(*) FROM {TABLE} u WHERE u.slot = %s AND "
            f"{self.live('u.expires_at')})"
        )

    @statement
    def heartbeat(self) -> str:
        """Keep pending claim ``id`` alive while its owner waits; parameters: seconds, id."""
        return (
            f"UPDATE {TABLE} SET expires_at = {self.later} WHERE id = %s "
            f"AND state = 'pending' AND {self.live()}"
        )

    @statement
    def queued(self) -> str:
        """The id of the pending claim with a token; digest, token."""
        return f"SELECT id FROM {TABLE} WHERE digest = %s AND token = %s AND state = 'pending'"

    @statement
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

    @statement
    def resumed(self) -> str:
        """Owner, fence, expiry and depth of the live using claim of a token; digest,
        token (after :meth:`resume` where ``UPDATE … RETURNING`` does not exist)."""
        return (
            f"SELECT owner, fence, expires_at, depth FROM {TABLE} WHERE slot = %s "
            f"AND token = %s AND {self.live()}"
        )

    @statement
    def claims_of_key(self) -> str:
        """All claims on a digest with the store's now: id, owner, token, state, fence,
        depth, expires_at, now; in no particular order (an ORDER BY id could lead a
        cached plan to walk the primary key through every claim of every key)."""
        return (
            f"SELECT id, owner, token, state, fence, depth, expires_at, {self.now} "
            f"FROM {TABLE} WHERE digest = %s"
        )

    @statement
    def top_fence(self) -> str:
        """The highest fence recorded for a digest (any claim, live or not), or NULL."""
        return f"SELECT MAX(fence) FROM {TABLE} WHERE digest = %s"

    @statement
    def purge_expired_of_key(self) -> str:
        """Delete the expired claims of a digest."""
        return f"DELETE FROM {TABLE} WHERE digest = %s AND {self.expired()}"

    @statement
    def granted(self) -> str:
        """Fence, expiry and depth of the live using claim with a token; digest, token."""
        return (
            f"SELECT fence, expires_at, depth FROM {TABLE} WHERE slot = %s AND token = %s "
            f"AND {self.live()}"
        )

    @statement
    def release(self) -> str:
        """Delete the live last level of a lease; digest, token."""
        return f"DELETE FROM {TABLE} WHERE slot = %s AND token = %s AND depth = 1 AND {self.live()}"

    def release_and_wake(self) -> str:
        """Release as :meth:`release` does, and where :attr:`wakes_waiters`, wake the
        next claim in line in the same statement; digest, token. Read how many claims
        it deleted with :meth:`released`."""
        return self.release()

    def released(self, rowcount: int, rows: list[Any]) -> int:
        """Return how many claims a run of :meth:`release_and_wake` deleted."""
        return rowcount

    @statement
    def unwind(self) -> str:
        """Remove one of several levels of a live lease, if it still has the depth read
        (a compare-and-set: run again after a lost reply, it takes no second level);
        digest, token, depth."""
        return (
            f"UPDATE {TABLE} SET depth = depth - 1 WHERE slot = %s AND token = %s "
            f"AND depth = %s AND depth > 1 AND {self.live()}"
        )

    @statement
    def forget(self) -> str:
        """Delete whatever claim a token still has on a digest (cancel, late release)."""
        return f"DELETE FROM {TABLE} WHERE digest = %s AND token = %s"

    @statement
    def extend(self) -> str:
        """Set a live lease to expire later; seconds, digest, token. Where
        ``UPDATE … RETURNING`` exists, the new expiry comes back with it (one round trip
        for a renewal; else read it with :meth:`extended`)."""
        returning = " RETURNING expires_at" if self.update_returning else ""
        return (
            f"UPDATE {TABLE} SET expires_at = {self.later} WHERE slot = %s AND token = %s "
            f"AND {self.live()}{returning}"
        )

    @statement
    def extended(self) -> str:
        """Expiry of the live using claim of a token; digest, token (after
        :meth:`extend` where ``UPDATE … RETURNING`` does not exist)."""
        return f"SELECT expires_at FROM {TABLE} WHERE slot = %s AND token = %s AND {self.live()}"

    @statement
    def holder(self) -> str:
        """Owner, expiry, fence, grant time and now of a digest's live using claim."""
        return (
            f"SELECT owner, expires_at, fence, created_at, {self.now} FROM {TABLE} "
            f"WHERE slot = %s AND {self.live()}"
        )

    @statement
    def count_expired(self) -> str:
        """Count every expired claim."""
        return f"SELECT COUNT(*) FROM {TABLE} WHERE {self.expired()}"

    @statement
    def sweep_batch(self) -> str:
        """Delete up to ``%s`` expired claims without loading them, found through the
        expiry index (SQLite serves each half of :meth:`expired` with a range of it).
        The outer condition is checked again on each row: a claim renewed meanwhile is kept."""
        return (
            f"DELETE FROM {TABLE} WHERE id IN (SELECT id FROM {TABLE} "
            f"WHERE {self.expired()} LIMIT %s) AND {self.expired()}"
        )

    def sweep_windows(self, *, returning: bool = False) -> tuple[str, str] | None:
        """The probe and window of a sweep in windows of expiry (``db/windows.py``), or None."""
        return None

    def sweep_batches(self, *, returning: bool = False) -> tuple[str, ...]:
        """Return the statements of a sweep, each run until it deletes nothing (each a
        :meth:`sweep_batch`, returning the key of each claim if ``returning``)."""
        keys = f" RETURNING {self.quote}key{self.quote}" if returning else ""
        return (f"{self.sweep_batch()}{keys}",)

    @statement
    def expired_keys(self) -> str:
        """The key of every expired claim (``sweep_locks --dry-run -v 2``)."""
        return f"SELECT {self.quote}key{self.quote} FROM {TABLE} WHERE {self.expired()}"
