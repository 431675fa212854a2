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
its place without writing (:meth:`~occupy.backends.attempt.Attempt.note_place`).

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

import functools
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

from django.apps import apps
from django.core.checks import CheckMessage
from django.db import DatabaseError

from occupy.backends.base import DEFAULT_SWEEP_BATCH, BaseBackend, Claim
from occupy.backends.claims import digest
from occupy.backends.db import transaction
from occupy.backends.db.attempt import DatabaseAttempt
from occupy.backends.db.checks import database_errors, occupation_table_warnings
from occupy.backends.db.rows import DatabaseOccupationRows
from occupy.backends.db.statements import Result
from occupy.backends.db.store import OPTIONS, DatabaseStore
from occupy.backends.db.windows import sweep_windows
from occupy.exceptions import OccupyError
from occupy.leases import Holder, Lease, TransactionHold, new_token

__all__ = ["DatabaseBackend"]


class DatabaseBackend(BaseBackend):
    """Locks stored as :class:`~occupy.models.Occupation` rows in a Django database (see
    the module docstring); its connections, statements and dialect are its
    :attr:`store`'s."""

    options_schema = OPTIONS
    expires_by_itself = False

    @classmethod
    def check(cls, alias: str, params: Mapping[str, Any]) -> list[CheckMessage]:
        """Add ``occupy.E003``: ``OPTIONS["DATABASE"]`` is not in ``settings.DATABASES``."""
        return super().check(alias, params) + database_errors(alias, params)

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        super().__init__(alias, params)
        self.store = DatabaseStore(self, self.options)
        #: The alias of the database that holds the claims (``OPTIONS["DATABASE"]``).
        self.database = self.store.database

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

    def occupation_rows(self) -> DatabaseOccupationRows:
        """Return this backend's claims as ``Occupation`` rows, for the model side."""
        return DatabaseOccupationRows(self, self.database, self.store.dialect)

    def describe_store(self) -> str:
        """Return the database, its vendor and where it is."""
        return self.store.describe()

    def store_fix(self) -> str:
        """Return what to check when the database cannot be used."""
        return (
            f"check that the database server answers and that settings.DATABASES"
            f"[{self.database!r}] is right"
        )

    def close(self) -> None:
        """Close the connections this backend opened in this process, in every thread."""
        self.store.close()

    def close_if_unusable_or_obsolete(self) -> None:
        """Close this thread's connection if it is unusable or older than the
        database's ``CONN_MAX_AGE`` (at the start and end of a request)."""
        self.store.close_if_unusable_or_obsolete()

    # --- the contract -------------------------------------------------------------------
    def attempt(self, key: str, owner: str, ttl: float) -> DatabaseAttempt:
        """Return an attempt to take ``key`` (see :class:`DatabaseAttempt`)."""
        return DatabaseAttempt(self, self.store, key, owner, ttl)

    def release(self, lease: Lease) -> None:
        """Delete the lease's claim (or undo one level of it) and wake the next waiter
        where the dialect wakes waiters; never another's claim."""
        d = digest(lease.key)
        store = self.store
        sql = store.dialect
        count = sql.released(
            *store.execute(sql.release_and_wake(), [d, lease.token], key=lease.key)
        )
        store.forget_listen()
        if count:
            return
        for _ in range(5):  # the depth may change between the read and the write
            rows = store.execute(sql.granted(), [d, lease.token], key=lease.key)[1]
            depth = int(rows[0][2]) if rows else 0
            if depth < 2:
                break

            def unwound(depth: int = depth) -> Result | None:
                now = store.execute(sql.granted(), [d, lease.token], key=lease.key)[1]
                return (1, []) if now and int(now[0][2]) == depth - 1 else None

            if store.execute(sql.unwind(), [d, lease.token, depth], key=lease.key, settled=unwound)[
                0
            ]:
                return
        # Not held any more: clear our own expired row, which nobody else may touch.
        store.execute(sql.forget(), [d, lease.token], key=lease.key)
        raise lease.mark_lost("it expired or was taken over before release")

    def extend(self, lease: Lease, ttl: float) -> None:
        """Move the lease's expiry to ``ttl`` seconds after the database's now: one
        guarded ``UPDATE`` that returns the new expiry where ``UPDATE … RETURNING``
        exists (MariaDB reads it after)."""
        d = digest(lease.key)
        store = self.store
        sql = store.dialect
        count, rows = store.execute(sql.extend(), [sql.seconds(ttl), d, lease.token], key=lease.key)
        if not (rows if sql.update_returning else count):
            raise lease.mark_lost("it expired or was taken over before it was extended")
        if not sql.update_returning:
            rows = store.execute(sql.extended(), [d, lease.token], key=lease.key)[1]
            if not rows:
                raise lease.mark_lost("it expired or was taken over right after it was extended")
        lease.expires_at = sql.to_datetime(rows[0][0])

    def resume(self, key: str, token: str, ttl: float, *, deeper: bool = True) -> Lease | None:
        """Return the lease ``token`` holds on ``key`` (a level deeper if ``deeper``,
        kept at least ``ttl`` more), or ``None``: one guarded ``UPDATE``."""
        d = digest(key)
        store = self.store
        sql = store.dialect
        count, rows = store.execute(
            sql.resume(), [int(deeper), sql.seconds(ttl), d, token], key=key
        )
        if not sql.update_returning and count:
            rows = store.execute(sql.resumed(), [d, token], key=key)[1]
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
        store = self.store
        sql = store.dialect
        token = new_token()
        seconds = sql.seconds(ttl)

        def settled() -> Result | None:  # a lost reply: did our grant commit?
            mine = store.execute(sql.granted(), [d, token], key=key)[1]
            return (1, mine) if mine else None

        store.refuse_exhausted_fence(key)
        for _ in range(10):
            rows = store.execute(sql.holding(), [d], key=key)[1]
            if rows:
                old_token, old_owner, expires_at, fence, since, now = rows[0]
                previous = self.make_holder(
                    old_owner, sql.to_datetime(expires_at), fence, sql.to_datetime(since)
                )
                if if_fence is not None and previous.fence != if_fence:
                    remaining = (previous.expires_at - sql.to_datetime(now)).total_seconds()
                    raise self.takeover_refused(key, if_fence, previous, remaining)
                count, granted = store.execute(
                    sql.seize(),
                    [*sql.guard_params(key, None), owner, token, d, seconds, d, old_token],
                    key=key,
                    settled=settled,
                )
                if count and not sql.update_returning:
                    granted = store.execute(sql.granted(), [d, token], key=key)[1]
            else:
                if if_fence is not None:
                    raise self.takeover_refused(key, if_fence, None, None)
                previous = None
                store.execute(sql.purge_expired_of_key(), [d], key=key)
                content_type_id, object_id = store.object_of(key)
                granted = store.execute(
                    sql.grant_over_queue(),
                    [
                        *sql.guard_params(key, None),
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

    def transaction_refusal(self, database: str | None = None) -> str | None:
        """Return why this backend cannot hold a key for a transaction on ``database``
        (not PostgreSQL, not the lock table's database, or not where the routers send
        writes), or ``None`` (see :mod:`.transaction`)."""
        return transaction.refusal(self.store, database)

    def hold_for_transaction(
        self,
        key: str,
        *,
        timeout: float | None,
        lease: Lease | None = None,
        waiting: Callable[[], None] | None = None,
    ) -> TransactionHold:
        """Hold ``key`` for the transaction open on the backend's database until it
        ends (see :mod:`.transaction`)."""
        return transaction.hold_for_transaction(
            self.store, key, timeout=timeout, lease=lease, waiting=waiting
        )

    def holder(self, key: str) -> Holder | None:
        """Return the live ``using`` claim's owner, expiry and fence, or ``None``."""
        found = self.store.holder_and_remaining(key)
        return None if found is None else found[0]

    def is_held(self, lease: Lease) -> bool:
        """Return whether the lease's token still holds a live ``using`` claim."""
        return bool(
            self.store.execute(
                self.store.dialect.granted(), [digest(lease.key), lease.token], key=lease.key
            )[1]
        )

    def sweep(
        self,
        *,
        batch_size: int = DEFAULT_SWEEP_BATCH,
        dry_run: bool = False,
        removed: Callable[[str], None] | None = None,
    ) -> int:
        """Delete expired claims ``batch_size`` at a time; return how many; tell
        ``removed`` the key of each (the batches then return their keys).

        Where the dialect has :meth:`~occupy.backends.db.dialects.Dialect.sweep_windows`
        (PostgreSQL), the claims whose expiry has passed go first, in windows of about
        ``batch_size`` (:mod:`.windows`). Each of its ``sweep_batches`` runs until it
        deletes nothing: a short batch may just have met claims renewed while it ran
        (kept, so not counted), with more expired after.
        """
        store = self.store
        sql = store.dialect
        if dry_run:
            if removed is None:
                return int(store.execute(sql.count_expired(), [], prepare=False)[1][0][0])
            keys = store.execute(sql.expired_keys(), [], prepare=False)[1]
            for (key,) in keys:
                removed(key)
            return len(keys)
        total = 0
        windows = sql.sweep_windows(returning=removed is not None)
        if windows is not None:
            probe, window = windows
            run = functools.partial(store.execute, prepare=False)
            total += sweep_windows(run, probe, window, batch_size, removed)
        for statement in sql.sweep_batches(returning=removed is not None):
            while True:
                deleted, rows = store.execute(statement, [batch_size], prepare=False)
                if removed is not None:
                    deleted = len(rows)
                    for (key,) in rows:
                        removed(key)
                total += deleted
                if not deleted:
                    break
        return total

    def claims(self) -> Iterator[Claim]:
        """Yield every live claim, granted and queued, ordered by key."""
        occupation = apps.get_model("occupy", "Occupation")
        rows = (
            occupation._default_manager.using(self.database)
            .filter(expires_at__gt=self.store.now(), expires_at__lte=self.store.farthest())
            .order_by("key", "id")
            .values_list("key", "owner", "state", "created_at", "expires_at", "fence")
        )
        try:
            for key, owner, state, since, expires_at, fence in rows.iterator():
                yield Claim(key, owner, state, since, expires_at, fence)
        except DatabaseError as e:
            raise self.store.statements.failure(None, e) from e
