"""The renewal watchdog: one background thread per process renews ``renew=True`` leases.

Each lease is extended by its own ttl every third of it. At the first failure the
watchdog stops renewing that lease and marks it lost (sending ``lease_lost``), so that
``ensure_held()`` and leaving the ``with`` block raise :class:`~occupy.LeaseLost`. A
forked child starts with an empty watchdog: it never renews its parent's leases.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from occupy.leases import Lease

__all__ = ["Watchdog", "watchdog"]

logger = logging.getLogger("occupy.watchdog")


class Watchdog:
    """Renew watched leases from a daemon thread until they are unwatched or fail."""

    def __init__(self) -> None:
        self._due: dict[int, tuple[float, Lease]] = {}
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(self, lease: Lease) -> None:
        """Start renewing ``lease`` every third of its ttl."""
        with self._cond:
            self._due[id(lease)] = (time.monotonic() + lease.ttl / 3, lease)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="occupy-watchdog", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def unwatch(self, lease: Lease) -> None:
        """Stop renewing ``lease`` (before it is released)."""
        with self._cond:
            self._due.pop(id(lease), None)

    def watched(self, lease: Lease) -> bool:
        """Return whether ``lease`` is being renewed."""
        return id(lease) in self._due

    def _next(self) -> Lease | None:
        """Wait for the next lease that is due, or return ``None`` when none is left."""
        with self._cond:
            while True:
                if not self._due:
                    self._thread = None
                    return None
                ident, (due, lease) = min(self._due.items(), key=lambda item: item[1][0])
                delay = due - time.monotonic()
                if delay <= 0:
                    self._due[ident] = (time.monotonic() + lease.ttl / 3, lease)
                    return lease
                self._cond.wait(delay)

    def _run(self) -> None:
        while (lease := self._next()) is not None:
            try:
                lease._backend().extend(lease, lease.ttl)
            except Exception as e:  # any failure ends the renewals: the lease is lost
                self.unwatch(lease)
                lease.mark_lost(f"the watchdog could not renew it ({e})")
                logger.warning("stopped renewing %r: %s", lease.key, e)

    def _reset_after_fork(self) -> None:
        self._due = {}
        self._cond = threading.Condition()
        self._thread = None


watchdog = Watchdog()
os.register_at_fork(after_in_child=watchdog._reset_after_fork)
