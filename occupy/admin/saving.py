"""The change form's save transaction: the tab's leases confirmed in it, and a change
view that SQLite refused for a stale snapshot run once more.

Confirming the leases (:func:`confirm_leases`): where the leases live in the database
the model writes to, on PostgreSQL, the save's own transaction holds each key while its
lease is the tab's (``hold_for_transaction(..., lease=)``), so no takeover can be
granted between that check and the commit; elsewhere the store is asked whether each
lease is still held, just before the commit.

Stale snapshots (:func:`once_more_if_stale`):
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
from typing import Any, TypeVar

from django.db import OperationalError, connections, router

from occupy.backends import get_backend
from occupy.exceptions import LeaseLost, Occupied
from occupy.leases import Lease

__all__ = ["SAVE_WAIT", "confirm_leases", "once_more_if_stale"]

#: How long a save waits for a grant of its key in flight (a takeover being decided)
#: before it counts its lease as lost.
SAVE_WAIT = 5.0

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


def confirm_leases(backend_alias: str, instance: Any, leases: list[Lease]) -> None:
    """Confirm, inside the save's transaction, that the tab still holds ``leases``;
    raise :class:`~occupy.LeaseLost` (the save is rolled back) otherwise."""
    backend = get_backend(backend_alias)
    database = router.db_for_write(type(instance), instance=instance)
    if backend.transaction_refusal(database) is not None:
        for lease in leases:
            lease.ensure_held()
        return
    for lease in leases:
        try:
            backend.hold_for_transaction(lease.key, timeout=SAVE_WAIT, lease=lease)
        except Occupied as e:  # a grant stayed in flight: this lease is not the holder
            raise LeaseLost(str(e), key=lease.key) from e
