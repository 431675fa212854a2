"""SQLite: one write lock per file, a busy wait instead of a server, the clock in Python.

A statement of the backend's own connection waits for the write lock up to SQLite's
busy timeout, held to the caller's time left. A caller's own transaction that has
written holds that lock until it commits, and the backend's connection, another
connection to the same file, would wait for it for ever from the caller's own thread:
while such a transaction is open, statements wait only briefly and then say why they
cannot go on (see :meth:`SQLiteDialect.caller_transaction`).
"""

from __future__ import annotations

import math
import sqlite3
import time
from typing import TYPE_CHECKING, Any

from django.db import OperationalError, connections

from occupy.backends.db.dialects.base import Dialect

if TYPE_CHECKING:
    from occupy.backends.db.own import OwnConnection

__all__ = ["SHARED_FILE_BUSY_MS", "SQLiteDialect"]

#: How long a statement waits for the write lock while this thread has a transaction
#: open on the same file.
SHARED_FILE_BUSY_MS = 500


def _clock_us() -> int:
    return time.time_ns() // 1000


class SQLiteDialect(Dialect):
    """SQLite: times are naive UTC text; the fence clock is a Python function."""

    vendor = "sqlite"
    now = "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')"
    later = "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', %s)"
    # Called inside the statement, under SQLite's write lock, so two grants of a key
    # read it in the order they are granted.
    clock_us = "occupy_clock_us()"
    greatest = "MAX"
    update_returning = sqlite3.sqlite_version_info >= (3, 35)

    def seconds(self, seconds: float) -> str:
        """Return ``seconds`` as a ``strftime`` modifier."""
        return f"+{seconds:.6f} seconds"

    def limit_connect(self, options: dict[str, Any], configured: Any, cutoff: float) -> None:
        """Do nothing: opening a file does not wait for a server."""

    def on_connect(self, own: OwnConnection) -> None:
        """Add the clock function, and read the busy timeout the database configures."""
        raw = own.wrapper.connection
        raw.create_function("occupy_clock_us", 0, _clock_us)
        own.wait_ms = own.wait_now = int(raw.execute("PRAGMA busy_timeout").fetchone()[0])

    def bound(self, own: OwnConnection, sql: str, left: float | None, sharing: str | None) -> str:
        """Hold the busy wait to ``left``, and to :data:`SHARED_FILE_BUSY_MS` while the
        caller's transaction is open on the file (it will not commit meanwhile)."""
        busy_ms = own.wait_ms
        if left is not None:
            busy_ms = min(busy_ms, math.ceil(left * 1000))
        if sharing:
            busy_ms = min(busy_ms, SHARED_FILE_BUSY_MS)
        if busy_ms != own.wait_now:
            own.wrapper.connection.execute(f"PRAGMA busy_timeout = {busy_ms}")
            own.wait_now = busy_ms
        return sql

    def caller_transaction(self, database: str) -> str | None:
        """Return the alias of this thread's Django connection that has a transaction
        open on ``database``'s SQLite file, if any (else ``None``).

        Whether that transaction has written, and so holds the file's write lock,
        cannot be asked; while one is open, the backend's statements wait only briefly.
        """
        name = connections.settings[database].get("NAME")
        for alias, settings_dict in connections.settings.items():
            if settings_dict.get("NAME") != name or "sqlite" not in settings_dict["ENGINE"]:
                continue
            conn = connections[alias]
            raw = conn.connection
            if raw is not None and conn.in_atomic_block and raw.in_transaction:
                return alias
        return None

    def is_busy(self, error: BaseException | None) -> bool:
        """Return whether ``error`` says the file is write-locked by another connection."""
        return isinstance(error, OperationalError) and (
            "locked" in str(error) or "busy" in str(error)
        )

    def is_transient(self, error: BaseException | None) -> bool:
        """Return whether ``error`` says the file is write-locked (see :meth:`is_busy`)."""
        return self.is_busy(error)

    def is_missing_table(self, error: BaseException | None) -> bool:
        """Return whether ``error`` says ``no such table``."""
        return isinstance(error, OperationalError) and str(error).startswith("no such table")
