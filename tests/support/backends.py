"""Backends the tests configure that are not in occupy itself."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from occupy.backends.cache import AddCacheBackend
from occupy.leases import Lease
from occupy.testing import clock
from occupy.testing.memory import MemoryAttempt, MemoryBackend

__all__ = ["AddOnlyCacheBackend", "QueuedMemoryBackend"]


class AddOnlyCacheBackend(AddCacheBackend):
    """``CacheBackend`` that ignores the Redis protocol and uses ``add``/``get``/``set``/
    ``delete`` only, as it does on memcached: its cross-process behaviour is tested on
    the shared Redis cache, since no memcached server is at hand."""


class QueuedMemoryBackend(MemoryBackend):
    """A third party's backend, as docs/backends/writing.md has one contract-tested: the
    memory backend with a queue per key, so that waiters are served in arrival order.

    No configuration names it: a run binds it as alias ``extra`` with
    ``OCCUPY_TEST_BACKEND=tests.support.backends.QueuedMemoryBackend
    OCCUPY_TEST_BACKEND_ONE_PROCESS=1``, and ``-m extra`` runs the generic suite on it.
    """

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        super().__init__(alias, params)
        #: The tokens of each key's queued waiters, first come first.
        self.queues: dict[str, list[str]] = {}

    def clear(self) -> None:
        """Forget every claim and every queued waiter."""
        super().clear()
        with self.mutex:
            self.queues.clear()

    def attempt(self, key: str, owner: str, ttl: float) -> QueuedAttempt:
        """Return an attempt that joins the key's queue when it waits."""
        return QueuedAttempt(self, key, owner, ttl)


class QueuedAttempt(MemoryAttempt):
    """A try at a key that, once queued, is granted only at the head of the queue; a
    newcomer that did not queue is granted only when nobody is queued."""

    memory: QueuedMemoryBackend

    def try_acquire(self) -> Lease | None:
        """Grant the key if it is free and this attempt is next in line."""
        with self.memory.mutex:
            queue = self.memory.queues.get(self.key, [])
            if queue and queue[0] != self.token:
                return None
            now = clock.now()
            if self.memory._live(self.key, now) is not None:
                return None
            self._leave(queue)
            return self.memory._grant(self.key, self.owner, self.token, self.ttl, now)

    def enqueue(self) -> Lease | None:
        """Join the key's queue (last); a grant comes from a later try."""
        with self.memory.mutex:
            self.memory.queues.setdefault(self.key, []).append(self.token)
        return None

    def cancel(self) -> None:
        """Leave the key's queue, if queued."""
        with self.memory.mutex:
            self._leave(self.memory.queues.get(self.key, []))

    def _leave(self, queue: list[str]) -> None:
        """Remove this attempt from ``queue`` (the key's), under the backend's mutex."""
        if self.token in queue:
            queue.remove(self.token)
        if not queue:
            self.memory.queues.pop(self.key, None)
