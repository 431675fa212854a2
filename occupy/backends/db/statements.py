"""How the database backend runs a statement: on its own connection, in autocommit,
retried when that is safe, held to the caller's time, and failing as an ``OccupyError``.

A dropped connection is retried on a new one, and a statement whose reply was lost with
it is found by the attempt's token instead of being run again (``settled``). A clean-up
that could not run because the store was away (an attempt's cancel: its pending claim
and a grant it may have made) is kept (:meth:`Statements.defer`) and run before the
next statement that gets a connection, in any thread, so that a waiter whose database
restarted under it does not block the key until its claim expires. A statement
is held to its time left: connecting, the server's own statement bound where the dialect
has one (:meth:`Dialect.bound`), and a cut of the socket for a server that does not
answer (:mod:`occupy.backends.db.cutoff`). A store that cannot be reached or used raises
:class:`~occupy.exceptions.StoreUnavailable`; one without occupy's table raises
:class:`~occupy.exceptions.StoreNotMigrated`, which says what to run.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, IntegrityError, connections

from occupy import telemetry
from occupy.backends.db.checks import migrate_hint, migration_recorded
from occupy.backends.db.cutoff import Cut, cutoffs
from occupy.exceptions import StoreNotMigrated, StoreUnavailable

if TYPE_CHECKING:
    from occupy.backends.base import BaseBackend
    from occupy.backends.db.connections import OwnConnections
    from occupy.backends.db.dialects import Dialect
    from occupy.backends.db.own import OwnConnection

__all__ = ["CUT_SLACK", "GuardTimedOut", "Result", "Statements"]

logger = logging.getLogger("occupy.backends.db")

#: How long after a statement's bound its connection is cut, when the server has not
#: answered (a server-side bound, at the bound itself, should come first).
CUT_SLACK = 0.25
#: A statement's rowcount and the rows it returned.
Result = tuple[int, list[Any]]


class GuardTimedOut(Exception):
    """A grant statement's guard waited out its bound for a transaction that holds the
    key (see :attr:`Dialect.holds_for_transaction`): the grant did nothing. Its caller
    takes it as a try that did not get the key."""


class Statements:
    """Run the statements of ``backend`` (its errors name it) on ``database`` in
    ``dialect``, over its own ``connections`` (see the module docstring)."""

    def __init__(
        self, backend: BaseBackend, database: str, dialect: Dialect, connections: OwnConnections
    ) -> None:
        self.backend = backend
        self.database = database
        self.dialect = dialect
        self.connections = connections
        #: Clean-ups the store could not run: ``(until, sql, params)``, each moot once
        #: ``time.monotonic()`` passes ``until`` (the claim it removes has expired).
        self.deferred: list[tuple[float, str, Sequence[Any]]] = []
        self._deferred_lock = threading.Lock()

    def defer(self, steps: Sequence[tuple[str, Sequence[Any]]], until: float) -> None:
        """Keep the clean-up ``steps`` (statements and their parameters, run in order)
        that failed because the store was away, to run before the next statement that
        gets a connection; they are dropped once ``time.monotonic()`` passes ``until``."""
        with self._deferred_lock:
            self.deferred.extend((until, sql, params) for sql, params in steps)

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
        """Run one autocommit statement; return ``(rowcount, rows)``.

        ``prepare=False`` plans the statement afresh even where statements are prepared
        (``PREPARE``): for sweeps, whose best plan depends on how many rows expired.
        Errors the dialect calls transient (:meth:`Dialect.is_transient`: a deadlock, a
        lock wait that timed out, SQLite's "database is locked") are retried a few
        times: the failed statement did nothing. So is a dropped connection, but there
        the statement may have committed with only its reply lost: a statement that
        must not run twice (a grant) passes ``settled``, which is asked first on the
        new connection and returns the statement's result if it took effect (found by
        the attempt's token), or ``None`` to run it again.

        ``bound`` (seconds) is how long the statement may take, retries included (an
        acquire's time left).
        """
        cutoff = None if bound is None else time.monotonic() + bound
        dropped = False
        for attempt in range(6):
            if dropped and settled is not None:
                done = settled()
                if done is not None:
                    return done
            try:
                own = self.connections.get(cutoff)
            except DatabaseError as e:
                raise self.failure(key, e) from e
            sharing = self.dialect.caller_transaction(self.database)
            if self.deferred:
                self._clean_up(own, cutoff, sharing)
            try:
                return self._run(own, sql, params, cutoff, sharing, prepare=prepare)
            except IntegrityError:
                raise
            except DatabaseError as e:
                dropped = self._retry_or_raise(own, e, key, sharing, cutoff, attempt) or dropped
        raise AssertionError("unreachable")  # pragma: no cover

    def _run(
        self,
        own: OwnConnection,
        sql: str,
        params: Sequence[Any],
        cutoff: float | None,
        sharing: str | None,
        *,
        prepare: bool,
    ) -> Result:
        """Run the statement once on ``own``, held to ``cutoff``: the server's bound where
        the dialect has one, and a cut of the socket past it."""
        dialect = self.dialect
        alarm: Cut | None = None
        session = None
        try:
            left = None if cutoff is None else max(cutoff - time.monotonic(), 0.001)
            statement = dialect.bound(own, sql, left, sharing)
            cursor = self.connections.cursor(own)
            if cutoff is not None:
                session = dialect.server_session(own)
                if session is not None:
                    alarm = cutoffs.arm(own.wrapper.connection.fileno(), cutoff + CUT_SLACK)
            if prepare or not own.prepares:
                cursor.execute(statement, params)
            else:
                with own.wrapper.wrap_database_errors:
                    cursor.cursor.execute(statement, params, prepare=False)
            raw = cursor.cursor
            with own.wrapper.wrap_database_errors:
                rows = raw.fetchall() if dialect.has_rows(raw) else []
            return raw.rowcount, rows
        finally:
            if alarm is not None and cutoffs.disarm(alarm):
                assert session is not None
                self.connections.cut(own, session)

    def _clean_up(self, own: OwnConnection, cutoff: float | None, sharing: str | None) -> None:
        """Run the deferred clean-ups on ``own``; keep those that fail again."""
        with self._deferred_lock:
            now = time.monotonic()
            steps, self.deferred = [step for step in self.deferred if step[0] > now], []
        for i, (_until, sql, params) in enumerate(steps):
            try:
                self._run(own, sql, params, cutoff, sharing, prepare=True)
            except DatabaseError as e:
                logger.debug("a deferred clean-up failed again (%s); kept", e)
                with self._deferred_lock:
                    self.deferred[:0] = steps[i:]
                return

    def _retry_or_raise(
        self,
        own: OwnConnection,
        error: DatabaseError,
        key: str | None,
        sharing: str | None,
        cutoff: float | None,
        attempt: int,
    ) -> bool:
        """Raise the error for a statement that failed with ``error`` on its
        ``attempt``-th run, unless it may run again: then wait a little and return
        whether its connection dropped (so the statement may have taken effect)."""
        if sharing and self.dialect.is_busy(error):
            raise self._locked_by_caller(key, sharing) from error
        if self.dialect.is_guard_timeout(error):
            raise GuardTimedOut(key) from error
        late = cutoff is not None and time.monotonic() >= cutoff
        dropped = False
        if not own.wrapper.is_usable():
            with suppress(DatabaseError):  # closing a dead connection may fail too
                own.wrapper.close()
            dropped = True
        elif not self.dialect.is_transient(error):
            raise self.failure(key, error) from error
        if attempt == 5 or late:
            raise self.failure(key, error) from error
        logger.debug("retrying a statement on %r after %s", key, error)
        time.sleep(0.01 * 2**attempt)
        return dropped

    def failure(self, key: str | None, error: BaseException) -> StoreUnavailable:
        """Return the error for a statement that failed with ``error``: the caller
        raises it ``from error``. A missing table is :class:`StoreNotMigrated`, which
        says what to run (asking, on this error's path only, whether the migration is
        recorded as applied); anything else :class:`StoreUnavailable`."""
        if not self.dialect.is_missing_table(error):
            return self.backend.unavailable(key, error)
        database = self.database
        recorded = False
        with suppress(DatabaseError):
            recorded = migration_recorded(self.connections.get().wrapper)
        on = f" on {key!r}" if key is not None else ""
        lines = str(error.args[-1] if error.args else error).splitlines()
        reason = lines[0] if lines else type(error).__name__
        return StoreNotMigrated(
            f"occupy backend {self.backend.alias!r} could not work{on}: database "
            f"{database!r} lacks the tables occupy's migration creates ({reason}). "
            f"{migrate_hint(database, recorded=recorded)}",
            key=key,
            backend=self.backend.alias,
        )

    def stayed_locked(self, key: str | None) -> StoreUnavailable:
        """Return the error for a statement that waited for SQLite's write lock until the
        caller's time was up: another writer held it all along (the caller raises it
        ``from`` the driver's error)."""
        name = connections.settings[self.database].get("NAME")
        telemetry.store_error(self.backend, key)
        return StoreUnavailable(
            f"occupy backend {self.backend.alias!r} could not write the claim on {key!r}: "
            f"SQLite database {name!r} stayed write-locked by another writer until the "
            "timeout passed, so whether the key is held could not be found out. SQLite "
            "has one write lock per file, which a transaction that has written holds until "
            "it commits: keep other writers' transactions short, or wait longer.",
            key=key,
            backend=self.backend.alias,
        )

    def _locked_by_caller(self, key: str | None, alias: str) -> StoreUnavailable:
        name = connections.settings[self.database].get("NAME")
        telemetry.store_error(self.backend, key)
        return StoreUnavailable(
            f"occupy backend {self.backend.alias!r} cannot write the claim on {key!r}: "
            f"SQLite database {name!r} is write-locked, and this thread's transaction on "
            f"database {alias!r} is open. SQLite has one write lock per file; a "
            "transaction that has written holds it until it commits, and occupy's claims "
            "commit on a connection of their own, which would wait for it for ever. Take "
            "the lock before the transaction writes, or outside transaction.atomic().",
            key=key,
            backend=self.backend.alias,
        )
