"""One of the database backend's own connections (:class:`OwnConnection`): what the
connections (:mod:`.connections`) and the dialects (:mod:`.dialects`) share of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

__all__ = ["OwnConnection"]


@dataclass(eq=False)
class OwnConnection:
    """One of the backend's own connections, and what the backend keeps about it."""

    #: Django's wrapper; its ``connection`` is the driver's, ``None`` while closed.
    wrapper: BaseDatabaseWrapper
    #: The process that made it: a forked child makes its own.
    pid: int
    #: Whether the server prepares its statements (see ``PREPARE``).
    prepares: bool = False
    #: How long a statement may wait for a lock, in milliseconds, as the database
    #: configures it and as it is set now (SQLite's busy timeout; see Dialect.bound).
    wait_ms: int = 0
    wait_now: int = 0
    #: The cursor, and the driver connection it was made on.
    cursor: CursorWrapper | None = None
    cursor_of: Any = None
