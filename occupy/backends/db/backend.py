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

Failures: a dropped connection is retried on a new one, and a grant whose reply was
lost is found by the attempt's token instead of being run again (see ``execute``). An
acquire holds each statement to its time left (connect timeout, SQLite's busy wait,
MariaDB's ``max_statement_time``, and a cut of the socket for a server that does not
answer: :mod:`occupy.backends.cutoff`). A store that cannot be reached or used raises
:class:`~occupy.exceptions.StoreUnavailable`; so does a lock taken inside the caller's
SQLite transaction that has written, which could never be written (SQLite has one write
lock per file). PostgreSQL sessions run in UTC, so expiries are right with
``USE_TZ = False``.

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

import logging
import math
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from contextlib import suppress
from typing import Any

from django.apps import apps
from django.core.checks import CheckMessage, Error
from django.db import DatabaseError, IntegrityError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.utils import load_backend

from occupy.backends.base import BaseBackend, Claim
from occupy.backends.claims import digest
from occupy.backends.cutoff import cutoffs
from occupy.backends.db.attempt import DatabaseAttempt
from occupy.backends.db.checks import no_database, occupation_table_warnings
from occupy.backends.db.dialects import (
    PG_RELEASE_AND_WAKE,
    PG_SESSION,
    SQLITE_FUNCTIONS,
    TABLE,
    Dialect,
    dialect_for,
    is_busy,
)
from occupy.backends.db.rows import DatabaseOccupationRows
from occupy.backends.options import Option, where
from occupy.exceptions import InvalidBackendError, OccupyError, StoreUnavailable
from occupy.leases import Holder, Lease, new_token

__all__ = ["DatabaseBackend"]

logger = logging.getLogger("occupy.backends.db")

#: Keys that name a model instance ("<app_label>.<model_name>:<pk>") are linked to it.
_OBJECT_KEY = re.compile(r"^([a-z_][a-z0-9_]*)\.([a-z_][a-z0-9_]*):(.+)$")
#: SQLite: how long a statement waits for the write lock while this thread has a
#: transaction open on the same file (see ``DatabaseBackend.sharing_transaction``).
SHARED_FILE_BUSY_MS = 500
#: How long after a statement's bound its connection is cut, when the server has not
#: answered (MariaDB's own max_statement_time, at the bound, should come first).
CUT_SLACK = 0.25
#: Connections a forked child inherited: kept referenced so that garbage collection
#: never closes (and so terminates) the parent's session from the child.
_inherited: list[BaseDatabaseWrapper] = []


class DatabaseBackend(BaseBackend):
    """Locks stored as :class:`~occupy.models.Occupation` rows in a Django database."""

    options_schema = {
        "DATABASE": Option(str, "default", "the database alias"),
        "POLL_INTERVAL": Option(float, 0.02, "longest pause between two tries while "
                                "waiting", positive=True),
        "PENDING_TTL": Option(float, 10, "how long a waiter's queued claim outlives its "
                              "last heartbeat", positive=True),
        "PREPARE": Option(bool, True, "PostgreSQL with psycopg 3: prepare the statements"),
    }

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        super().__init__(alias, params)
        self.database: str = self.options["DATABASE"]
        if self.database not in connections.settings:
            raise InvalidBackendError(no_database(alias, self.database))
        self.poll_interval = float(self.options["POLL_INTERVAL"])
        self.pending_ttl = float(self.options["PENDING_TTL"])
        self.prepare: bool = self.options["PREPARE"]
        self._local = threading.local()
        self._dialect: Dialect | None = None
        self._opened: weakref.WeakSet[BaseDatabaseWrapper] = weakref.WeakSet()
        self._connect_timeout: Any = None

    def occupation_rows(self) -> DatabaseOccupationRows:
        """Return this backend's claims as ``Occupation`` rows, for the model side."""
        return DatabaseOccupationRows(self)

    @classmethod
    def check(cls, alias: str, params: Mapping[str, Any]) -> list[CheckMessage]:
        """Add ``occupy.E003``: ``OPTIONS["DATABASE"]`` is not in ``settings.DATABASES``."""
        messages = super().check(alias, params)
        database = (params.get("OPTIONS") or {}).get("DATABASE", "default")
        if isinstance(database, str) and database not in connections.settings:
            messages.append(Error(
                no_database(alias, database),
                hint=f"Set OPTIONS['DATABASE'] to one of {sorted(connections.settings)}.",
                obj=where(alias), id="occupy.E003"))
        return messages

    def check_store(self, databases: Collection[str]) -> list[CheckMessage]:
        """Add ``occupy.W001``: the claims table is missing though occupy's migration is
        recorded as applied (a database check: ``check --database``)."""
        if self.database not in databases:
            return []
        return occupation_table_warnings(self.alias, self.database)

    # --- connection ------------------------------------------------------------------
    def connection(self, cutoff: float | None = None) -> BaseDatabaseWrapper:
        """Return this thread's own autocommit connection to the database; a new one
        must be made by ``cutoff`` (``time.monotonic()``) if given."""
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
            if cutoff is not None and conn.vendor in ("postgresql", "mysql"):
                self._connect_within(conn, cutoff)
            conn.ensure_connection()
            if conn.vendor == "sqlite":
                for name, func in SQLITE_FUNCTIONS.items():
                    conn.connection.create_function(name, 0, func)
                busy_ms = conn.connection.execute("PRAGMA busy_timeout").fetchone()[0]
                conn._occupy_busy_ms = conn._occupy_busy_now = busy_ms
            elif conn.vendor == "postgresql":
                with conn.cursor() as cursor:
                    cursor.execute(PG_SESSION)
            if getattr(local, "cut", None):
                self._end_cut_sessions(conn)
        return conn

    def _connect_within(self, conn: BaseDatabaseWrapper, cutoff: float) -> None:
        """Make the driver give up connecting by ``cutoff`` (whole seconds; libpq
        takes 2 at least), or sooner if the database's own ``connect_timeout`` says so."""
        options = conn.settings_dict["OPTIONS"]
        if "pool" in options:
            return
        configured = self._connect_timeout
        if configured is None:
            configured = self._connect_timeout = options.get("connect_timeout", 0)
        seconds = max(math.ceil(cutoff - time.monotonic()), 2)
        options["connect_timeout"] = min(seconds, int(configured)) if configured else seconds

    def _new_connection(self) -> BaseDatabaseWrapper:
        """Return a new wrapper for the database: as configured (a copy of its settings,
        which :meth:`_connect_within` may change), but on PostgreSQL with psycopg 3
        binding on the server and preparing statements (``PREPARE``)."""
        settings_dict = connections.settings[self.database]
        wrapper = load_backend(settings_dict["ENGINE"]).DatabaseWrapper
        options = dict(settings_dict.get("OPTIONS") or {})
        settings_dict = {**settings_dict, "OPTIONS": options}
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
                prepare: bool = True,
                settled: Callable[[], tuple[int, list[Any]] | None] | None = None,
                bound: float | None = None) -> Any:
        """Run one autocommit statement; return ``(rowcount, rows)``.

        ``prepare=False`` plans the statement afresh even where statements are prepared
        (``PREPARE``): for sweeps, whose best plan depends on how many rows expired.
        Deadlocks, lock-wait timeouts and SQLite's "database is locked" are retried a
        few times: the failed statement did nothing. So is a dropped connection, but
        there the statement may have committed with only its reply lost: a statement
        that must not run twice (a grant) passes ``settled``, which is asked first on
        the new connection and returns the statement's result if it took effect (found
        by the attempt's token), or ``None`` to run it again. A store that cannot be
        reached or used, or stays busy, raises :class:`StoreUnavailable`.

        ``bound`` (seconds) is how long the statement may take, retries included (an
        acquire's time left): connecting, SQLite's busy wait and MariaDB's
        ``max_statement_time`` are held to it, and a server that does not answer by
        then has its connection cut (:mod:`occupy.backends.cutoff`).
        """
        cutoff = None if bound is None else time.monotonic() + bound
        dropped = False
        for attempt in range(6):
            if dropped and settled is not None:
                done = settled()
                if done is not None:
                    return done
            try:
                conn = self.connection(cutoff)
            except DatabaseError as e:
                raise self.unavailable(key, e) from e
            sharing = conn.vendor == "sqlite" and self.sharing_transaction()
            alarm = None
            try:
                statement = self._bounded(conn, sql, cutoff, sharing)
                cursor = self._cursor(conn)
                if cutoff is not None and conn.vendor != "sqlite":
                    session = _session(conn)
                    alarm = cutoffs.arm(conn.connection.fileno(), cutoff + CUT_SLACK)
                if prepare or not getattr(conn, "_occupy_prepares", False):
                    cursor.execute(statement, params)
                else:
                    with conn.wrap_database_errors:
                        cursor.cursor.execute(statement, params, prepare=False)
                raw = cursor.cursor
                with conn.wrap_database_errors:
                    rows = raw.fetchall() if raw.description else []
                return raw.rowcount, rows
            except IntegrityError:
                raise
            except DatabaseError as e:
                if sharing and is_busy(conn.vendor, e):
                    raise self._locked_by_caller(key, sharing) from e
                late = cutoff is not None and time.monotonic() >= cutoff
                if not conn.is_usable():
                    with suppress(DatabaseError):  # closing a dead connection may fail too
                        conn.close()
                    dropped = True
                elif not _is_transient(conn.vendor, e):
                    raise self.unavailable(key, e) from e
                if attempt == 5 or late:
                    raise self.unavailable(key, e) from e
                logger.debug("retrying a statement on %r after %s", key, e)
                time.sleep(0.01 * 2**attempt)
            finally:
                if alarm is not None and cutoffs.disarm(alarm):
                    self._cut(conn, session)
        raise AssertionError("unreachable")  # pragma: no cover

    def _cut(self, conn: BaseDatabaseWrapper, session: int) -> None:
        """Remember the server session of a connection cut off for not answering.

        The server may still run the statement it was sent (a stopped process that
        resumes reads it from its socket): the next new connection ends that session on
        the server before anything else, so that a grant it would make cannot outlive
        the attempt's cancellation. (A whole server that stalls cannot be reached to be
        told; a grant it makes when it resumes holds the key until its ttl.)
        """
        with suppress(DatabaseError):
            conn.close()
        self._local.cut = [*getattr(self._local, "cut", []), (conn.vendor, session)]

    def _end_cut_sessions(self, conn: BaseDatabaseWrapper) -> None:
        cut, self._local.cut = getattr(self._local, "cut", []), []
        for vendor, session in cut:
            sql = "KILL %s" if vendor == "mysql" else "SELECT pg_terminate_backend(%s)"
            with suppress(DatabaseError), conn.cursor() as cursor:
                cursor.execute(sql, [session])

    def _bounded(self, conn: BaseDatabaseWrapper, sql: str, cutoff: float | None,
                 sharing: str | None) -> str:
        """Hold the statement to ``cutoff`` on the server's side where the server can:
        return the statement to run."""
        left = None if cutoff is None else max(cutoff - time.monotonic(), 0.001)
        if conn.vendor == "sqlite":
            busy_ms = conn._occupy_busy_ms
            if left is not None:
                busy_ms = min(busy_ms, math.ceil(left * 1000))
            if sharing:  # see sharing_transaction(): do not wait for nothing
                busy_ms = min(busy_ms, SHARED_FILE_BUSY_MS)
            if busy_ms != conn._occupy_busy_now:
                conn.connection.execute(f"PRAGMA busy_timeout = {busy_ms}")
                conn._occupy_busy_now = busy_ms
        elif left is not None and conn.vendor == "mysql" and conn.mysql_is_mariadb:
            return f"SET STATEMENT max_statement_time = {left:.3f} FOR {sql}"
        return sql

    def sharing_transaction(self) -> str | None:
        """Return the alias of this thread's Django connection that has a transaction
        open on the backend's SQLite file, if any (else ``None``).

        SQLite has one write lock per file. A transaction that has written holds it
        until it commits, and the backend's own connection, another connection to the
        same file, waits for it: in the caller's own thread, for ever (until SQLite's
        busy timeout, again and again). Whether that transaction has written cannot be
        asked, so while one is open the backend's statements wait only briefly for the
        lock and then say why they cannot go on.
        """
        name = connections.settings[self.database].get("NAME")
        for alias, settings_dict in connections.settings.items():
            if settings_dict.get("NAME") != name or "sqlite" not in settings_dict["ENGINE"]:
                continue
            conn = connections[alias]
            raw = conn.connection
            if raw is not None and conn.in_atomic_block and raw.in_transaction:
                return alias
        return None

    def _locked_by_caller(self, key: str | None, alias: str) -> StoreUnavailable:
        name = connections.settings[self.database].get("NAME")
        return StoreUnavailable(
            f"occupy backend {self.alias!r} cannot write the claim on {key!r}: SQLite "
            f"database {name!r} is write-locked, and this thread's transaction on "
            f"database {alias!r} is open. SQLite has one write lock per file; a "
            "transaction that has written holds it until it commits, and occupy's claims "
            "commit on a connection of their own, which would wait for it for ever. Take "
            "the lock before the transaction writes, or outside transaction.atomic().",
            key=key, using=self.alias,
        )

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
            count = self.execute(PG_RELEASE_AND_WAKE, [d, lease.token], key=lease.key)[1][0][0]
            self.forget_listen()
        else:
            count = self.execute(sql.release(), [d, lease.token], key=lease.key)[0]
        if count:
            return
        for _ in range(5):  # the depth may change between the read and the write
            rows = self.execute(sql.granted(), [d, lease.token], key=lease.key)[1]
            depth = int(rows[0][2]) if rows else 0
            if depth < 2:
                break

            def unwound(depth: int = depth) -> tuple[int, list[Any]] | None:
                now = self.execute(sql.granted(), [d, lease.token], key=lease.key)[1]
                return (1, []) if now and int(now[0][2]) == depth - 1 else None

            if self.execute(sql.unwind(), [d, lease.token, depth], key=lease.key,
                            settled=unwound)[0]:
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

    def resume(self, key: str, token: str, ttl: float, *, deeper: bool = True) -> Lease | None:
        """Return the lease ``token`` holds on ``key`` (a level deeper if ``deeper``,
        kept at least ``ttl`` more), or ``None``: one guarded ``UPDATE``."""
        d = digest(key)
        sql = self.dialect
        count, rows = self.execute(sql.resume(), [int(deeper), sql.seconds(ttl), d, token],
                                   key=key)
        if not sql.update_returning and count:
            rows = self.execute(sql.resumed(), [d, token], key=key)[1]
        if not rows:
            return None
        owner, fence, expires_at, depth = rows[0]
        return Lease(key=key, owner=owner, token=token, fence=int(fence),
                     expires_at=sql.to_datetime(expires_at), ttl=ttl, using=self.alias,
                     depth=int(depth), backend=self)

    def takeover(self, key: str, owner: str, ttl: float) -> tuple[Lease, Holder | None]:
        """Hand the live claim to ``owner`` with a higher fence (one guarded ``UPDATE``
        by the holder's token), or insert a granted claim ahead of any queue if nobody
        holds the key; return the lease and the holder replaced."""
        d = digest(key)
        sql = self.dialect
        token = new_token()
        seconds = sql.seconds(ttl)
        for _ in range(10):
            rows = self.execute(sql.holding(), [d], key=key)[1]
            if rows:
                old_token, old_owner, expires_at, fence, since = rows[0]
                previous: Holder | None = Holder(
                    old_owner, sql.to_datetime(expires_at), int(fence), sql.to_datetime(since))
                count, granted = self.execute(
                    sql.seize(), [owner, token, d, seconds, d, old_token], key=key)
                if count and not sql.update_returning:
                    granted = self.execute(sql.granted(), [d, token], key=key)[1]
            else:
                previous = None
                self.execute(sql.purge_expired_of_key(), [d], key=key)
                content_type_id, object_id = self.object_of(key)
                granted = self.execute(sql.grant_over_queue(), [
                    key, d, d, content_type_id, object_id, owner, token, d, seconds,
                ], key=key)[1]
            if granted:  # else the holder changed meanwhile: look again
                fence, expires_at = granted[0][:2]
                lease = Lease(key=key, owner=owner, token=token, fence=int(fence),
                              expires_at=sql.to_datetime(expires_at), ttl=ttl,
                              using=self.alias, backend=self)
                return lease, previous
        raise OccupyError(f"{key!r} changed hands ten times while it was taken over.", key=key)

    def holder(self, key: str) -> Holder | None:
        """Return the live ``using`` claim's owner, expiry and fence, or ``None``."""
        found = self._holder(key)
        return None if found is None else found[0]

    def _holder(self, key: str) -> tuple[Holder, float] | None:
        rows = self.execute(self.dialect.holder(), [digest(key)], key=key)[1]
        if not rows:
            return None
        owner, expires_at, fence, since, now = rows[0]
        expires_at = self.dialect.to_datetime(expires_at)
        remaining = (expires_at - self.dialect.to_datetime(now)).total_seconds()
        holder = Holder(owner=owner, expires_at=expires_at, fence=int(fence),
                        since=self.dialect.to_datetime(since))
        return holder, remaining

    def is_held(self, lease: Lease) -> bool:
        """Return whether the lease's token still holds a live ``using`` claim."""
        return bool(self.execute(self.dialect.granted(), [digest(lease.key), lease.token],
                                 key=lease.key)[1])

    def drop_claim(self, key: str) -> None:
        """Delete the granted claim on ``key`` behind its holder's back (a test hook)."""
        self.execute(f"DELETE FROM {TABLE} WHERE slot = %s", [digest(key)], key=key)

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


def _session(conn: BaseDatabaseWrapper) -> int:
    """Return the server's id of the connection's session (no round trip)."""
    raw = conn.connection
    return raw.thread_id() if conn.vendor == "mysql" else raw.info.backend_pid


def _is_transient(vendor: str, error: DatabaseError) -> bool:
    """Return whether a failed statement may simply be run again."""
    if vendor == "sqlite":
        return is_busy(vendor, error)
    if vendor == "mysql":
        return bool(error.args) and error.args[0] in (1205, 1213)  # lock wait, deadlock
    if vendor == "postgresql":
        return getattr(error.__cause__, "sqlstate", None) in ("40001", "40P01")
    return False
