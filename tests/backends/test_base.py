"""The generic waiting loop of ``BaseBackend``, on a backend made of stubs."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone

import pytest

import occupy
from occupy.backends.base import Attempt, BaseBackend
from occupy.leases import Lease


class _Attempt(Attempt):
    """Refused on every try; joining the queue grants (the key came free meanwhile)."""

    def __init__(self, backend: BaseBackend, key: str, owner: str, ttl: float) -> None:
        super().__init__(backend, key, owner, ttl)
        self.calls: list[str] = []

    def try_acquire(self) -> Lease | None:
        self.calls.append("try")
        return None

    def enqueue(self) -> Lease | None:
        self.calls.append("enqueue")
        return Lease(
            key=self.key,
            owner=self.owner,
            token=self.token,
            fence=7,
            expires_at=datetime.now(timezone.utc),
            ttl=self.ttl,
            alias="stub",
        )

    def wait(self, seconds: float) -> None:
        self.calls.append("wait")

    def cancel(self) -> None:
        self.calls.append("cancel")


class _Backend(BaseBackend):
    def attempt(self, key: str, owner: str, ttl: float) -> Attempt:
        self.last = _Attempt(self, key, owner, ttl)
        return self.last

    def holder(self, key: str) -> None:
        return None


@pytest.mark.parametrize("timeout", [1e-9, 5, None])
def test_a_grant_made_while_joining_the_queue_is_returned_never_cancelled(timeout) -> None:
    backend = _Backend("stub", {})
    lease = backend.acquire("k", owner="o", ttl=30, timeout=timeout)
    assert lease.fence == 7
    assert backend.last.calls == ["try", "enqueue"]


def test_async_twin_returns_a_grant_made_while_joining_the_queue() -> None:
    import asyncio

    backend = _Backend("stub", {})
    lease = asyncio.run(backend.aacquire("k", owner="o", ttl=30, timeout=1e-9))
    assert lease.fence == 7
    assert backend.last.calls == ["try", "enqueue"]


def test_no_wait_means_no_queue() -> None:
    backend = _Backend("stub", {})
    with pytest.raises(occupy.Occupied):
        backend.acquire("k", owner="o", ttl=30, timeout=0)
    assert backend.last.calls == ["try", "cancel"]


class _SlowGrant(_Attempt):
    """A try that grants, but only after its async caller has been cancelled."""

    def try_acquire(self) -> Lease | None:
        self.backend.trying.set()
        time.sleep(0.3)  # the store's reply is slow: the caller is cancelled meanwhile
        self.calls.append("try")
        return Lease(
            key=self.key,
            owner=self.owner,
            token=self.token,
            fence=8,
            expires_at=datetime.now(timezone.utc),
            ttl=self.ttl,
            alias="stub",
        )


class _SlowBackend(_Backend):
    def __init__(self, alias: str, params: dict) -> None:
        super().__init__(alias, params)
        self.released: list[Lease] = []
        self.trying = threading.Event()  # set when a try has begun

    def attempt(self, key: str, owner: str, ttl: float) -> Attempt:
        self.last = _SlowGrant(self, key, owner, ttl)
        return self.last

    def release(self, lease: Lease) -> None:
        self.released.append(lease)


def test_a_grant_made_after_the_async_caller_was_cancelled_is_released() -> None:
    """Released like a lease (one level, by its token), not cancelled: a re-entry made
    meanwhile by that token must stand."""
    import asyncio

    backend = _SlowBackend("stub", {})

    async def main() -> None:
        task = asyncio.ensure_future(backend.aacquire("k", owner="o", ttl=30, timeout=5))
        assert await asyncio.to_thread(backend.trying.wait, 10)  # the try is running
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert [lease.fence for lease in backend.released] == [8]
    assert backend.last.calls == ["try"]  # granted, then released; never cancelled


def test_a_waiter_behind_others_paces_its_looks_by_the_queue(monkeypatch) -> None:
    """Half the time the claims ahead of the third in line should take, at the pace the
    queue has moved since the attempt first looked; a lone waiter's pace among the
    first three."""
    clock = [100.0]
    monkeypatch.setattr("occupy.backends.pacing.time.monotonic", lambda: clock[0])
    monkeypatch.setattr("occupy.backends.pacing.random.uniform", lambda low, high: high)
    attempt = _Attempt(_Backend("stub", {}), "k", "me", 30)
    attempt.max_delay = 0.02
    attempt.note_place(11)
    assert attempt.next_delay() == pytest.approx(9 * 0.02 / 2)  # not moved yet
    clock[0] += 1.0
    attempt.note_place(7)  # four served in a second
    assert attempt.next_delay() == pytest.approx(5 * 0.25 / 2)
    clock[0] += 60
    attempt.note_place(5)  # a stalled queue: the pause is capped
    assert attempt.next_delay() == attempt.longest_queued_pause
    attempt.note_place(2)  # among the first three in line: a lone waiter's pace
    assert attempt.next_delay() <= attempt.max_delay
    attempt.note_place(None)  # queued again: the pace is seen afresh
    attempt.note_place(3)
    assert attempt.next_delay() == pytest.approx(0.02)  # never faster than the head
    attempt.note_place(12)
    clock[0] += 0.5
    attempt.note_place(12)  # not moved in half a second: a turn takes that at least
    assert attempt.next_delay() == pytest.approx(min(10 * 0.5 / 2, 1.0))
