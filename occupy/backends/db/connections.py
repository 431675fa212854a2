"""The database backend's own connections: one per thread, in autocommit.

Every statement of the backend runs on a connection of its own, never the app's, so a
claim is committed the moment it is made, even inside the caller's
``transaction.atomic()``, and preparing statements on the server (``PREPARE``) changes
nothing for the app. A connection is made as its database is configured (a copy of the
settings), then as the dialect says (:meth:`Dialect.connection_options`,
:meth:`Dialect.on_connect`).

The backend also reads a few rows through Django's own connections (the content type of
a row's key): :func:`borrowing` closes again a Django connection such a read opened in
the caller's thread. Django closes its connections only at the end of a request, and a
worker thread's are left to the garbage collector (its wrappers hold reference cycles),
so a lock taken in a thread would otherwise leave a session on the server that a test
database's ``DROP DATABASE`` finds in its way.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress

from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.utils import load_backend

from occupy.backends.db.dialects import Dialect
from occupy.backends.db.own import OwnConnection

__all__ = ["OwnConnection", "OwnConnections", "borrowing"]

#: Connections a forked child inherited: kept referenced so that garbage collection
#: never closes (and so terminates) the parent's session from the child.
_inherited: list[OwnConnection] = []


class OwnConnections:
    """The backend's own connections to ``database``, one per thread."""

    def __init__(self, database: str, dialect: Dialect, *, prepare: bool) -> None:
        self.database = database
        self.dialect = dialect
        self.prepare = prepare
        self._local = threading.local()
        self._opened: weakref.WeakSet[OwnConnection] = weakref.WeakSet()

    def get(self, cutoff: float | None = None) -> OwnConnection:
        """Return this thread's connection, connected; a new session must be made by
        ``cutoff`` (``time.monotonic()``) if given."""
        local = self._local
        own: OwnConnection | None = getattr(local, "own", None)
        if own is not None and own.pid != os.getpid():
            _inherited.append(own)
            own = None
        if own is None:
            own = local.own = self._new()
            self._opened.add(own)
            # Closes the session when the thread ends (its locals die with it), in the
            # process that made it only: a forked child must not end its parent's. Tied
            # to a token that only the thread's locals hold, not to the connection: a
            # caught error's traceback keeps the frames that ran a statement, and with
            # them the connection, in a reference cycle of Django's error wrapper (an
            # acquire that loses a race for a key's slot catches an IntegrityError), so
            # the connection itself may outlive its thread until the garbage collector
            # runs.
            local.ends = _ThreadEnd()
            weakref.finalize(local.ends, _close_raw, own.wrapper, own.pid)
        wrapper = own.wrapper
        if wrapper.connection is None:
            if cutoff is not None:
                configured = (connections.settings[self.database].get("OPTIONS") or {}).get(
                    "connect_timeout", 0
                )
                self.dialect.limit_connect(wrapper.settings_dict["OPTIONS"], configured, cutoff)
            wrapper.ensure_connection()
            self.dialect.on_connect(own)
            cut = getattr(local, "cut", None)
            if cut:
                self._end_sessions(own, cut)
        return own

    def _new(self) -> OwnConnection:
        """Return a new connection (not yet connected): as configured, with the options
        the dialect adds (:meth:`Dialect.connection_options`)."""
        settings_dict = connections.settings[self.database]
        wrapper_class = load_backend(settings_dict["ENGINE"]).DatabaseWrapper
        options, prepares = self.dialect.connection_options(
            dict(settings_dict.get("OPTIONS") or {}), prepare=self.prepare
        )
        wrapper = wrapper_class({**settings_dict, "OPTIONS": options}, self.database)
        return OwnConnection(wrapper, os.getpid(), prepares)

    def cursor(self, own: OwnConnection) -> CursorWrapper:
        """Return the connection's cursor, made once per database session: a new cursor
        per statement costs as much client time as a short statement."""
        raw = own.wrapper.connection
        if own.cursor is None or own.cursor_of is not raw:
            own.cursor, own.cursor_of = own.wrapper.cursor(), raw
        return own.cursor

    def cut(self, own: OwnConnection, session: int) -> None:
        """Close a connection cut off for not answering, and remember its server session.

        The server may still run the statement it was sent (a stopped process that
        resumes reads it from its socket): the next new connection of this thread ends
        that session on the server before anything else, so that a grant it would make
        cannot outlive the attempt's cancellation. (A whole server that stalls cannot be
        reached to be told; a grant it makes when it resumes holds the key until its ttl.)
        """
        with suppress(DatabaseError):
            own.wrapper.close()
        self._local.cut = [*getattr(self._local, "cut", []), session]

    def _end_sessions(self, own: OwnConnection, sessions: list[int]) -> None:
        self._local.cut = []
        for session in sessions:
            with suppress(DatabaseError), own.wrapper.cursor() as cursor:
                cursor.execute(self.dialect.end_session(), [session])

    def close_if_unusable_or_obsolete(self) -> None:
        """Close this thread's connection if it is unusable or older than the database's
        ``CONN_MAX_AGE``, as Django does with its own at the start and end of a request
        (``close_old_connections``)."""
        own: OwnConnection | None = getattr(self._local, "own", None)
        if own is None or own.pid != os.getpid() or own.wrapper.connection is None:
            return
        with suppress(DatabaseError):
            own.wrapper.close_if_unusable_or_obsolete()

    def close(self) -> None:
        """Close the connections made in this process, in every thread."""
        for own in list(self._opened):
            _close_raw(own.wrapper, own.pid)
        self._opened = weakref.WeakSet()
        self._local = threading.local()


class _ThreadEnd:
    """Dies when its thread ends: only that thread's locals hold one."""

    __slots__ = ("__weakref__",)


@contextmanager
def borrowing(databases: Iterable[str]) -> Iterator[None]:
    """Run the block, then close this thread's Django connections to ``databases`` that
    the block opened (one that was open before is the caller's, and stays)."""
    unopened = [
        alias for alias in dict.fromkeys(databases) if connections[alias].connection is None
    ]
    try:
        yield
    finally:
        for alias in unopened:
            connection = connections[alias]
            if connection.connection is not None and not connection.in_atomic_block:
                with suppress(DatabaseError):
                    connection.close()


def _close_raw(wrapper: BaseDatabaseWrapper, pid: int) -> None:
    """Close ``wrapper``'s driver connection if this process made it.

    The driver's own close: Django's refuses a connection of another thread. A
    connection that already failed may fail again on closing: it is closed either way.
    """
    raw = wrapper.connection
    if raw is None or pid != os.getpid():
        return
    wrapper.connection = None
    with suppress(wrapper.Database.Error):  # type: ignore[attr-defined]
        raw.close()
