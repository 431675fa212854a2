"""The API around the backends: signals, the watchdog across fork, the async decorator."""

from __future__ import annotations

import asyncio
import os

import pytest

import occupy
from occupy import signals
from occupy.watchdog import watchdog


def test_signals_follow_a_lease(live_db: None) -> None:
    seen: list[tuple[str, str]] = []

    def record(name: str):
        def receiver(sender, lease, **kwargs) -> None:
            seen.append((name, lease.key))

        return receiver

    acquired, released = record("acquired"), record("released")
    signals.lease_acquired.connect(acquired)
    signals.lease_released.connect(released)
    try:
        with occupy.lock("book:1"):
            pass
    finally:
        signals.lease_acquired.disconnect(acquired)
        signals.lease_released.disconnect(released)
    assert seen == [("acquired", "book:1"), ("released", "book:1")]


def test_a_forked_child_neither_renews_nor_releases_the_parents_lease(live_db: None) -> None:
    lease = occupy.acquire("book:1", ttl=30, renew=True)
    assert watchdog.watched(lease)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it sees, then leave without cleanup
        verdict = "ok"
        if watchdog.watched(lease):
            verdict = "child renews the parent's lease"
        try:
            occupy.release(lease)
            verdict = "child released the parent's lease"
        except occupy.OccupyError as e:
            if "forked child" not in str(e):
                verdict = f"wrong error: {e}"
        os.write(write, verdict.encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    assert os.read(read, 200).decode() == "ok"
    assert occupy.holder("book:1").owner == lease.owner
    occupy.release(lease)
    assert not watchdog.watched(lease)


def test_the_decorator_works_on_coroutines(live_db: None) -> None:
    @occupy.lock("report:{report_id}", timeout=0)
    async def build(report_id: int) -> str:
        holder = await occupy.aholder(f"report:{report_id}")
        return holder.owner

    owner = asyncio.run(build(3))
    assert owner.count(":") == 3  # host:pid:thread:task
    assert occupy.holder("report:3") is None


def test_a_lease_lost_while_the_block_raises_does_not_hide_the_error(live_db: None) -> None:
    import time

    with pytest.raises(KeyError), occupy.lock("book:1", ttl=0.2):
        time.sleep(0.3)
        occupy.release(occupy.acquire("book:1", owner="bob", timeout=0))
        raise KeyError("the block's own error")


def test_errors_cross_a_process_boundary_whole() -> None:
    """An error sent through a multiprocessing queue keeps its message and attributes."""
    import pickle
    from datetime import datetime, timezone

    holder = occupy.Holder("alice", datetime(2026, 1, 1, tzinfo=timezone.utc), 7)
    for error in (
        occupy.Occupied("'k' is held", key="k", holder=holder, retry_after=3),
        occupy.LockTimeout("'k' is still held", key="k", holder=holder),
        occupy.TakeoverRefused("'k' changed", key="k", holder=holder, retry_after=3, if_fence=6),
        occupy.StoreUnavailable("down", key="k", backend="redis"),
        occupy.LeaseLost("lost", key="k"),
    ):
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error)
        assert copy.__dict__ == error.__dict__
