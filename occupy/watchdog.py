"""The renewal watchdog: one background thread per process renews ``renew=True`` leases.

Each lease is extended by its own ttl every third of it. At the first failure (any
exception: the lease was taken over, or the store failed) the watchdog stops renewing
that lease and marks it lost (sending ``lease_lost``), so that ``ensure_held()`` and
leaving the ``with`` block raise :class:`~occupy.LeaseLost`. A forked child starts with
an empty watchdog: it never renews its parent's leases.

The watchdog holds its leases by weak reference: a lease that nobody holds any more
(dropped without a release) is not renewed again; its claim expires by its ttl, and
the watchdog logs a warning naming the key.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
import weakref

from occupy.exceptions import StoreUnavailable
from occupy.leases import Lease

__all__ = ["Watchdog", "watchdog"]

logger = logging.getLogger("occupy.watchdog")


class Watchdog:
    """Renew watched leases from a daemon thread until they are unwatched, fail, or
    are garbage."""

    def __init__(self) -> None:
        # Keyed by weak reference: a live lease finds its own entry (references to one
        # live object compare equal), and a collected one's entry stays apart from any
        # later lease that happens to reuse its id. The value keeps the key to log.
        self._due: dict[weakref.ref[Lease], tuple[float, str]] = {}
        # The renewals in order of time, so that finding the next one costs log n, not a
        # scan of every lease. An entry whose time no longer matches ``_due`` (renewed,
        # unwatched, watched again) is stale and skipped; ``_seq`` breaks ties.
        self._queue: list[tuple[float, int, weakref.ref[Lease]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def _schedule(self, ref: weakref.ref[Lease], due: float, key: str) -> None:
        self._due[ref] = (due, key)
        heapq.heappush(self._queue, (due, next(self._seq), ref))

    def watch(self, lease: Lease) -> None:
        """Start renewing ``lease`` every third of its ttl, for as long as it is held."""
        with self._cond:
            self._schedule(weakref.ref(lease), time.monotonic() + lease.ttl / 3, lease.key)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="occupy-watchdog", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def unwatch(self, lease: Lease) -> None:
        """Stop renewing ``lease`` (before it is released)."""
        with self._cond:
            self._due.pop(weakref.ref(lease), None)

    def watched(self, lease: Lease) -> bool:
        """Return whether ``lease`` is being renewed."""
        return weakref.ref(lease) in self._due

    def _next(self) -> Lease | None:
        """Wait for the next lease that is due, or return ``None`` when none is left."""
        with self._cond:
            while True:
                if not self._due:
                    self._thread = None
                    self._queue.clear()
                    return None
                due, _, ref = self._queue[0]
                entry = self._due.get(ref)
                if entry is None or entry[0] != due:  # stale: renewed or unwatched since
                    heapq.heappop(self._queue)
                    continue
                key = entry[1]
                delay = due - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)  # holding no lease: a dropped one can go
                    continue
                heapq.heappop(self._queue)
                lease = ref()
                if lease is None:
                    del self._due[ref]
                    logger.warning(
                        "stopped renewing %r: its lease was dropped without a release; "
                        "the claim expires by its ttl",
                        key,
                    )
                    continue
                self._schedule(ref, time.monotonic() + lease.ttl / 3, key)
                return lease

    def _run(self) -> None:
        while True:
            lease = self._next()
            if lease is None:
                return
            self._renew(lease)
            del lease  # no strong reference while waiting for the next one

    def _renew(self, lease: Lease) -> None:
        try:
            lease._backend().extend(lease, lease.ttl)
        except Exception as e:  # any failure ends the renewals: the lease is lost
            if not self.watched(lease):
                return  # released (or dropped) while the extend was on its way: not lost
            self.unwatch(lease)
            lease.mark_lost(
                f"the watchdog could not renew it ({e})",
                cause="store_failure" if isinstance(e, StoreUnavailable) else None,
            )
            logger.warning("stopped renewing %r: %s", lease.key, e)

    def _reset_after_fork(self) -> None:
        self._due = {}
        self._queue = []
        self._cond = threading.Condition()
        self._thread = None


watchdog = Watchdog()
os.register_at_fork(after_in_child=watchdog._reset_after_fork)
