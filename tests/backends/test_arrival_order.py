"""Waiters are served in the order they came, on every backend whose attempts queue
(override ``Attempt.enqueue()``, which joins the key's queue "so they are served in
arrival order"): the built-in stores and a backend under test alike. A backend whose
waiters only poll (the default ``enqueue()``) promises no order, and skips.

The built-in backends' own tests look closer (wake-ups, a waiter that leaves, places in
the queue: tests/backends/test_db_waiting.py, test_redis.py, test_etcd.py,
test_file.py); this one holds any backend to the order itself, from what the contract
lets a test see.
"""

from __future__ import annotations

import threading

import pytest

import occupy
from occupy.backends import get_backend
from occupy.backends.attempt import Attempt
from tests.support.waiting import watch_waiters

KEY = "book:1"
WAITERS = ["first", "second", "third", "fourth"]


def queues(alias: str) -> bool:
    """Return whether backend ``alias``'s attempts join a queue when they wait."""
    attempt = get_backend(alias).attempt(KEY, "probe", 30)  # never tried: nothing to undo
    return type(attempt).enqueue is not Attempt.enqueue


def test_waiters_are_served_in_arrival_order(alias: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four waiters queue one after the other behind a holder; a newcomer that will not
    wait is refused even then; on release each is served in turn, first come first."""
    if not queues(alias):
        pytest.skip("its attempts keep the default enqueue(): waiters poll, in no order")
    watch = watch_waiters(alias, monkeypatch)
    holder = occupy.acquire(KEY, owner="holder", ttl=30, backend=alias)
    served: list[str] = []
    errors: list[BaseException] = []

    def wait(owner: str) -> None:
        try:
            lease = occupy.acquire(KEY, owner=owner, ttl=30, timeout=60, backend=alias)
            served.append(owner)
            occupy.release(lease)
        except BaseException as e:  # reported by the test's thread
            errors.append(e)

    threads = []
    for owner in WAITERS:
        thread = threading.Thread(target=wait, args=(owner,))
        thread.start()
        threads.append(thread)
        watch.wait_for(len(threads))  # queued before the next one comes
    with pytest.raises(occupy.Occupied):
        occupy.acquire(KEY, owner="newcomer", timeout=0, backend=alias)
    occupy.release(holder)
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive(), f"a waiter was never served; served: {served}"
    assert not errors, errors
    assert served == WAITERS
    assert occupy.holder(KEY, backend=alias) is None
