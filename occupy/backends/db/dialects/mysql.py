"""MySQL and MariaDB: ``INSERT IGNORE``, no ``UPDATE … RETURNING``, UTC by function."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from occupy.backends.db.dialects.base import TABLE, Dialect, statement

if TYPE_CHECKING:
    from occupy.backends.db.own import OwnConnection

__all__ = ["MySQLDialect"]

#: Error numbers of a statement that did nothing and may run again: a lock wait that
#: timed out, a deadlock.
TRANSIENT = frozenset({1205, 1213})
NO_SUCH_TABLE = 1146


def _errno(error: BaseException | None) -> int | None:
    """Return the server's error number of a Django database error, if it has one."""
    args = getattr(error, "args", None)
    return args[0] if args and isinstance(args[0], int) else None


class MySQLDialect(Dialect):
    """MySQL and MariaDB: the statements' now is ``UTC_TIMESTAMP(6)``, never the
    session's time zone; the fence's clock is ``SYSDATE(6)`` in a session set to UTC.

    ``UTC_TIMESTAMP`` (like ``NOW``) is the time the *statement began*: a grant whose
    statement waited for a row lock while another grant of the key was made and
    released (its rows gone) would take that earlier time as its fence's floor, below
    the fence just handed out. ``SYSDATE`` is the time the row is written, as
    PostgreSQL's ``clock_timestamp()`` and SQLite's function are.
    """

    vendor = "mysql"
    now = "UTC_TIMESTAMP(6)"
    later = "(UTC_TIMESTAMP(6) + INTERVAL %s MICROSECOND)"
    clock_us = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', SYSDATE(6))"
    insert_ignore = "INSERT IGNORE INTO"
    on_conflict = ""
    from_nothing = "FROM DUAL"
    quote = "`"
    # MariaDB has RETURNING for INSERT and DELETE only.
    update_returning = False

    def on_connect(self, own: OwnConnection) -> None:
        """Put the session in UTC, the zone ``SYSDATE`` answers in (see the class)."""
        with own.wrapper.cursor() as cursor:
            cursor.execute("SET time_zone = '+00:00'")

    def seconds(self, seconds: float) -> int:
        """Return ``seconds`` in whole microseconds (:attr:`later`'s interval)."""
        return round(seconds * 1_000_000)

    def object_id_text(self, column: str) -> Any:
        """Return ``column`` cast to text, so that columns of different collations never
        meet in a comparison."""
        from django.db.models import TextField
        from django.db.models.functions import Cast

        return Cast(column, TextField())

    @statement
    def sweep_batch(self) -> str:
        """Delete up to ``%s`` expired claims, oldest expiry first: one range scan of
        the expiry index, whose two intervals are the halves of :meth:`expired`."""
        return f"DELETE FROM {TABLE} WHERE {self.expired()} ORDER BY expires_at LIMIT %s"

    def bound(self, own: OwnConnection, sql: str, left: float | None, sharing: str | None) -> str:
        """On MariaDB, hold the statement to ``left`` with ``max_statement_time``."""
        if left is not None and own.wrapper.mysql_is_mariadb:  # type: ignore[attr-defined]
            return f"SET STATEMENT max_statement_time = {left:.3f} FOR {sql}"
        return sql

    def server_session(self, own: OwnConnection) -> int:
        """Return the server's thread id of the connection's session."""
        return int(own.wrapper.connection.thread_id())

    def end_session(self) -> str:
        """Return the statement that ends a server thread's session."""
        return "KILL %s"

    def is_transient(self, error: BaseException | None) -> bool:
        """Return whether ``error`` is a lock wait timeout or a deadlock."""
        return _errno(error) in TRANSIENT

    def is_missing_table(self, error: BaseException | None) -> bool:
        """Return whether ``error`` is ``ER_NO_SUCH_TABLE``."""
        return _errno(error) == NO_SUCH_TABLE
