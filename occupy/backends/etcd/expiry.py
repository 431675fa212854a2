"""Ending this process's grants at their ttl, to the millisecond.

An etcd lease counts whole seconds (and no fewer than the cluster's minimum, about one
and a half election timeouts), so a grant's lease alone would outlive a ttl of 0.3 s.
The process that last wrote a grant (took, extended, re-entered it) therefore ends it
itself when its ttl has passed by *its own* monotonic clock: one transaction deletes the
grant's key if nobody has written it since (its ``mod_revision`` is unchanged), then the
lease is revoked. No two machines' clocks are ever compared. If that process is gone or
stalled, the lease ends the grant on the cluster's clock, at most its TTL later, and
never before the ttl: a grant is never shorter than asked, only a dead holder's may be
longer (see docs/backends/etcd.md).
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Deadline", "Expirer"]


@dataclass(frozen=True)
class Deadline:
    """When (``time.monotonic()``) the grant stored at ``name``, as last written at
    ``mod_revision`` with lease ``lease``, ends."""

    at: float
    name: str
    mod_revision: int
    lease: int


class Expirer:
    """A thread that calls ``end(deadline)`` for each grant whose deadline passes."""

    def __init__(self, end: Callable[[Deadline], None]) -> None:
        self._end = end
        self._by_token: dict[str, Deadline] = {}
        self._heap: list[tuple[float, int, str, Deadline]] = []
        self._count = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._closed = False

    def schedule(self, token: str, deadline: Deadline) -> None:
        """End the grant of ``token`` at ``deadline`` (replacing its earlier deadline)."""
        with self._wake:
            if self._pid != os.getpid():
                self._start()
            self._by_token[token] = deadline
            heapq.heappush(self._heap, (deadline.at, next(self._count), token, deadline))
            self._start()
            self._wake.notify()

    def rewritten(self, token: str, mod_revision: int) -> None:
        """Keep ``token``'s deadline after this process wrote its grant again (at
        ``mod_revision``), if it has one."""
        with self._wake:
            old = self._by_token.get(token)
        if old is not None:
            self.schedule(token, Deadline(old.at, old.name, mod_revision, old.lease))

    def forget(self, token: str) -> None:
        """Drop the deadline of ``token`` (released or taken over)."""
        with self._wake:
            self._by_token.pop(token, None)

    def passed(self, token: str) -> bool:
        """Return whether this process ended, or should have ended, ``token``'s grant."""
        with self._wake:
            deadline = self._by_token.get(token)
        return deadline is not None and deadline.at <= time.monotonic()

    def _start(self) -> None:
        if self._pid != os.getpid():  # a forked child ends none of its parent's grants
            self._heap.clear()
            self._by_token.clear()
            self._thread = None
        if self._thread is None or not self._thread.is_alive():
            self._pid = os.getpid()
            self._closed = False
            self._thread = threading.Thread(
                target=self._run, name="occupy-etcd-expiry", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._closed and (not self._heap or self._heap[0][0] > time.monotonic()):
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._wake.wait(timeout)
                if self._closed:
                    return
                _at, _n, token, deadline = heapq.heappop(self._heap)
                if self._by_token.get(token) != deadline:
                    continue  # replaced or forgotten since
            self._end(deadline)  # outside the lock: a round trip to etcd
            with self._wake:
                if self._by_token.get(token) == deadline:
                    del self._by_token[token]

    def close(self) -> None:
        """Stop the thread (grants left are ended by their leases)."""
        with self._wake:
            self._closed = True
            self._heap.clear()
            self._by_token.clear()
            self._wake.notify()
        self._thread = None
