"""Wait for a state instead of sleeping: a condition, the waiters a store has queued, the
attempts that have begun to wait.

A test that starts a waiter in another thread and must act once it waits polls for that
state here, bounded by a timeout that fails the test; a fixed sleep would be too short on
a loaded machine and wasted time on an idle one. Sleeps that are the point of a test (a
lease must expire) are not waits of this kind.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

import occupy
from occupy.backends import get_backend
from occupy.backends.base import Attempt, BaseBackend
from occupy.leases import Lease

__all__ = [
    "WaitingAttempts",
    "release_once_waiting",
    "wait_for_waiters",
    "wait_until",
    "waiters",
    "watch_waiters",
]

T = TypeVar("T")

#: How long a wait may take before it fails the test, in seconds.
TIMEOUT = 10.0
#: The pause between two looks.
INTERVAL = 0.005


def wait_until(predicate: Callable[[], T], *, timeout: float = TIMEOUT, what: str = "") -> T:
    """Call ``predicate`` until it returns a true value, and return that value; fail the
    test with ``what`` if ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout} s for {what or predicate}")
        time.sleep(INTERVAL)
    return value


def waiters(backend: str | BaseBackend, key: str) -> list[str]:
    """Return the owners the store has queued for ``key``, as ``list_locks`` lists them:
    the key's live claims in state ``pending`` (the database backend's pending rows, the
    Redis backend's queue, the file backend's pending claim files).

    ``backend`` is an alias or a backend instance. A backend whose waiters only poll
    (the cache backends) queues nobody: see :func:`watch_waiters` for those.
    """
    if isinstance(backend, str):
        backend = get_backend(backend)
    return [c.owner for c in backend.claims() if c.key == key and c.state == "pending"]


def wait_for_waiters(
    backend: str | BaseBackend, key: str, count: int = 1, *, timeout: float = TIMEOUT
) -> list[str]:
    """Wait until the store has queued at least ``count`` waiters for ``key``; return
    their owners."""

    def queued() -> list[str]:
        found = waiters(backend, key)
        return found if len(found) >= count else []

    return wait_until(queued, timeout=timeout, what=f"{count} waiter(s) to queue for {key!r}")


class WaitingAttempts:
    """The ``(key, owner)`` of every attempt on one backend that has begun to wait: its
    first try failed and it joined the key's queue (if the backend keeps one), so what
    happens from now on happens to a waiter."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self._mutex = threading.Lock()

    def add(self, key: str, owner: str) -> None:
        """Record that an attempt began to wait."""
        with self._mutex:
            self.seen.append((key, owner))

    def count(self) -> int:
        """Return how many attempts have begun to wait."""
        with self._mutex:
            return len(self.seen)

    def wait_for(self, count: int = 1, *, timeout: float = TIMEOUT) -> None:
        """Wait until ``count`` attempts have begun to wait."""
        wait_until(
            lambda: self.count() >= count,
            timeout=timeout,
            what=f"{count} attempt(s) to begin waiting",
        )

    async def await_for(self, count: int = 1, *, timeout: float = TIMEOUT) -> None:
        """Async twin of :meth:`wait_for`, for a waiter on the same event loop."""
        deadline = time.monotonic() + timeout
        while self.count() < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"waited {timeout} s for {count} attempt(s) to begin waiting")
            await asyncio.sleep(INTERVAL)


def watch_waiters(alias: str, monkeypatch: pytest.MonkeyPatch) -> WaitingAttempts:
    """Record, until the test ends, each attempt on backend ``alias`` that begins to wait.

    Works on every backend, including those whose waiters only poll and leave nothing in
    the store to look at: it watches the attempts themselves. An attempt begins to wait
    when its ``enqueue()`` returns without the key (``BaseBackend.acquire`` calls it
    once, after the first try failed). A hold for a transaction (``scope="transaction"``,
    and the write lock of a guarded write on PostgreSQL) begins to wait when it first
    calls the ``waiting`` hook it was handed; its owner is recorded as ``""``.
    """
    backend = get_backend(alias)
    make_attempt = backend.attempt
    watch = WaitingAttempts()
    hold_for_transaction = getattr(backend, "hold_for_transaction", None)
    if hold_for_transaction is not None:

        def hold_and_record(key: str, **kwargs: Any) -> Any:
            waiting = kwargs.get("waiting")
            seen = False

            def record_and_call() -> None:
                nonlocal seen
                if not seen:  # once per wait, even from a hook that repeats
                    seen = True
                    watch.add(key, "")
                if waiting is not None:
                    waiting()

            return hold_for_transaction(key, **{**kwargs, "waiting": record_and_call})

        monkeypatch.setattr(backend, "hold_for_transaction", hold_and_record)

    def attempt(key: str, owner: str, ttl: float) -> Attempt:
        made = make_attempt(key, owner, ttl)
        enqueue = made.enqueue

        def enqueue_and_record() -> Any:
            lease = enqueue()
            if lease is None:  # else joining the queue granted the key: no wait
                watch.add(key, owner)
            return lease

        made.enqueue = enqueue_and_record  # type: ignore[method-assign]
        return made

    monkeypatch.setattr(backend, "attempt", attempt)
    return watch


def release_once_waiting(
    alias: str, lease: Lease, monkeypatch: pytest.MonkeyPatch, *, hold: float = 0.0
) -> Callable[[], float]:
    """Release ``lease`` from another thread as soon as an attempt on backend ``alias``
    begins to wait (:func:`watch_waiters`), instead of after a fixed pause; with
    ``hold``, that many seconds after it began to wait, so the wait lasts at least
    ``hold`` seconds however fast or loaded the machine.

    Return a function that joins that thread, fails the test if no attempt began to
    wait, and returns when the release began (``time.monotonic()``). The lease is
    released whatever happens, so a test that goes wrong fails instead of hanging.
    """
    waiting = watch_waiters(alias, monkeypatch)
    errors: list[BaseException] = []
    began: list[float] = []

    def release_once_one_waits() -> None:
        try:
            waiting.wait_for(1)
            time.sleep(hold)  # the wait's length, not a guess at when it begins
        except BaseException as e:  # reported by the test's thread
            errors.append(e)
        finally:
            began.append(time.monotonic())
            occupy.release(lease)

    releaser = threading.Thread(target=release_once_one_waits)
    releaser.start()

    def join() -> float:
        releaser.join(TIMEOUT + 5)
        assert not errors, errors
        return began[0]

    return join
