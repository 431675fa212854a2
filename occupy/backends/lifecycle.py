"""occupy's own connections follow Django's: closed where Django closes its own.

- At the start and end of every request (``request_started``, ``request_finished``),
  this thread's connections that are unusable or older than their database's
  ``CONN_MAX_AGE`` are closed, as Django's ``close_old_connections`` does with its own.
  With the default ``CONN_MAX_AGE = 0`` a request leaves no session of occupy's open.
- When a thread ends, the connection it made is closed (see
  :mod:`occupy.backends.db.connections`), not when the garbage collector runs.
- Before Django creates, clones or drops a database (it connects to the server without
  one: a test database's set-up and teardown), every connection occupy made in this
  process is closed, so that ``DROP DATABASE`` finds no session of occupy's on it.
- :func:`occupy.backends.close_connections` closes them all by hand.

:class:`~occupy.apps.OccupyConfig` connects the receivers when Django starts.
"""

from __future__ import annotations

from typing import Any

from django.core.signals import request_finished, request_started
from django.db.backends.base.base import NO_DB_ALIAS, BaseDatabaseWrapper
from django.db.backends.signals import connection_created

from occupy.backends import built_backends, close_connections

__all__ = ["close_before_database_work", "close_old_connections", "connect_receivers"]


def close_old_connections(**kwargs: Any) -> None:
    """Close this thread's connections that are unusable or past their database's
    ``CONN_MAX_AGE``, in every backend built so far."""
    for backend in built_backends():
        backend.close_if_unusable_or_obsolete()


def close_before_database_work(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    """Close every connection occupy made in this process when Django connects to the
    server without a database (``NO_DB_ALIAS``): it does so only to create, clone or
    drop a database, which other sessions on it would block."""
    if connection.alias == NO_DB_ALIAS:
        close_connections()


def connect_receivers() -> None:
    """Connect the receivers above (idempotent: each has a ``dispatch_uid``)."""
    request_started.connect(close_old_connections, dispatch_uid="occupy.close_old_connections")
    request_finished.connect(close_old_connections, dispatch_uid="occupy.close_old_connections")
    connection_created.connect(
        close_before_database_work, dispatch_uid="occupy.close_before_database_work"
    )
