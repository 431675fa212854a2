"""Takeover, a lease rebuilt from its token, and an acquire that presents its token:
bound to every backend."""

from __future__ import annotations

import threading
import time

import pytest

import occupy
from occupy import signals
from tests.support import multiproc
from tests.support.aliases import RACE_BACKENDS, backend_params
from tests.support.takeover_race import OWNER_B, race_worker
from tests.support.waiting import watch_waiters


def test_takeover_replaces_the_holder_with_a_higher_fence(alias: str) -> None:
    seen = []

    def receiver(
        sender: type, lease: occupy.Lease, previous: occupy.Holder | None, **kwargs: object
    ) -> None:
        seen.append((lease.owner, previous))

    alice = occupy.acquire("book:1", owner="alice", ttl=30, backend=alias)
    signals.lease_taken_over.connect(receiver)
    try:
        bob = occupy.takeover("book:1", owner="bob", ttl=30, backend=alias)
    finally:
        signals.lease_taken_over.disconnect(receiver)
    assert bob.fence > alice.fence and bob.token != alice.token and bob.depth == 1
    holder = occupy.holder("book:1", backend=alias)
    assert (holder.owner, holder.fence) == ("bob", bob.fence)
    assert [(owner, previous.owner, previous.fence) for owner, previous in seen] == [
        ("bob", "alice", alice.fence)
    ]
    with pytest.raises(occupy.LeaseLost):
        alice.extend(30)
    with pytest.raises(occupy.LeaseLost):
        occupy.release(alice)
    assert occupy.holder("book:1", backend=alias).owner == "bob"  # alice touched nothing
    occupy.release(bob)
    assert occupy.holder("book:1", backend=alias) is None


def test_takeover_of_a_free_key_is_a_grant(alias: str) -> None:
    first = occupy.acquire("book:1", owner="alice", backend=alias)
    occupy.release(first)
    lease = occupy.takeover("book:1", owner="bob", ttl=30, backend=alias)
    assert lease.fence > first.fence
    assert occupy.holder("book:1", backend=alias).owner == "bob"
    occupy.release(lease)
    assert occupy.holder("book:1", backend=alias) is None


def test_a_waiter_keeps_waiting_through_a_takeover(
    alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = occupy.acquire("book:1", owner="alice", ttl=30, backend=alias)
    waiting = watch_waiters(alias, monkeypatch)
    got = []
    waiter = threading.Thread(
        target=lambda: got.append(
            occupy.acquire("book:1", owner="carol", ttl=30, timeout=10, backend=alias)
        )
    )
    waiter.start()
    waiting.wait_for(1)
    bob = occupy.takeover("book:1", owner="bob", ttl=30, backend=alias)
    time.sleep(0.3)  # a waiter that the takeover let in would hold the key by now
    assert not got and occupy.holder("book:1", backend=alias).owner == "bob"
    occupy.release(bob)
    waiter.join(10)
    assert got and got[0].owner == "carol" and got[0].fence > bob.fence > alice.fence
    occupy.release(got[0])


def test_an_acquire_that_presents_its_token_adds_no_level(alias: str) -> None:
    lease = occupy.acquire("book:1", owner="user:7", ttl=5, backend=alias)
    again = occupy.acquire(
        "book:1", owner="user:7", ttl=60, timeout=0, token=lease.token, backend=alias
    )
    assert (again.token, again.fence, again.depth) == (lease.token, lease.fence, 1)
    assert (again.expires_at - lease.expires_at).total_seconds() > 50
    occupy.release(again)  # one release frees it: the retry leaked no level
    assert occupy.holder("book:1", backend=alias) is None
    fresh = occupy.acquire(
        "book:1", owner="user:7", timeout=0, token=lease.token, backend=alias
    )  # a stale token: the key is taken afresh
    assert fresh.token != lease.token and fresh.fence > lease.fence
    occupy.release(fresh)


def test_a_lease_rebuilt_from_its_token(alias: str) -> None:
    lease = occupy.acquire("book:1", owner="alice", ttl=30, backend=alias)
    rebuilt = occupy.resume("book:1", lease.token, backend=alias)
    assert (rebuilt.key, rebuilt.owner, rebuilt.token, rebuilt.fence, rebuilt.depth) == (
        "book:1",
        "alice",
        lease.token,
        lease.fence,
        1,
    )
    with pytest.raises(occupy.LeaseLost):
        occupy.resume("book:1", "f" * 32, backend=alias)  # a forged token gets nothing
    with pytest.raises(ValueError, match="token"):
        occupy.resume("book:1", "not a token", backend=alias)
    with pytest.raises(TypeError, match="token"):
        occupy.resume("book:1", None, backend=alias)
    assert occupy.holder("book:1", backend=alias).fence == lease.fence
    occupy.release(rebuilt)
    assert occupy.holder("book:1", backend=alias) is None
    with pytest.raises(occupy.LeaseLost):
        occupy.resume("book:1", lease.token, backend=alias)


def test_async_takeover_and_resume(alias: str) -> None:
    import asyncio

    async def main() -> None:
        alice = await occupy.aacquire("book:1", owner="alice", ttl=30, backend=alias)
        bob = await occupy.atakeover("book:1", owner="bob", ttl=30, backend=alias)
        assert bob.fence > alice.fence
        rebuilt = await occupy.aresume("book:1", bob.token, backend=alias)
        assert rebuilt.owner == "bob"
        await occupy.arelease(rebuilt)
        assert await occupy.aholder("book:1", backend=alias) is None

    asyncio.run(main())


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.parametrize("alias", backend_params(RACE_BACKENDS))
def test_a_conditional_takeover_never_replaces_a_grant_it_did_not_read(
    alias: str, live_db: None
) -> None:
    """User A takes and renews a key in one process; two processes of user B read the
    holder and take the key over only when the holder read is B's own (``if_fence``),
    releasing at once, so that the holder often changes between the read and the
    takeover. Every takeover must have replaced a grant of B's, never one of A's."""
    key = "race:takeover"
    results = multiproc.run(
        race_worker, [("a", alias, key, 3.0), ("b", alias, key, 3.0), ("b", alias, key, 3.0)]
    )
    a, *bs = results
    replaced = [holder for b in bs for holder in b["replaced"]]
    refused = [b["refused"] for b in bs]
    summary = f"A: {len(a['granted'])} grants; B replaced {len(replaced)}, refused {refused}"
    assert a["granted"] and replaced, summary
    assert {owner for owner, _fence in replaced} == {OWNER_B}, summary
    assert not set(a["granted"]) & {fence for _owner, fence in replaced}, summary
    assert a["lost"] == [], summary  # no grant of A's was taken from it
    # The race was run: the holder changed under B's read at least once.
    assert sum(sum(r.values()) for r in refused) > 0, summary
