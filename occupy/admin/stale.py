"""A change view that SQLite refused for a stale snapshot is run once more.

SQLite in WAL mode refuses, at once and whatever the busy timeout, the first write of a
transaction whose reads began before another connection's commit ("database is
locked"): a change form's save reads the object, another tab renews its lease (a commit
of occupy's, on occupy's own connection), and the save's write fails. Django's change
view runs in one ``transaction.atomic()``, so nothing of it was written: when no
transaction is left open on the database, the view is run once more, on a fresh
snapshot, instead of answering 500.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from django.db import OperationalError, connections, router

__all__ = ["once_more_if_stale"]

logger = logging.getLogger("occupy.admin")
T = TypeVar("T")


def once_more_if_stale(model: type, view: Callable[[], T]) -> T:
    """Return ``view()``; run it once more if SQLite refused its write for a stale
    snapshot and its transaction on ``model``'s database was rolled back whole."""
    database = router.db_for_write(model)
    try:
        return view()
    except OperationalError as e:
        connection = connections[database]
        if connection.vendor != "sqlite" or "locked" not in str(e) or connection.in_atomic_block:
            raise
        logger.info("the change view met SQLite's lock (%s): run once more", e)
        return view()
