"""The lease contract, bound to every backend through the ``alias`` fixture."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from contextlib import suppress
from datetime import datetime, timezone

import pytest

import occupy
from occupy import signals
from occupy.backends import get_backend
from occupy.exceptions import LeaseLost
from occupy.testing import MemoryBackend, clock
from tests.support.claims import drop_claim
from tests.support.waiting import release_once_waiting, wait_until, watch_waiters


def pass_time(alias: str, seconds: float) -> None:
    """Let ``seconds`` pass for the store ``alias``: the memory store's clock is moved
    (occupy.testing), the others are waited for."""
    if isinstance(get_backend(alias), MemoryBackend):
        clock.advance(seconds)
    else:
        time.sleep(seconds)


def test_acquire_and_release(alias: str) -> None:
    lease = occupy.acquire("book:1", owner="alice", ttl=30, backend=alias)
    assert (lease.key, lease.owner, lease.alias) == ("book:1", "alice", alias)
    assert len(lease.token) >= 32
    assert isinstance(lease.fence, int)
    assert lease.expires_at.tzinfo is not None
    holder = occupy.holder("book:1", backend=alias)
    assert holder[:3] == ("alice", lease.expires_at, lease.fence)
    occupy.release(lease)
    assert occupy.holder("book:1", backend=alias) is None


def test_a_second_release_says_the_lease_was_already_released(alias: str) -> None:
    lease = occupy.acquire("book:1", owner="alice", ttl=30, backend=alias)
    occupy.release(lease)
    lost: list[object] = []

    def on_lost(**kwargs: object) -> None:
        lost.append(kwargs)

    signals.lease_lost.connect(on_lost)
    try:
        with pytest.raises(LeaseLost, match="was already released"):
            occupy.release(lease)
    finally:
        signals.lease_lost.disconnect(on_lost)
    assert lost == []  # nothing was lost: the caller released twice
    assert not lease.lost
    other = occupy.acquire("book:1", owner="bob", ttl=30, timeout=0, backend=alias)
    with pytest.raises(LeaseLost, match="was already released"):
        occupy.release(lease)  # and never touches the next holder's claim
    assert occupy.holder("book:1", backend=alias).owner == "bob"
    occupy.release(other)


def test_a_second_async_release_says_the_lease_was_already_released(alias: str) -> None:
    async def twice() -> None:
        lease = await occupy.aacquire("book:1", owner="alice", ttl=30, backend=alias)
        await occupy.arelease(lease)
        with pytest.raises(LeaseLost, match="was already released"):
            await occupy.arelease(lease)

    asyncio.run(twice())


def test_expiry_comes_from_the_store_clock(alias: str) -> None:
    before = datetime.now(timezone.utc)
    lease = occupy.acquire("book:1", ttl=30, backend=alias)
    # Same machine here, so the store's clock agrees with ours to within a second.
    assert abs((lease.expires_at - before).total_seconds() - 30) < 1.5
    occupy.release(lease)


def test_occupied_names_the_holder_and_never_its_token(alias: str) -> None:
    lease = occupy.acquire("book:1", owner="alice", ttl=30, backend=alias)
    with pytest.raises(occupy.Occupied) as info:
        occupy.acquire("book:1", owner="bob", timeout=0, backend=alias)
    error = info.value
    assert not isinstance(error, occupy.LockTimeout)
    assert error.key == "book:1"
    assert error.holder is not None and error.holder.owner == "alice"
    assert 29 <= error.retry_after <= 30
    assert "book:1" in str(error) and "alice" in str(error)
    assert lease.token not in str(error) and lease.token not in repr(error.holder)
    assert lease.token not in repr(lease)
    assert not hasattr(error.holder, "token")
    occupy.release(lease)


def test_lock_timeout_honours_the_timeout(alias: str) -> None:
    lease = occupy.acquire("book:1", owner="alice", ttl=30, backend=alias)
    started = time.monotonic()
    with pytest.raises(occupy.LockTimeout) as info:
        occupy.acquire("book:1", owner="bob", timeout=0.5, backend=alias)
    waited = time.monotonic() - started
    # The timeout, then the cancellation's round trip: slow only on a loaded machine.
    assert 0.5 <= waited < 1.5
    assert info.value.holder.owner == "alice"
    assert isinstance(info.value, occupy.Occupied)
    occupy.release(lease)
    # The timed-out waiter left nothing behind: the key is free at once.
    occupy.release(occupy.acquire("book:1", owner="carol", timeout=0, backend=alias))


def test_a_waiter_gets_the_key_when_it_is_released(
    alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    lease = occupy.acquire("book:1", owner="alice", ttl=30, backend=alias)
    released = release_once_waiting(alias, lease, monkeypatch)
    second = occupy.acquire("book:1", owner="bob", timeout=5, backend=alias)
    granted = time.monotonic()
    release_began = released()
    assert 0 < granted - release_began < 2  # after the release, not at the timeout
    assert second.fence > lease.fence
    occupy.release(second)


def test_the_same_owner_reenters(alias: str) -> None:
    outer = occupy.acquire("book:1", owner="alice", ttl=30, backend=alias)
    inner = occupy.acquire("book:1", owner="alice", ttl=30, timeout=0, backend=alias)
    assert inner.fence == outer.fence and inner.depth == 2
    occupy.release(inner)
    assert occupy.holder("book:1", backend=alias).owner == "alice"
    with pytest.raises(occupy.Occupied):
        occupy.acquire("book:1", owner="bob", timeout=0, backend=alias)
    occupy.release(outer)
    assert occupy.holder("book:1", backend=alias) is None


def test_extend_moves_the_expiry(alias: str) -> None:
    lease = occupy.acquire("book:1", ttl=2, backend=alias)
    first = lease.expires_at
    lease.extend(60)
    assert (lease.expires_at - first).total_seconds() > 50
    assert occupy.holder("book:1", backend=alias).expires_at == lease.expires_at
    lease.ensure_held()
    occupy.release(lease)


def test_an_expired_lease_counts_as_absent(alias: str) -> None:
    lease = occupy.acquire("book:1", owner="alice", ttl=0.3, backend=alias)
    pass_time(alias, 0.45)
    assert occupy.holder("book:1", backend=alias) is None
    with pytest.raises(occupy.LeaseLost):
        lease.ensure_held()
    bob = occupy.acquire("book:1", owner="bob", timeout=0, backend=alias)
    assert bob.fence > lease.fence
    occupy.release(bob)


def test_a_late_release_raises_and_never_frees_the_next_holder(alias: str) -> None:
    lost: list = []
    signals.lease_lost.connect(
        lambda **kw: lost.append(kw["lease"]), weak=False, dispatch_uid="test-late-release"
    )
    try:
        alice = occupy.acquire("book:1", owner="alice", ttl=0.3, backend=alias)
        pass_time(alias, 0.45)
        bob = occupy.acquire("book:1", owner="bob", ttl=30, timeout=0, backend=alias)
        with pytest.raises(occupy.LeaseLost) as info:
            occupy.release(alice)
        assert info.value.key == "book:1"
        assert lost == [alice] and alice.lost
        with pytest.raises(occupy.LeaseLost):
            alice.extend(30)
        holder = occupy.holder("book:1", backend=alias)
        assert holder.owner == "bob" and holder.fence == bob.fence
        occupy.release(bob)
    finally:
        signals.lease_lost.disconnect(dispatch_uid="test-late-release")


def test_a_late_extend_raises(alias: str) -> None:
    alice = occupy.acquire("book:1", owner="alice", ttl=0.3, backend=alias)
    pass_time(alias, 0.45)
    with pytest.raises(occupy.LeaseLost):
        alice.extend(30)
    assert occupy.holder("book:1", backend=alias) is None


def test_extend_with_a_stale_token_never_touches_the_next_holder(alias: str) -> None:
    """Called on the backend with a copy whose ``lost`` flag is clear, so that only the
    store's token check can refuse it."""
    backend = get_backend(alias)
    alice = occupy.acquire("book:1", owner="alice", ttl=30, backend=alias)
    occupy.release(alice)
    bob = occupy.acquire("book:1", owner="bob", ttl=30, timeout=0, backend=alias)
    before = occupy.holder("book:1", backend=alias)
    stale = dataclasses.replace(alice, lost=False)
    with pytest.raises(occupy.LeaseLost):
        backend.extend(stale, 300)
    assert occupy.holder("book:1", backend=alias) == before
    assert backend.is_held(bob)
    occupy.release(bob)


def test_releasing_twice_raises(alias: str) -> None:
    lease = occupy.acquire("book:1", backend=alias)
    occupy.release(lease)
    with pytest.raises(occupy.LeaseLost):
        occupy.release(lease)


def test_fences_rise_across_release_expiry_and_sweep(alias: str) -> None:
    backend = get_backend(alias)
    fences = []
    lease = occupy.acquire("book:1", ttl=30, backend=alias)
    fences.append(lease.fence)
    occupy.release(lease)
    lease = occupy.acquire("book:1", ttl=30, backend=alias)  # after a release
    fences.append(lease.fence)
    occupy.release(lease)
    lease = occupy.acquire("book:1", ttl=0.2, backend=alias)
    fences.append(lease.fence)
    pass_time(alias, 0.3)
    lease = occupy.acquire("book:1", ttl=0.2, backend=alias)  # over an expired claim
    fences.append(lease.fence)
    pass_time(alias, 0.3)
    backend.sweep()  # every trace of the key is gone
    lease = occupy.acquire("book:1", ttl=30, backend=alias)
    fences.append(lease.fence)
    occupy.release(lease)
    assert fences == sorted(set(fences)), fences


def test_fences_are_per_key_and_keys_are_independent(alias: str) -> None:
    a = occupy.acquire("book:1", owner="alice", backend=alias)
    b = occupy.acquire("book:2", owner="bob", timeout=0, backend=alias)
    assert occupy.holder("book:2", backend=alias).owner == "bob"
    occupy.release(a)
    occupy.release(b)


def test_keys_compare_exactly(alias: str) -> None:
    """Case and trailing spaces make different keys (MySQL collations would fold them)."""
    leases = [
        occupy.acquire(key, owner=key, timeout=0, backend=alias)
        for key in ("Book:1", "book:1", "book:1 ", "bööк:1")
    ]
    assert [occupy.holder(lease.key, backend=alias).owner for lease in leases] == [
        "Book:1",
        "book:1",
        "book:1 ",
        "bööк:1",
    ]
    for lease in leases:
        occupy.release(lease)


def test_the_with_block_releases_even_when_it_raises(alias: str) -> None:
    with pytest.raises(RuntimeError), occupy.lock("book:1", backend=alias):
        assert occupy.holder("book:1", backend=alias) is not None
        raise RuntimeError("boom")
    assert occupy.holder("book:1", backend=alias) is None


def test_leaving_the_block_after_the_lease_expired_raises(alias: str) -> None:
    with pytest.raises(occupy.LeaseLost), occupy.lock("book:1", ttl=0.3, backend=alias):
        pass_time(alias, 0.45)
        occupy.release(occupy.acquire("book:1", owner="bob", timeout=0, backend=alias))


def test_the_decorator_formats_the_key_from_the_call(alias: str) -> None:
    seen = []

    @occupy.lock("config:{config_id}:{user.upper}", timeout=0, backend=alias)
    def edit_config(config_id: int, user: str = "ann") -> str:
        seen.append(occupy.holder(f"config:{config_id}:{user.upper}", backend=alias))
        with pytest.raises(occupy.Occupied):
            occupy.acquire(
                f"config:{config_id}:{user.upper}", owner="other", timeout=0, backend=alias
            )
        return "done"

    assert edit_config(7) == "done"
    assert edit_config(config_id=8, user="bo") == "done"
    assert [h is not None for h in seen] == [True, True]
    assert occupy.holder("config:7:" + str("ann".upper), backend=alias) is None


def test_the_decorator_refuses_a_template_the_function_cannot_fill(alias: str) -> None:
    with pytest.raises(ValueError, match="config_id"):

        @occupy.lock("config:{config_id}", backend=alias)
        def edit(pk: int) -> None: ...


def test_lock_many_takes_all_or_nothing(alias: str) -> None:
    blocker = occupy.acquire("k:3", owner="bob", backend=alias)
    with (
        pytest.raises(occupy.Occupied),
        occupy.lock_many(["k:2", "k:1", "k:3"], owner="alice", timeout=0, backend=alias),
    ):
        pass
    assert occupy.holder("k:1", backend=alias) is None
    assert occupy.holder("k:2", backend=alias) is None
    occupy.release(blocker)
    with occupy.lock_many(["k:2", "k:1", "k:3"], owner="alice", backend=alias) as leases:
        assert [lease.key for lease in leases] == ["k:1", "k:2", "k:3"]
    assert occupy.holder("k:1", backend=alias) is None


def test_renew_keeps_the_lease_alive(alias: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A ttl with room for a renewal (every ttl / 3) late by a loaded machine's second.
    with occupy.lock("book:1", ttl=1.5, renew=True, backend=alias) as lease:
        granted = time.monotonic()
        renewals = _count_renewals(lease, monkeypatch)
        # Renewed three times (due every ttl / 3) and past the grant's own expiry: held
        # by the renewals alone.
        wait_until(
            lambda: len(renewals) >= 3 and time.monotonic() - granted > lease.ttl,
            what="three renewals, past the grant's own ttl",
        )
        lease.ensure_held()
        assert occupy.holder("book:1", backend=alias).owner == lease.owner
    assert occupy.holder("book:1", backend=alias) is None


def _count_renewals(lease: occupy.Lease, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Return the list to which each extend of ``lease``'s backend (the watchdog's
    renewals) appends its ttl once the store has taken it."""
    backend = lease.backend
    extend = backend.extend
    renewals: list[float] = []

    def counted(lease: occupy.Lease, ttl: float) -> None:
        extend(lease, ttl)
        renewals.append(ttl)

    monkeypatch.setattr(backend, "extend", counted)
    return renewals


def test_renew_marks_the_lease_lost_when_taken_behind_its_back(alias: str) -> None:
    lease = occupy.acquire("book:1", ttl=0.6, renew=True, backend=alias)
    backend = get_backend(alias)
    backend.sweep()  # nothing expired: the lease survives a sweep
    lease.ensure_held()
    drop_claim(backend, lease.key)
    deadline = time.monotonic() + 10  # the next renewal (ttl / 3), however late
    while not lease.lost and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lease.lost
    with pytest.raises(occupy.LeaseLost):
        lease.ensure_held()
    with pytest.raises(occupy.LeaseLost):
        occupy.release(lease)


def test_async_twins(alias: str) -> None:
    async def main() -> None:
        async with occupy.lock("book:1", owner="alice", ttl=30, backend=alias) as lease:
            holder = await occupy.aholder("book:1", backend=alias)
            assert holder.owner == "alice"
            await lease.aextend(60)
            await lease.aensure_held()
            with pytest.raises(occupy.Occupied):
                await occupy.aacquire("book:1", owner="bob", timeout=0, backend=alias)
        assert await occupy.aholder("book:1", backend=alias) is None
        lease = await occupy.aacquire("book:2", backend=alias)
        await occupy.arelease(lease)

    asyncio.run(main())


def test_async_tasks_on_one_loop_exclude_each_other(alias: str) -> None:
    inside = []
    overlaps = []

    async def worker(n: int) -> None:
        for _ in range(3):
            async with occupy.lock("book:1", ttl=30, timeout=20, backend=alias):
                inside.append(n)
                if len(inside) > 1:
                    overlaps.append(list(inside))
                await asyncio.sleep(0.01)
                inside.remove(n)

    async def main() -> None:
        await asyncio.gather(*(worker(n) for n in range(4)))

    asyncio.run(main())
    assert overlaps == []


def test_cancelling_an_async_waiter_leaves_no_claim(
    alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    waiting = watch_waiters(alias, monkeypatch)

    async def main() -> None:
        lease = await occupy.aacquire("book:1", owner="alice", ttl=30, backend=alias)
        waiter = asyncio.ensure_future(
            occupy.aacquire("book:1", owner="bob", timeout=30, backend=alias)
        )
        await waiting.await_for(1)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await occupy.arelease(lease)
        # No queued claim of bob's is left to block carol's immediate acquisition.
        carol = await occupy.aacquire("book:1", owner="carol", timeout=0, backend=alias)
        await occupy.arelease(carol)

    asyncio.run(main())


def test_holder_since_is_when_the_holder_was_granted_the_key(
    alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = occupy.acquire("book:1", owner="alice", ttl=30, backend=alias)
    first = occupy.holder("book:1", backend=alias)
    assert abs((first.since - datetime.now(timezone.utc)).total_seconds()) < 5
    assert first.since < first.expires_at
    waiting = watch_waiters(alias, monkeypatch)
    got = []
    waiter = threading.Thread(
        target=lambda: got.append(
            occupy.acquire("book:1", owner="bob", ttl=30, timeout=10, backend=alias)
        )
    )
    waiter.start()
    waiting.wait_for(1)
    occupy.release(alice)
    waiter.join(10)
    second = occupy.holder("book:1", backend=alias)
    assert second.owner == "bob" and second.since > first.since  # the grant, not the queueing
    occupy.release(got[0])


@pytest.mark.parametrize(
    "forever", [1e10, 1e300, 10**400, float("inf")], ids=["1e10", "1e300", "10**400", "inf"]
)
def test_a_huge_timeout_waits_forever_and_grants_like_any_other(
    alias: str, forever: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before, Redis and the cache raised redis-py's OverflowError from the socket's
    # timeout after the script had granted the key (an orphan held until its ttl), a
    # database arming its cut-off that far ahead killed the cut-off thread, and SQLite
    # overflowed its busy wait.
    lease = occupy.acquire("book:1", owner="alice", ttl=30, timeout=forever, backend=alias)
    assert occupy.holder("book:1", backend=alias).fence == lease.fence
    occupy.release(lease)
    assert occupy.holder("book:1", backend=alias) is None
    # Held by someone else, the wait is forever: it ends when the key is released.
    other = occupy.acquire("book:1", owner="bob", ttl=30, backend=alias)
    released = release_once_waiting(alias, other, monkeypatch)
    lease = occupy.acquire("book:1", owner="alice", ttl=30, timeout=forever, backend=alias)
    released()
    assert lease.fence > other.fence
    occupy.release(lease)


@pytest.mark.parametrize("ttl", [0.001, 10 * 365 * 24 * 3600])
def test_the_shortest_and_the_longest_ttl_are_kept(alias: str, ttl: float) -> None:
    if ttl < 1 and alias == "cache-addonly":
        # A cache's add then set cannot confirm a grant that lives shorter than the
        # round trip between them: it lets it expire rather than return it late.
        with suppress(occupy.Occupied):
            occupy.acquire("book:1", owner="alice", ttl=ttl, timeout=0, backend=alias)
    else:
        lease = occupy.acquire("book:1", owner="alice", ttl=ttl, timeout=0, backend=alias)
    if ttl > 1:
        assert occupy.holder("book:1", backend=alias).fence == lease.fence
        lease.extend(ttl)
        occupy.release(lease)
    # The shortest lease expires: the key is free again at once after it.
    time.sleep(0.05)
    occupy.release(occupy.acquire("book:1", owner="bob", timeout=0, backend=alias))


# --- conditional takeover: replace the holder read, and only that one -----------------
def _taken_over(
    alias: str, key: str, owner: str, if_fence: int, ttl: float = 30
) -> tuple[occupy.Lease, occupy.Holder | None]:
    """Take ``key`` over if it is still held by the grant ``if_fence``; return the new
    lease and the holder replaced, as the store reported it (``lease_taken_over``)."""
    seen: list[occupy.Holder | None] = []

    def receiver(
        sender: type, lease: occupy.Lease, previous: occupy.Holder | None, **kwargs: object
    ) -> None:
        seen.append(previous)

    signals.lease_taken_over.connect(receiver)
    try:
        lease = occupy.takeover(key, owner=owner, ttl=ttl, if_fence=if_fence, backend=alias)
    finally:
        signals.lease_taken_over.disconnect(receiver)
    assert len(seen) == 1
    return lease, seen[0]


def test_a_conditional_takeover_replaces_the_holder_read(alias: str) -> None:
    alice = occupy.acquire("book:1", owner="alice", ttl=30, backend=alias)
    read = occupy.holder("book:1", backend=alias)
    bob, previous = _taken_over(alias, "book:1", "bob", read.fence)
    assert previous is not None
    assert (previous.owner, previous.fence) == ("alice", alice.fence) == (read.owner, read.fence)
    assert bob.fence > alice.fence and bob.depth == 1
    assert occupy.holder("book:1", backend=alias)[::2] == ("bob", bob.fence)
    with pytest.raises(occupy.LeaseLost):
        alice.extend(30)
    # A grant that was re-entered and extended is still the grant its fence names.
    again = occupy.acquire("book:1", owner="bob", ttl=30, timeout=0, backend=alias)
    assert again.depth == 2
    bob.extend(60)
    carol, previous = _taken_over(alias, "book:1", "carol", bob.fence)
    assert (previous.owner, previous.fence) == ("bob", bob.fence)
    occupy.release(carol)
    assert occupy.holder("book:1", backend=alias) is None


def _changed(alias: str, how: str) -> tuple[int, occupy.Lease | None]:
    """Read alice's grant on ``book:1``, then change the holder ``how``; return the fence
    read and the lease that holds the key now (``None`` if free)."""
    alice = occupy.acquire(
        "book:1", owner="alice", ttl=0.3 if how == "expired" else 30, backend=alias
    )
    fence = occupy.holder("book:1", backend=alias).fence
    if how == "released":
        occupy.release(alice)
        return fence, None
    if how == "expired":
        time.sleep(0.45)
        return fence, None
    if how == "granted again":
        occupy.release(alice)
        return fence, occupy.acquire("book:1", owner="alice", ttl=30, timeout=0, backend=alias)
    if how == "re-granted to another":
        occupy.release(alice)
        return fence, occupy.acquire("book:1", owner="carol", ttl=30, timeout=0, backend=alias)
    assert how == "taken over"
    return fence, occupy.takeover("book:1", owner="carol", ttl=30, backend=alias)


@pytest.mark.parametrize(
    "how", ["released", "expired", "granted again", "re-granted to another", "taken over"]
)
def test_a_conditional_takeover_is_refused_when_the_holder_changed(alias: str, how: str) -> None:
    fence, current = _changed(alias, how)
    taken: list[object] = []
    signals.lease_taken_over.connect(
        lambda **kw: taken.append(kw), weak=False, dispatch_uid="test-refused-takeover"
    )
    try:
        with pytest.raises(occupy.TakeoverRefused) as info:
            occupy.takeover("book:1", owner="bob", ttl=30, if_fence=fence, backend=alias)
    finally:
        signals.lease_taken_over.disconnect(dispatch_uid="test-refused-takeover")
    error = info.value
    assert isinstance(error, occupy.Occupied) and isinstance(error, occupy.OccupyError)
    assert error.key == "book:1" and error.if_fence == fence
    assert "book:1" in str(error) and "holder changed" in str(error)
    assert taken == []
    if current is None:
        assert error.holder is None and error.retry_after is None
        assert occupy.holder("book:1", backend=alias) is None
        after = occupy.acquire("book:1", owner="dave", ttl=30, timeout=0, backend=alias)
        assert after.fence > fence
        occupy.release(after)
        return
    # Refused, and the current holder is untouched: named, still holding, its lease
    # still extends and releases, and the next grant's fence is higher than its own.
    assert (error.holder.owner, error.holder.fence) == (current.owner, current.fence)
    assert current.fence > fence
    assert 29 <= error.retry_after <= 30
    assert current.token not in str(error) and current.token not in repr(error.holder)
    assert occupy.holder("book:1", backend=alias)[::2] == (current.owner, current.fence)
    current.extend(60)
    current.ensure_held()
    occupy.release(current)
    assert occupy.holder("book:1", backend=alias) is None
    after = occupy.acquire("book:1", owner="dave", ttl=30, timeout=0, backend=alias)
    assert after.fence > current.fence
    occupy.release(after)


def test_a_conditional_takeover_of_a_free_key_is_refused(alias: str) -> None:
    with pytest.raises(occupy.TakeoverRefused) as info:
        occupy.takeover("book:9", owner="bob", ttl=30, if_fence=1, backend=alias)
    assert info.value.holder is None and info.value.retry_after is None
    assert occupy.holder("book:9", backend=alias) is None
    occupy.release(occupy.acquire("book:9", owner="bob", timeout=0, backend=alias))


def test_a_refused_takeover_leaves_fences_rising(alias: str) -> None:
    """Refusals take no grant: the holder keeps its fence, and each later grant's fence
    is higher than every fence seen before."""
    alice = occupy.acquire("book:1", owner="alice", ttl=30, backend=alias)
    fences = [alice.fence]
    for stale in (alice.fence - 1, alice.fence + 1, 0):
        with pytest.raises(occupy.TakeoverRefused):
            occupy.takeover("book:1", owner="bob", ttl=30, if_fence=stale, backend=alias)
        assert occupy.holder("book:1", backend=alias).fence == alice.fence
    bob, _previous = _taken_over(alias, "book:1", "bob", alice.fence)
    fences.append(bob.fence)
    with pytest.raises(occupy.TakeoverRefused):
        occupy.takeover("book:1", owner="carol", ttl=30, if_fence=alice.fence, backend=alias)
    occupy.release(bob)
    carol = occupy.acquire("book:1", owner="carol", ttl=30, timeout=0, backend=alias)
    fences.append(carol.fence)
    occupy.release(carol)
    assert fences == sorted(set(fences)), fences


def test_an_async_conditional_takeover(alias: str) -> None:
    async def main() -> None:
        alice = await occupy.aacquire("book:1", owner="alice", ttl=30, backend=alias)
        read = await occupy.aholder("book:1", backend=alias)
        bob = await occupy.atakeover(
            "book:1", owner="bob", ttl=30, if_fence=read.fence, backend=alias
        )
        assert bob.fence > alice.fence
        with pytest.raises(occupy.TakeoverRefused) as info:
            await occupy.atakeover(
                "book:1", owner="carol", ttl=30, if_fence=read.fence, backend=alias
            )
        assert info.value.holder.owner == "bob"
        await occupy.arelease(bob)

    asyncio.run(main())


@pytest.mark.parametrize(
    ("fence", "error"),
    [
        ("1", TypeError),
        (1.0, TypeError),
        (True, TypeError),
        (-1, ValueError),
        (2**63, ValueError),
    ],
)
def test_if_fence_is_checked_before_anything_is_written(
    alias: str, fence: object, error: type[Exception]
) -> None:
    alice = occupy.acquire("book:1", owner="alice", ttl=30, backend=alias)
    with pytest.raises(error, match="if_fence"):
        occupy.takeover("book:1", owner="bob", if_fence=fence, backend=alias)  # type: ignore[arg-type]
    assert occupy.holder("book:1", backend=alias).fence == alice.fence
    occupy.release(alice)


@pytest.mark.parametrize(
    "ttl",
    [1e-9, 0.0009, 10 * 365 * 24 * 3600 + 1],
    ids=["1e-9", "0.0009", "ten-years-and-a-second"],
)
def test_a_ttl_no_store_can_keep_is_refused_before_anything_is_written(
    alias: str, ttl: float
) -> None:
    # Before, 1e-9 was accepted (each store rounded it its own way, Redis up to 1 ms).
    for call in (
        lambda: occupy.acquire("book:1", ttl=ttl, timeout=0, backend=alias),
        lambda: occupy.takeover("book:1", owner="bob", ttl=ttl, backend=alias),
    ):
        with pytest.raises(ValueError, match="ttl must be at"):
            call()
    assert occupy.holder("book:1", backend=alias) is None
    lease = occupy.acquire("book:1", owner="alice", ttl=30, timeout=0, backend=alias)
    with pytest.raises(ValueError, match="ttl must be at"):
        lease.extend(ttl)
    assert occupy.holder("book:1", backend=alias).expires_at == lease.expires_at
    occupy.release(lease)
