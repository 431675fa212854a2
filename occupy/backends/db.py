"""``DatabaseBackend``: locks as ``Occupation`` rows, with seed 000's pending→using protocol.

What the seed gets wrong, and what this does instead:

- Its checks run in the caller's transaction, where an uncommitted claim is invisible
  to everyone else. Here every statement runs on a connection of the backend's own, in
  autocommit, so a claim is committed the moment it is made, even inside the caller's
  ``transaction.atomic()``.
- It resolves ties with random sleeps, which can livelock. Here the oldest pending
  claim (lowest id) wins: first come, first served.
- It has no expiry. Here every claim has an ``expires_at`` compared with the database's
  clock; an expired claim counts as absent, with or without a sweep.
- Mutual exclusion rests on the protocol alone. Here the unique ``slot`` column also
  makes the database refuse a second ``using`` claim on a key.

Waiting on PostgreSQL: each queued claim listens on a channel of its own
(``occupy_<id>``), and a release or a cancelled waiter notifies only the next claim in
line, so one release wakes one waiter instead of the whole queue. A release that was
already running when a claim was queued may have looked for waiters before that claim
was committed and so woken nobody: a newly queued claim therefore tries once at once,
and its first pause is short; after that, polling only notices a holder or waiter that
vanished without a word.

OPTIONS: ``DATABASE`` (the database alias, default ``"default"``), ``POLL_INTERVAL``
(longest pause between two tries while waiting, default 0.02 s; PostgreSQL waiters are
woken by ``NOTIFY`` and poll only as a fallback, every 4 intervals after the first),
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

import hashlib
import logging
import os
import re
import threading
import time
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

from django.apps import apps
from django.db import DatabaseError, IntegrityError, OperationalError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.utils import load_backend

from occupy.backends.base import Attempt, BaseBackend, Claim
from occupy.backends.sql import SQLITE_FUNCTIONS, TABLE, Dialect, dialect_for
from occupy.exceptions import InvalidBackendError, OccupyError
from occupy.leases import Holder, Lease

__all__ = ["DatabaseBackend"]

logger = logging.getLogger("occupy.backends.db")

#: Keys that name a model instance ("<app_label>.<model_name>:<pk>") are linked to it.
_OBJECT_KEY = re.compile(r"^([a-z_][a-z0-9_]*)\.([a-z_][a-z0-9_]*):(.+)$")
#: Connections a forked child inherited: kept referenced so that garbage collection
#: never closes (and so terminates) the parent's session from the child.
_inherited: list[BaseDatabaseWrapper] = []


def digest(key: str) -> str:
    """Return the SHA-256 hex digest rows are looked up by."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class DatabaseBackend(BaseBackend):
    """Locks stored as :class:`~occupy.models.Occupation` rows in a Django database."""

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.database: str = self.options.get("DATABASE", "default")
        if self.database not in connections.settings:
            raise InvalidBackendError(
                f"occupy backend {alias!r} uses database {self.database!r}, which is not "
                f"in settings.DATABASES ({sorted(connections.settings)})."
            )
        self.poll_interval = float(self.options.get("POLL_INTERVAL", 0.02))
        self.pending_ttl = float(self.options.get("PENDING_TTL", 10))
        self.prepare = bool(self.options.get("PREPARE", True))
        self._local = threading.local()
        self._dialect: Dialect | None = None
        self._opened: weakref.WeakSet[BaseDatabaseWrapper] = weakref.WeakSet()

    # --- connection ------------------------------------------------------------------
    def connection(self) -> BaseDatabaseWrapper:
        """Return this thread's own autocommit connection to the database."""
        local = self._local
        conn = getattr(local, "conn", None)
        if conn is not None and conn._occupy_pid != os.getpid():
            _inherited.append(conn)
            conn = None
        if conn is None:
            conn = self._new_connection()
            conn._occupy_pid = os.getpid()
            local.conn = conn
            self._opened.add(conn)
        if conn.connection is None:
            conn.ensure_connection()
            if conn.vendor == "sqlite":
                for name, func in SQLITE_FUNCTIONS.items():
                    conn.connection.create_function(name, 0, func)
            elif conn.vendor == "postgresql":
                with conn.cursor() as cursor:
                    cursor.execute(_PG_SESSION)
        return conn

    def _new_connection(self) -> BaseDatabaseWrapper:
        """Return a new wrapper for the database: as configured, but on PostgreSQL with
        psycopg 3 binding on the server and preparing statements (``PREPARE``)."""
        settings_dict = connections.settings[self.database]
        wrapper = load_backend(settings_dict["ENGINE"]).DatabaseWrapper
        options = settings_dict.get("OPTIONS") or {}
        if self.prepare and wrapper.vendor == "postgresql" and "pool" not in options:
            from django.db.backends.postgresql.psycopg_any import is_psycopg3

            if is_psycopg3:
                # Threshold 1: prepared from the second run, so one-off statements
                # (LISTEN on a claim's own channel) are never prepared.
                options = {**options, "server_side_binding": True, "prepare_threshold": 1}
                conn = wrapper({**settings_dict, "OPTIONS": options}, self.database)
                conn._occupy_prepares = True
                return conn
        return wrapper(settings_dict, self.database)

    @property
    def dialect(self) -> Dialect:
        """Return the SQL dialect of the configured database."""
        if self._dialect is None:
            self._dialect = dialect_for(connections[self.database].vendor)
        return self._dialect

    def forget_listen(self) -> None:
        """Stop listening on the channel a claim granted in this thread listened on.

        Left for after the release, so that a waiter's grant costs no extra round trip
        before its holder starts work; a stale channel is never notified (its claim is
        granted, and only queued claims are woken).
        """
        channel = getattr(self._local, "stale_channel", None)
        if channel is not None:
            self._local.stale_channel = None
            self.execute(f"UNLISTEN {channel}", [])

    def execute(self, sql: str, params: Sequence[Any], *, key: str | None = None,
                prepare: bool = True) -> Any:
        """Run one autocommit statement; return ``(rowcount, rows)``.

        ``prepare=False`` plans the statement afresh even where statements are prepared
        (``PREPARE``): for sweeps, whose best plan depends on how many rows expired.
        Deadlocks, lock-wait timeouts, SQLite's "database is locked" and a dropped
        connection are retried a few times (a failed statement did nothing); after
        that the error is raised as an :class:`OccupyError` that names the key.
        """
        for attempt in range(6):
            conn = self.connection()
            try:
                cursor = self._cursor(conn)
                if prepare or not getattr(conn, "_occupy_prepares", False):
                    cursor.execute(sql, params)
                else:
                    with conn.wrap_database_errors:
                        cursor.cursor.execute(sql, params, prepare=False)
                raw = cursor.cursor
                with conn.wrap_database_errors:
                    rows = raw.fetchall() if raw.description else []
                return raw.rowcount, rows
            except IntegrityError:
                raise
            except DatabaseError as e:
                if not conn.is_usable():
                    conn.close()
                elif not _is_transient(conn.vendor, e):
                    raise
                if attempt == 5:
                    raise OccupyError(
                        f"The {conn.vendor} database stayed busy while occupy worked on "
                        f"{key!r}: {e}",
                        key=key,
                    ) from e
                logger.debug("retrying a statement on %r after %s", key, e)
                time.sleep(0.01 * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def _cursor(self, conn: BaseDatabaseWrapper) -> Any:
        """Return this thread's cursor on ``conn``, made once per database session: a
        new cursor per statement costs as much client time as a short statement."""
        entry = getattr(self._local, "cursor", None)
        if entry is None or entry[0] is not conn.connection:
            entry = (conn.connection, conn.cursor())
            self._local.cursor = entry
        return entry[1]

    def close(self) -> None:
        """Close the connections this backend opened in this process, in every thread."""
        pid = os.getpid()
        for conn in list(self._opened):
            if conn.connection is not None and conn._occupy_pid == pid:
                # The raw close: Django's own refuses a connection of another thread.
                conn.connection.close()
                conn.connection = None
        self._opened = weakref.WeakSet()
        self._local = threading.local()

    # --- the contract -------------------------------------------------------------
    def attempt(self, key: str, owner: str, ttl: float) -> DatabaseAttempt:
        """Return an attempt to take ``key`` (see :class:`DatabaseAttempt`)."""
        return DatabaseAttempt(self, key, owner, ttl)

    def release(self, lease: Lease) -> None:
        """Delete the lease's claim (or undo one level of it); never another's claim."""
        d = digest(lease.key)
        sql = self.dialect
        if self.dialect.vendor == "postgresql":
            count = self.execute(_PG_RELEASE_AND_WAKE, [d, lease.token], key=lease.key)[1][0][0]
            self.forget_listen()
        else:
            count = self.execute(sql.release(), [d, lease.token], key=lease.key)[0]
        if count:
            return
        if self.execute(sql.unwind(), [d, lease.token], key=lease.key)[0]:
            return
        # Not held any more: clear our own expired row, which nobody else may touch.
        self.execute(sql.forget(), [d, lease.token], key=lease.key)
        raise lease.mark_lost("it expired or was taken over before release")

    def extend(self, lease: Lease, ttl: float) -> None:
        """Move the lease's expiry to ``ttl`` seconds after the database's now."""
        d = digest(lease.key)
        sql = self.dialect
        if not self.execute(sql.extend(), [sql.seconds(ttl), d, lease.token], key=lease.key)[0]:
            raise lease.mark_lost("it expired or was taken over before it was extended")
        rows = self.execute(sql.granted(), [d, lease.token], key=lease.key)[1]
        if not rows:
            raise lease.mark_lost("it expired or was taken over right after it was extended")
        lease.expires_at = sql.to_datetime(rows[0][1])

    def holder(self, key: str) -> Holder | None:
        """Return the live ``using`` claim's owner, expiry and fence, or ``None``."""
        found = self._holder(key)
        return None if found is None else found[0]

    def _holder(self, key: str) -> tuple[Holder, float] | None:
        rows = self.execute(self.dialect.holder(), [digest(key)], key=key)[1]
        if not rows:
            return None
        owner, expires_at, fence, now = rows[0]
        expires_at = self.dialect.to_datetime(expires_at)
        remaining = (expires_at - self.dialect.to_datetime(now)).total_seconds()
        return Holder(owner=owner, expires_at=expires_at, fence=int(fence)), remaining

    def is_held(self, lease: Lease) -> bool:
        """Return whether the lease's token still holds a live ``using`` claim."""
        return bool(self.execute(self.dialect.granted(), [digest(lease.key), lease.token],
                                 key=lease.key)[1])

    def sweep(self, *, batch_size: int = 1000, dry_run: bool = False) -> int:
        """Delete expired claims ``batch_size`` at a time; return how many.

        Only a batch that deletes nothing ends the sweep: a short batch may just have
        met claims renewed while it ran (kept, so not counted), with more expired after.
        """
        if dry_run:
            return int(self.execute(self.dialect.count_expired(), [], prepare=False)[1][0][0])
        total = 0
        while True:
            deleted = self.execute(self.dialect.sweep_batch(), [batch_size], prepare=False)[0]
            total += deleted
            if not deleted:
                return total

    def now(self) -> Any:
        """Return the store's now as an ORM expression: the clock claims expire by.

        Not Django's ``Now()``: on MySQL that is ``CURRENT_TIMESTAMP`` in the session's
        time zone, while claims are written and expire by ``UTC_TIMESTAMP()``.
        """
        from django.db.models import DateTimeField
        from django.db.models.expressions import RawSQL

        return RawSQL(self.dialect.now, [], output_field=DateTimeField())

    def claims(self) -> Iterable[Claim]:
        """Yield every live claim, granted and queued, ordered by key."""
        from occupy.models import Occupation

        rows = (
            Occupation.objects.using(self.database)
            .filter(expires_at__gt=self.now())
            .order_by("key", "id")
            .values_list("key", "owner", "state", "created_at", "expires_at", "fence")
        )
        for key, owner, state, since, expires_at, fence in rows.iterator():
            yield Claim(key, owner, state, since, expires_at, fence)

    def object_of(self, key: str) -> tuple[int | None, str | None]:
        """Return the content type id and object id a ``"app.model:pk"`` key names."""
        match = _OBJECT_KEY.match(key)
        if match is None or not apps.is_installed("django.contrib.contenttypes"):
            return None, None
        app_label, model_name, object_id = match.groups()
        try:
            model = apps.get_model(app_label, model_name)
        except LookupError:
            return None, None
        from django.contrib.contenttypes.models import ContentType

        content_type = ContentType.objects.db_manager(self.database).get_for_model(model)
        return content_type.pk, object_id


# PostgreSQL, on the backend's own connections: every statement finds its rows through an
# index (a key's digest or slot, an id, the expiry for sweeps). A lock table is small and
# churns, so its statistics often say "empty"; a plan made then (and kept, when prepared)
# would scan the whole table on every lock once it has grown.
_PG_SESSION = "SET enable_seqscan = off"
# PostgreSQL: the oldest live queued claim on a digest: the one to wake. The key's claims
# are gathered first (MATERIALIZED: through the digest index), because "ORDER BY id
# LIMIT 1" over the table could be planned, and the plan kept, as a walk of the primary
# key through every older claim of every key.
_PG_NEXT_IN_LINE = (
    f"WITH queued AS MATERIALIZED (SELECT o.id FROM {TABLE} o WHERE o.digest = {{digest}} "
    "AND o.state = 'pending' AND (o.expires_at > statement_timestamp()) IS TRUE) "
    "SELECT min(id) AS id FROM queued"
)
# PostgreSQL: release and wake the next claim in line, if any, in one statement.
_PG_RELEASE_AND_WAKE = (
    f"WITH gone AS (DELETE FROM {TABLE} WHERE slot = %s AND token = %s AND depth = 1 "
    "AND (expires_at > statement_timestamp()) IS TRUE RETURNING digest), "
    "woken AS (SELECT pg_notify('occupy_' || n.id, '') FROM ("
    + _PG_NEXT_IN_LINE.format(digest="(SELECT digest FROM gone)")
    + ") n WHERE n.id IS NOT NULL) "
    "SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM woken)"
)
# PostgreSQL: wake the next claim in line (after a queued claim left).
_PG_WAKE_NEXT = (
    "SELECT count(*) FROM (SELECT pg_notify('occupy_' || n.id, '') FROM ("
    + _PG_NEXT_IN_LINE.format(digest="%s")
    + ") n WHERE n.id IS NOT NULL) w"
)


class DatabaseAttempt(Attempt):
    """One try at a key: the fast path, then a pending claim that waits its turn."""

    def __init__(self, backend: DatabaseBackend, key: str, owner: str, ttl: float) -> None:
        super().__init__(backend, key, owner, ttl)
        self.backend: DatabaseBackend = backend
        self.max_delay = backend.poll_interval
        self.digest = digest(key)
        self.pending_id: int | None = None
        self.beat_at = 0.0
        #: The channel this attempt listens on (PostgreSQL, while queued), or None.
        self.listening: str | None = None
        #: Just queued: the next pause is skipped (see the module docstring).
        self.fresh = False
        self.pauses = 0
        self.content_type_id, self.object_id = backend.object_of(key)

    @property
    def sql(self) -> Dialect:
        return self.backend.dialect

    def run(self, statement: str, params: Sequence[Any]) -> tuple[int, list[Any]]:
        return self.backend.execute(statement, params, key=self.key)

    def lease(self, token: str, fence: Any, expires_at: Any, depth: int = 1) -> Lease:
        return Lease(
            key=self.key, owner=self.owner, token=token, fence=int(fence),
            expires_at=self.sql.to_datetime(expires_at), ttl=self.ttl,
            using=self.backend.alias, depth=depth, backend=self.backend,
        )

    def try_acquire(self) -> Lease | None:
        """Grant the key if it is free, re-enter it if the owner holds it, or promote
        the queued claim if its turn has come; else return ``None``."""
        try:
            if self.pending_id is None:
                return self._grant_if_free() or self._look()
            return self._promote()
        except OccupyError:
            if self.backend.dialect.vendor != "sqlite":
                raise
            return None  # SQLite stayed locked by another writer: not granted this time

    def _grant_if_free(self) -> Lease | None:
        rows = self.run(self.sql.grant_if_free(), [
            self.key, self.digest, self.digest, self.content_type_id, self.object_id,
            self.owner, self.token, self.sql.seconds(self.ttl), self.digest,
        ])[1]
        return self.lease(self.token, *rows[0]) if rows else None

    def _look(self) -> Lease | None:
        """After the fast path failed: re-enter, clear expired claims, or report held."""
        rows = self.run(self.sql.claims_of_key(), [self.digest])[1]
        now = self.sql.to_datetime(rows[0][7]) if rows else None
        expired = False
        for _id, owner, token, state, _fence, _depth, expires_at, _now in rows:
            if self.sql.to_datetime(expires_at) <= now:
                expired = True
            elif state == "using" and owner == self.owner:
                return self._reenter(token)
        if expired:
            self.run(self.sql.purge_expired_of_key(), [self.digest])
        if expired or not rows:
            return self._grant_if_free()
        return None

    def _reenter(self, token: str) -> Lease | None:
        count = self.run(self.sql.reenter(), [self.sql.seconds(self.ttl), self.digest,
                                              self.owner])[0]
        if not count:
            return None
        rows = self.run(self.sql.granted(), [self.digest, token])[1]
        return self.lease(token, *rows[0]) if rows else None

    def enqueue(self) -> None:
        """Insert the pending claim that holds this caller's place in the queue, and on
        PostgreSQL listen on its channel."""
        self.pending_id = int(self.run(self.sql.enqueue(), [
            self.key, self.digest, self.content_type_id, self.object_id, self.owner,
            self.token, self.sql.seconds(self.backend.pending_ttl),
        ])[1][0][0])
        self.beat_at = time.monotonic()
        self.fresh = True
        self.pauses = 0
        if self.sql.vendor == "postgresql" and not self.asynchronous:
            self._unlisten()  # queued again under a new id: listen on the new channel
            self.backend.forget_listen()
            self.listening = f"occupy_{self.pending_id}"
            self.run(f"LISTEN {self.listening}", [])

    def _promote(self) -> Lease | None:
        assert self.pending_id is not None
        for _ in range(2):
            try:
                count, rows = self.run(self.sql.promote(), [
                    self.digest, self.digest, self.sql.seconds(self.ttl), self.pending_id,
                    self.digest, self.pending_id,
                ])
                break
            except IntegrityError:
                # An expired holder still has the slot: clear it and try again at once
                # (nobody will notify: an expired holder never releases).
                self.run(self.sql.purge_expired_of_key(), [self.digest])
        else:
            return None
        if not (rows if self.sql.update_returning else count):
            self._keep_queued()
            return None
        if not self.sql.update_returning:
            rows = self.run(self.sql.granted(), [self.digest, self.token])[1]
            if not rows:
                return None
        if self.listening:
            # UNLISTEN waits for the release (forget_listen): the holder starts work now.
            self.backend._local.stale_channel, self.listening = self.listening, None
        return self.lease(self.token, *rows[0][:2])

    def _keep_queued(self) -> None:
        """Heartbeat the pending claim; if it expired meanwhile, queue again."""
        if time.monotonic() - self.beat_at < self.backend.pending_ttl / 3:
            return
        count = self.run(self.sql.heartbeat(), [
            self.sql.seconds(self.backend.pending_ttl), self.pending_id,
        ])[0]
        self.beat_at = time.monotonic()
        if not count:
            self.run(self.sql.forget(), [self.digest, self.token])
            self.enqueue()

    def wait(self, seconds: float) -> None:
        """Sleep, or on PostgreSQL wait for this claim's ``NOTIFY`` (polling as fallback)."""
        if not self.listening or seconds <= 0:
            time.sleep(seconds)
            return
        raw = self.backend.connection().connection
        try:
            # Notifications for channels this connection listened on before are stale.
            for note in raw.notifies(timeout=seconds):
                if note.channel == self.listening:
                    break
        except TypeError:  # psycopg older than 3.2, or psycopg2: poll instead
            time.sleep(seconds)

    def next_delay(self) -> float:
        """Return the next pause: none right after queueing; then on PostgreSQL the
        fallback poll for a lost wake-up, elsewhere capped exponential backoff."""
        if self.fresh:
            self.fresh = False
            return 0.0
        if self.listening:
            self.pauses += 1
            return self.max_delay if self.pauses == 1 else self.max_delay * 4
        return super().next_delay()

    def cancel(self) -> None:
        """Delete this attempt's claim, queued or granted, and wake the next waiter."""
        self.run(self.sql.forget(), [self.digest, self.token])
        if self.pending_id is not None and self.sql.vendor == "postgresql":
            self.run(_PG_WAKE_NEXT, [self.digest])
        self._unlisten()

    def _unlisten(self) -> None:
        if self.listening:
            channel, self.listening = self.listening, None
            self.run(f"UNLISTEN {channel}", [])

    def current_holder(self) -> tuple[Holder | None, float | None]:
        """Return the holder and its remaining seconds, by the database's clock."""
        found = self.backend._holder(self.key)
        return (None, None) if found is None else found


def _is_transient(vendor: str, error: DatabaseError) -> bool:
    """Return whether a failed statement may simply be run again."""
    if vendor == "sqlite":
        return isinstance(error, OperationalError) and (
            "locked" in str(error) or "busy" in str(error)
        )
    if vendor == "mysql":
        return bool(error.args) and error.args[0] in (1205, 1213)  # lock wait, deadlock
    if vendor == "postgresql":
        return getattr(error.__cause__, "sqlstate", None) in ("40001", "40P01")
    return False
