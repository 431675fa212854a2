"""Which leases each execution context holds: the proof of holding that re-entry needs.

An ``owner`` is a label for people (``holder()`` shows it to anyone), so it proves
nothing: another process or thread that passes the same owner competes like anyone
else. What proves holding is either the lease's token (presented explicitly, as an HTTP
client does) or being the execution context that took the lease: the same thread, or
the same asyncio task (two tasks on one thread are two contexts). This module keeps,
per context, the leases it took, so that ``acquire`` in the context that holds a key
(and with the same owner) re-enters it by token instead of asking the store to
recognise an owner string.

Invariants:

- A context's entry for a key counts the levels it took through ``acquire``; each
  successful release undoes one, and the entry goes with the last.
- A release that failed (the store answered with an error, or the lease was lost)
  removes the entry at once: the lease is no longer held in-process, whatever the
  store still has. An orphaned claim then expires by its ttl, and the context's next
  ``acquire`` is a new claim with a higher fence, never a re-entry of the orphan.
- A lease found here is re-entered only after the store confirms its token still
  holds the key (:meth:`~occupy.backends.base.BaseBackend.resume`); otherwise the entry
  is dropped and the caller takes the key afresh.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from occupy.leases import Lease

__all__ = ["forget", "held", "record", "unwind"]

_local = threading.local()
#: Guards the per-context tables: a lease may be released from another thread than
#: the one that took it (a handed-on lease, an async caller's pool thread).
_mutex = threading.Lock()

Held = dict[tuple[str, str], "_Entry"]


@dataclass
class _Entry:
    """A key a context holds: the lease it took first (by weak reference: a lease its
    holder dropped without releasing is not kept alive here, so the watchdog can let it
    go), its token, and how many levels were taken since."""

    lease: weakref.ref[Lease]
    token: str
    levels: int


def _context() -> Held:
    """Return the table of the running execution context (thread, or asyncio task)."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running event loop: a plain thread
        task = None
    if task is None:
        table = getattr(_local, "held", None)
        if table is None:
            table = _local.held = {}
        return table
    tasks = getattr(_local, "tasks", None)
    if tasks is None:
        tasks = _local.tasks = weakref.WeakKeyDictionary()
    table = tasks.get(task)
    if table is None:
        table = tasks[task] = {}
    return table


def held(alias: str, key: str, owner: str) -> Lease | None:
    """Return the lease this context holds on ``key`` for ``owner``, if any.

    The store has not been asked: the caller re-enters through ``resume()``, which
    checks the token, and calls :func:`forget` if the store no longer grants it.
    """
    table = _context()
    entry = table.get((alias, key))
    if entry is None:
        return None
    lease = entry.lease()
    if lease is None:  # dropped without a release: nothing to re-enter by
        with _mutex:
            if table.get((alias, key)) is entry:
                del table[(alias, key)]
        return None
    if lease.owner != owner or lease.lost or lease.pid != os.getpid():
        return None
    return lease


def record(lease: Lease, *, deeper: bool) -> None:
    """Note that this context took ``lease``: a new grant, or one level deeper."""
    table = _context()
    with _mutex:
        entry = table.get((lease.alias, lease.key))
        if deeper and entry is not None and entry.token == lease.token:
            entry.levels += 1
        else:
            table[(lease.alias, lease.key)] = _Entry(weakref.ref(lease), lease.token, 1)
        lease.held_in = table


def unwind(lease: Lease) -> None:
    """Undo one level of ``lease`` after the store released it."""
    _drop(lease, every_level=False)


def forget(lease: Lease) -> None:
    """Drop every level of ``lease`` from the context that took it (a failed release,
    or a lease the store no longer grants)."""
    _drop(lease, every_level=True)


def _drop(lease: Lease, *, every_level: bool) -> None:
    table = lease.held_in
    if table is None:
        return
    with _mutex:
        entry = table.get((lease.alias, lease.key))
        if entry is not None and entry.token == lease.token:
            entry.levels -= 1
            if every_level or entry.levels <= 0:
                del table[(lease.alias, lease.key)]
