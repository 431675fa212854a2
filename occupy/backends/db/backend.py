"""``DatabaseBackend``: locks as ``Occupation`` rows, granted pending → using.

- Every statement runs on a connection of the backend's own, in autocommit
  (:mod:`.connections`), so a claim is committed the moment it is made, even inside the
  caller's ``transaction.atomic()``, where it would otherwise be invisible to everyone else.
- The oldest pending claim of a key (lowest id) is granted first: first come, first
  served, never a race of sleeps (:mod:`.attempt`).
- Every claim has an ``expires_at`` compared with the database's clock; an expired claim
  counts as absent, with or without a sweep.
- The unique ``slot`` column makes the database itself refuse a second ``using`` claim
  on a key, whatever the protocol does.

Failures (:mod:`.statements`): a dropped connection is retried on a new one, and a grant
whose reply was lost is found by the attempt's token instead of being run again. An
acquire holds each statement to its time left. A store that cannot be reached or used
raises :class:`~occupy.exceptions.StoreUnavailable`; one that has no claims table yet
:class:`~occupy.exceptions.StoreNotMigrated`; so does a lock taken inside the caller's
SQLite transaction that has written, which could never be written (SQLite has one
write lock per file). Whatever differs between PostgreSQL, MySQL/MariaDB and SQLite is
in their :mod:`.dialects`.

Waiting on PostgreSQL: each queued claim listens on a channel of its own, and a release
or a cancelled waiter notifies only the next claim in line. A release that was already
running when a claim was queued may have looked for waiters before that claim was
committed and so woken nobody: a newly queued claim therefore tries once at once,
waiting for a release in flight to commit, and its first pause is short; after that,
polling only notices a holder or waiter that vanished without a word. Elsewhere
waiters poll: the first three in line every interval at most, a waiter further back
as often as the queue's pace says its turn may be near (up to a second apart), reading
its place without writing (:meth:`~occupy.backends.base.Attempt.note_place`).

OPTIONS: ``DATABASE`` (the database alias, default ``"default"``), ``POLL_INTERVAL``
(the longest pause between two tries near the head of a queue, default 0.02 s;
PostgreSQL waiters are woken by ``NOTIFY`` and poll only as a fallback, after one
interval and then every second),
``PENDING_TTL`` (how long a waiter's queued claim outlives its last heartbeat, default
10 s), ``PREPARE`` (PostgreSQL with psycopg 3: bind parameters on the server and prepare
each statement the second time it runs on a connection, default True; see below).

Prepared statements: on PostgreSQL, planning a statement costs more than running it
(the lock statements are small but reach the table three times), and Django plans every
statement afresh by default. The backend's connections are its own, never the app's, so
preparing them changes nothing for the app. Set ``PREPARE`` to False behind a pooler that
cannot keep prepared statements (PgBouncer in transaction mode before 1.21; there,
``LISTEN`` is lost too, and waiters fall back to polling). With Django's own connection
pool (``OPTIONS["pool"]`` in ``DATABASES``) nothing is prepared: the pool is shared
with the app.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from functools import cached_property
from typing import Any

from django.apps import apps
from django.core.checks import CheckMessage, Error
from django.core.exceptions import FieldError
from django.db import DatabaseError, connections, router, transaction
from django.db.models import DateTimeField
from django.db.models.expressions import RawSQL

from occupy.backends.base import BaseBackend, Claim
from occupy.backends.claims import digest
from occupy.backends.db.attempt import DatabaseAttempt
from occupy.backends.db.checks import no_database, occupation_table_warnings
from occupy.backends.db.connections import OwnConnections
from occupy.backends.db.dialects import TABLE, Dialect, dialect_for
from occupy.backends.db.rows import DatabaseOccupationRows
from occupy.backends.db.statements import Result, Statements
from occupy.backends.options import Option, where
from occupy.exceptions import InvalidBackendError, OccupyError, StoreUnavailable
from occupy.keys import ObjectKey, parse_object_key
from occupy.leases import Holder, Lease, new_token
from occupy.validation import MAX_FENCE

__all__ = ["DatabaseBackend"]


class DatabaseBackend(BaseBackend):
    """Locks stored as :class:`~occupy.models.Occupation` rows in a Django database."""

    options_schema = {
        "DATABASE": Option(str, "default", "the database alias"),
        "POLL_INTERVAL": Option(
            float, 0.02, "longest pause between two tries near the head of a queue", positive=True
        ),
        "PENDING_TTL": Option(
            float, 10, "how long a waiter's queued claim outlives its last heartbeat", positive=True
        ),
        "PREPARE": Option(bool, True, "PostgreSQL with psycopg 3: prepare the statements"),
    }

    expires_by_itself = False

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        super().__init__(alias, params)
        self.database: str = self.options["DATABASE"]
        if self.database not in connections.settings:
            raise InvalidBackendError(no_database(alias, self.database))
        self.poll_interval = float(self.options["POLL_INTERVAL"])
        self.pending_ttl = float(self.options["PENDING_TTL"])
        self.prepare: bool = self.options["PREPARE"]
        #: Per thread: ``stale_channel``, the channel a granted claim listened on.
        self._local = threading.local()

    def occupation_rows(self) -> DatabaseOccupationRows:
        """Return this backend's claims as ``Occupation`` rows, for the model side."""
        return DatabaseOccupationRows(self)

    @classmethod
    def check(cls, alias: str, params: Mapping[str, Any]) -> list[CheckMessage]:
        """Add ``occupy.E003``: ``OPTIONS["DATABASE"]`` is not in ``settings.DATABASES``."""
        messages = super().check(alias, params)
        database = (params.get("OPTIONS") or {}).get("DATABASE", "default")
        if isinstance(database, str) and database not in connections.settings:
            messages.append(
                Error(
                    no_database(alias, database),
                    hint=f"Set OPTIONS['DATABASE'] to one of {sorted(connections.settings)}.",
                    obj=where(alias),
                    id="occupy.E003",
                )
            )
        return messages

    def check_store(self, databases: Collection[str]) -> list[CheckMessage]:
        """Add ``occupy.W001`` (the claims table is missing though occupy's migration is
        recorded as applied), ``occupy.W006`` (occupy's migration was never applied) and
        ``occupy.W007`` (the database cannot be reached): ``check --database``."""
        if self.database not in databases:
            return []
        try:
            return occupation_table_warnings(self.alias, self.database)
        except DatabaseError as e:
            return [self.unreachable_store(e)]

    # --- the parts ----------------------------------------------------------------------
    @cached_property
    def dialect(self) -> Dialect:
        """Return the SQL dialect of the configured database."""
        return dialect_for(connections[self.database].vendor)

    @cached_property
    def hears_wake_ups(self) -> bool:
        """Return whether this backend's waiters listen for wake-ups (PostgreSQL with a
        driver that can wait for them); else they poll."""
        return self.dialect.wakes_waiters and self.dialect.hears_notifications()

    @cached_property
    def own_connections(self) -> OwnConnections:
        """Return the backend's own connections (see :mod:`.connections`)."""
        return OwnConnections(self.database, self.dialect, prepare=self.prepare)

    @cached_property
    def statements(self) -> Statements:
        """Return what runs the backend's statements (see :mod:`.statements`)."""
        return Statements(self)

    def execute(
        self,
        sql: str,
        params: Sequence[Any],
        *,
        key: str | None = None,
        prepare: bool = True,
        settled: Callable[[], Result | None] | None = None,
        bound: float | None = None,
    ) -> Result:
        """Run one autocommit statement; return ``(rowcount, rows)`` (see
        :meth:`Statements.execute`)."""
        return self.statements.execute(
            sql, params, key=key, prepare=prepare, settled=settled, bound=bound
        )

    def unlisten_later(self, channel: str) -> None:
        """Leave ``channel``, which a claim granted in this thread listened on, to
        :meth:`forget_listen`."""
        self._local.stale_channel = channel

    def forget_listen(self) -> None:
        """Stop listening on the channel a claim granted in this thread listened on.

        Left for after the release, so that a waiter's grant costs no extra round trip
        before its holder starts work; a stale channel is never notified (its claim is
        granted, and only queued claims are woken).
        """
        channel = getattr(self._local, "stale_channel", None)
        if channel is not None:
            self._local.stale_channel = None
            self.execute(self.dialect.unlisten(channel), [])

    def close(self) -> None:
        """Close the connections this backend opened in this process, in every thread."""
        own = self.__dict__.get("own_connections")  # made on first use only
        if own is not None:
            own.close()
        self._local = threading.local()

    def close_if_unusable_or_obsolete(self) -> None:
        """Close this thread's connection if it is unusable or older than the
        database's ``CONN_MAX_AGE`` (at the start and end of a request)."""
        own = self.__dict__.get("own_connections")
        if own is not None:
            own.close_if_unusable_or_obsolete()

    # --- the contract -------------------------------------------------------------------
    def attempt(self, key: str, owner: str, ttl: float) -> DatabaseAttempt:
        """Return an attempt to take ``key`` (see :class:`DatabaseAttempt`)."""
        return DatabaseAttempt(self, key, owner, ttl)

    def release(self, lease: Lease) -> None:
        """Delete the lease's claim (or undo one level of it) and wake the next waiter
        where the dialect wakes waiters; never another's claim."""
        d = digest(lease.key)
        sql = self.dialect
        count = sql.released(*self.execute(sql.release_and_wake(), [d, lease.token], key=lease.key))
        self.forget_listen()
        if count:
            return
        for _ in range(5):  # the depth may change between the read and the write
            rows = self.execute(sql.granted(), [d, lease.token], key=lease.key)[1]
            depth = int(rows[0][2]) if rows else 0
            if depth < 2:
                break

            def unwound(depth: int = depth) -> Result | None:
                now = self.execute(sql.granted(), [d, lease.token], key=lease.key)[1]
                return (1, []) if now and int(now[0][2]) == depth - 1 else None

            if self.execute(sql.unwind(), [d, lease.token, depth], key=lease.key, settled=unwound)[
                0
            ]:
                return
        # Not held any more: clear our own expired row, which nobody else may touch.
        self.execute(sql.forget(), [d, lease.token], key=lease.key)
        raise lease.mark_lost("it expired or was taken over before release")

    def extend(self, lease: Lease, ttl: float) -> None:
        """Move the lease's expiry to ``ttl`` seconds after the database's now: one
        guarded ``UPDATE`` that returns the new expiry where ``UPDATE … RETURNING``
        exists (MariaDB reads it after)."""
        d = digest(lease.key)
        sql = self.dialect
        count, rows = self.execute(sql.extend(), [sql.seconds(ttl), d, lease.token], key=lease.key)
        if not (rows if sql.update_returning else count):
            raise lease.mark_lost("it expired or was taken over before it was extended")
        if not sql.update_returning:
            rows = self.execute(sql.extended(), [d, lease.token], key=lease.key)[1]
            if not rows:
                raise lease.mark_lost("it expired or was taken over right after it was extended")
        lease.expires_at = sql.to_datetime(rows[0][0])

    def resume(self, key: str, token: str, ttl: float, *, deeper: bool = True) -> Lease | None:
        """Return the lease ``token`` holds on ``key`` (a level deeper if ``deeper``,
        kept at least ``ttl`` more), or ``None``: one guarded ``UPDATE``."""
        d = digest(key)
        sql = self.dialect
        count, rows = self.execute(sql.resume(), [int(deeper), sql.seconds(ttl), d, token], key=key)
        if not sql.update_returning and count:
            rows = self.execute(sql.resumed(), [d, token], key=key)[1]
        if not rows:
            return None
        owner, fence, expires_at, depth = rows[0]
        return self.make_lease(
            key,
            owner=owner,
            token=token,
            fence=fence,
            expires_at=sql.to_datetime(expires_at),
            ttl=ttl,
            depth=int(depth),
        )

    def takeover(
        self, key: str, owner: str, ttl: float, *, if_fence: int | None = None
    ) -> tuple[Lease, Holder | None]:
        """Hand the live claim to ``owner`` with a higher fence (one guarded ``UPDATE``
        by the holder's token), or insert a granted claim ahead of any queue if nobody
        holds the key; return the lease and the holder replaced.

        With ``if_fence``, only the claim read with that fence is handed over: the
        ``UPDATE`` is guarded by that claim's token, which no other grant has, so it
        changes nothing once the claim is released, expired or replaced; the holder is
        then read again, and refused.
        """
        d = digest(key)
        sql = self.dialect
        token = new_token()
        seconds = sql.seconds(ttl)

        def settled() -> Result | None:  # a lost reply: did our grant commit?
            mine = self.execute(sql.granted(), [d, token], key=key)[1]
            return (1, mine) if mine else None

        self.refuse_exhausted_fence(key)
        for _ in range(10):
            rows = self.execute(sql.holding(), [d], key=key)[1]
            if rows:
                old_token, old_owner, expires_at, fence, since, now = rows[0]
                previous = self.make_holder(
                    old_owner, sql.to_datetime(expires_at), fence, sql.to_datetime(since)
                )
                if if_fence is not None and previous.fence != if_fence:
                    remaining = (previous.expires_at - sql.to_datetime(now)).total_seconds()
                    raise self.takeover_refused(key, if_fence, previous, remaining)
                count, granted = self.execute(
                    sql.seize(), [owner, token, d, seconds, d, old_token], key=key, settled=settled
                )
                if count and not sql.update_returning:
                    granted = self.execute(sql.granted(), [d, token], key=key)[1]
            else:
                if if_fence is not None:
                    raise self.takeover_refused(key, if_fence, None, None)
                previous = None
                self.execute(sql.purge_expired_of_key(), [d], key=key)
                content_type_id, object_id = self.object_of(key)
                granted = self.execute(
                    sql.grant_over_queue(),
                    [
                        key,
                        d,
                        d,
                        content_type_id,
                        object_id,
                        owner,
                        token,
                        d,
                        seconds,
                    ],
                    key=key,
                    settled=settled,
                )[1]
            if granted:  # else the holder changed meanwhile: look again
                fence, expires_at = granted[0][:2]
                lease = self.make_lease(
                    key,
                    owner=owner,
                    token=token,
                    fence=fence,
                    expires_at=sql.to_datetime(expires_at),
                    ttl=ttl,
                )
                return lease, previous
        raise OccupyError(f"{key!r} changed hands ten times while it was taken over.", key=key)

    def holder(self, key: str) -> Holder | None:
        """Return the live ``using`` claim's owner, expiry and fence, or ``None``."""
        found = self.holder_and_remaining(key)
        return None if found is None else found[0]

    def refuse_exhausted_fence(self, key: str) -> None:
        """Raise :class:`~occupy.exceptions.StoreUnavailable` if the claims table records
        a fence for ``key`` above which no fence exists (see :meth:`fence_exhausted`)."""
        top = self.execute(self.dialect.top_fence(), [digest(key)], key=key)[1]
        if top and top[0][0] is not None and int(top[0][0]) >= MAX_FENCE:
            raise self.fence_exhausted(key, int(top[0][0]))

    def fence_exhausted(self, key: str, fence: int) -> StoreUnavailable:
        """Return the error for a key whose recorded fence cannot rise any more."""
        return StoreUnavailable(
            f"occupy backend {self.alias!r} cannot hand out a fence for {key!r}: table "
            f"{TABLE!r} records fence {fence} for it, and a fence cannot exceed "
            f"{MAX_FENCE} (2^63 - 1; occupy never writes one so high: a restored "
            "snapshot, a hand edit or another program did). No grant or takeover is made "
            "until the key's rows are gone: sweep_locks removes them once expired, or "
            f"delete them (DELETE FROM {TABLE} WHERE {self.dialect.quote}key"
            f"{self.dialect.quote} = <the key>). Fences then restart from the database "
            "clock, below the recorded one: storage that compares fences must forget it.",
            key=key,
            using=self.alias,
        )

    def holder_and_remaining(self, key: str) -> tuple[Holder, float] | None:
        """Return the live ``using`` claim's holder and its seconds left by the
        database's clock, or ``None``."""
        sql = self.dialect
        rows = self.execute(sql.holder(), [digest(key)], key=key)[1]
        if not rows:
            return None
        owner, expires_at, fence, since, now = rows[0]
        expires = sql.to_datetime(expires_at)
        remaining = (expires - sql.to_datetime(now)).total_seconds()
        return self.make_holder(owner, expires, fence, sql.to_datetime(since)), remaining

    def is_held(self, lease: Lease) -> bool:
        """Return whether the lease's token still holds a live ``using`` claim."""
        return bool(
            self.execute(self.dialect.granted(), [digest(lease.key), lease.token], key=lease.key)[1]
        )

    def sweep(
        self,
        *,
        batch_size: int = 1000,
        dry_run: bool = False,
        removed: Callable[[str], None] | None = None,
    ) -> int:
        """Delete expired claims ``batch_size`` at a time; return how many; tell
        ``removed`` the key of each (the batches then return their keys).

        Only a batch that deletes nothing ends the sweep: a short batch may just have
        met claims renewed while it ran (kept, so not counted), with more expired after.
        """
        sql = self.dialect
        if dry_run:
            if removed is None:
                return int(self.execute(sql.count_expired(), [], prepare=False)[1][0][0])
            keys = self.execute(sql.expired_keys(), [], prepare=False)[1]
            for (key,) in keys:
                removed(key)
            return len(keys)
        statement = sql.sweep_batch() if removed is None else sql.sweep_batch_returning()
        total = 0
        while True:
            deleted, rows = self.execute(statement, [batch_size], prepare=False)
            if removed is not None:
                deleted = len(rows)
                for (key,) in rows:
                    removed(key)
            total += deleted
            if not deleted:
                return total

    def describe_store(self) -> str:
        """Return the database, its vendor and where it is."""
        settings_dict = connections.settings[self.database]
        host = settings_dict.get("HOST") or "localhost"
        port = f":{settings_dict['PORT']}" if settings_dict.get("PORT") else ""
        where_ = (
            f"file {settings_dict.get('NAME')}"
            if self.dialect.vendor == "sqlite"
            else f"{settings_dict.get('NAME')!r} at {host}{port}"
        )
        return f"database {self.database!r} ({self.dialect.vendor}, {where_})"

    def store_fix(self) -> str:
        """Return what to check when the database cannot be used."""
        return (
            f"check that the database server answers and that settings.DATABASES"
            f"[{self.database!r}] is right"
        )

    def now(self) -> RawSQL:
        """Return the store's now as an ORM expression: the clock claims expire by.

        Not Django's ``Now()``: on MySQL that is ``CURRENT_TIMESTAMP`` in the session's
        time zone, while claims are written and expire by ``UTC_TIMESTAMP()``.
        """
        return RawSQL(self.dialect.now, [], output_field=DateTimeField())

    def farthest(self) -> RawSQL:
        """Return the latest expiry a claim of occupy's may have, as an ORM expression
        (see :attr:`~occupy.backends.db.dialects.base.Dialect.farthest`)."""
        return RawSQL(self.dialect.farthest, [], output_field=DateTimeField())

    def claims(self) -> Iterator[Claim]:
        """Yield every live claim, granted and queued, ordered by key."""
        occupation = apps.get_model("occupy", "Occupation")
        rows = (
            occupation._default_manager.using(self.database)
            .filter(expires_at__gt=self.now(), expires_at__lte=self.farthest())
            .order_by("key", "id")
            .values_list("key", "owner", "state", "created_at", "expires_at", "fence")
        )
        try:
            for key, owner, state, since, expires_at, fence in rows.iterator():
                yield Claim(key, owner, state, since, expires_at, fence)
        except DatabaseError as e:
            raise self.statements.failure(None, e) from e

    def object_of(self, key: str) -> tuple[int | None, str | None]:
        """Return the content type id and object id a row's key names (see
        :mod:`occupy.keys`), or ``(None, None)`` for a key that names no row.

        A shortened key carries only the start of the primary key and its digest: the
        row is looked up by that start and told by the digest (one query, for such keys
        only). A row that cannot be found (deleted, a composite primary key) leaves the
        claim unlinked: it locks all the same, but ``occupied()``, ``free()`` and the
        admin's status column do not see it.
        """
        parsed = parse_object_key(key)
        if parsed is None or not apps.is_installed("django.contrib.contenttypes"):
            return None, None
        try:
            model = apps.get_model(parsed.app_label, parsed.model_name)
        except LookupError:
            return None, None
        object_id: str | None = parsed.pk_text
        if parsed.digest is not None:
            object_id = self._shortened_object_id(model, parsed)
        from django.contrib.contenttypes.models import ContentType

        try:
            content_type = ContentType.objects.db_manager(self.database).get_for_model(model)
        except DatabaseError as e:
            raise self.statements.failure(key, e) from e
        return content_type.pk, object_id

    def _shortened_object_id(self, model: Any, parsed: ObjectKey) -> str | None:
        """Return the primary key, as text, of the row of ``model`` a shortened key
        names, or ``None`` when no row matches: looked for in the claims' database, then
        in the one the router reads ``model`` from."""
        for database in dict.fromkeys([self.database, router.db_for_read(model)]):
            rows = model._base_manager.db_manager(database)
            try:
                # In a savepoint: a table missing there must not break the caller's
                # transaction on that database.
                with transaction.atomic(using=database):
                    candidates = list(
                        rows.filter(pk__startswith=parsed.pk_text).values_list("pk", flat=True)
                    )
                found = next((str(pk) for pk in candidates if parsed.matches(pk)), None)
            except (FieldError, TypeError, ValueError):
                return None  # a primary key that cannot be looked up by its start
            except DatabaseError:
                continue  # the model has no table in that database
            if found is not None:
                return found
        return None
