"""Re-entry needs proof of holding (the context that holds the lease, or its token), and a
release that failed leaves nothing held in-process: bound to every backend."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

import pytest

import occupy
from occupy.backends import get_backend
from tests.support import multiproc
from tests.support.aliases import RACE_BACKENDS, SHARED_BACKENDS, backend_params
from tests.support.exclusion import assert_exclusive, count_with_failed_release, try_acquire
from tests.support.waiting import wait_until
from tests.testapp.models import Counter


def test_the_holding_thread_reenters_by_token(alias: str) -> None:
    outer = occupy.acquire("book:1", owner="alice", ttl=30, backend=alias)
    inner = occupy.acquire("book:1", owner="alice", ttl=30, timeout=0, backend=alias)
    assert (inner.token, inner.fence, inner.depth) == (outer.token, outer.fence, 2)
    occupy.release(inner)
    occupy.release(outer)
    assert occupy.holder("book:1", backend=alias) is None


def test_the_same_owner_in_another_thread_competes(alias: str) -> None:
    lease = occupy.acquire("book:1", owner="alice", ttl=30, backend=alias)
    outcome = []

    def other() -> None:
        try:
            outcome.append(occupy.acquire("book:1", owner="alice", timeout=0, backend=alias))
        except occupy.Occupied as e:
            outcome.append(e)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(30)
    assert isinstance(outcome[0], occupy.Occupied), outcome
    assert outcome[0].holder.owner == "alice"
    occupy.release(lease)  # one level was all there was
    assert occupy.holder("book:1", backend=alias) is None


def test_the_same_owner_in_another_task_competes(alias: str) -> None:
    async def main() -> None:
        async with occupy.lock("book:1", owner="alice", ttl=30, backend=alias) as outer:
            inner = await occupy.aacquire("book:1", owner="alice", timeout=0, backend=alias)
            assert (inner.token, inner.depth) == (outer.token, 2)
            await occupy.arelease(inner)

            async def other() -> None:
                await occupy.aacquire("book:1", owner="alice", timeout=0, backend=alias)

            with pytest.raises(occupy.Occupied):
                await asyncio.create_task(other())
        assert await occupy.aholder("book:1", backend=alias) is None

    asyncio.run(main())


@pytest.mark.multiprocess
@pytest.mark.parametrize("alias", backend_params(SHARED_BACKENDS))
def test_the_same_owner_in_another_process_competes(alias: str, live_db: None) -> None:
    lease = occupy.acquire("k", owner="alice", ttl=30, backend=alias)
    assert multiproc.run(try_acquire, [(alias, "k", "alice")]) == ["occupied"]
    occupy.release(lease)
    assert occupy.holder("k", backend=alias) is None


def test_resume_checks_the_token_and_never_shortens(alias: str) -> None:
    backend = get_backend(alias)
    lease = occupy.acquire("book:1", owner="alice", ttl=30, backend=alias)
    assert backend.resume("book:1", "0" * 32, 60) is None  # a forged token gets nothing
    assert backend.resume("book:2", lease.token, 60) is None  # nor does another key
    same = backend.resume("book:1", lease.token, 1, deeper=False)
    assert (same.owner, same.token, same.fence, same.depth) == (
        "alice",
        lease.token,
        lease.fence,
        1,
    )
    assert same.expires_at == lease.expires_at  # 1 s would shorten it: kept
    longer = backend.resume("book:1", lease.token, 120, deeper=False)
    assert longer.expires_at - lease.expires_at > timedelta(seconds=60)
    deeper = backend.resume("book:1", lease.token, 30)
    assert deeper.depth == 2
    occupy.release(deeper)
    occupy.release(lease)
    assert occupy.holder("book:1", backend=alias) is None


def _fail_next_release(monkeypatch: pytest.MonkeyPatch, backend: object) -> None:
    """Make the backend's next release fail as a store that went away would."""
    real = backend.release

    def failing(lease: occupy.Lease) -> None:
        monkeypatch.setattr(backend, "release", real)
        raise occupy.OccupyError("the store went away", key=lease.key)

    monkeypatch.setattr(backend, "release", failing)


def test_a_failed_release_leaves_nothing_held_in_process(
    alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = get_backend(alias)
    _fail_next_release(monkeypatch, backend)
    with (
        pytest.raises(occupy.OccupyError, match="went away"),
        occupy.lock("book:1", owner="worker", ttl=0.5, timeout=0, backend=alias) as orphan,
    ):
        pass
    # The orphaned claim is not this thread's any more: no re-entry, no shared token.
    with pytest.raises(occupy.Occupied):
        occupy.acquire("book:1", owner="worker", timeout=0, backend=alias)
    started = time.monotonic()
    lease = occupy.acquire("book:1", owner="worker", ttl=30, timeout=10, backend=alias)
    assert time.monotonic() - started < 5  # the orphan expired by its ttl
    assert lease.token != orphan.token and lease.fence > orphan.fence
    assert lease.depth == 1
    occupy.release(lease)
    assert occupy.holder("book:1", backend=alias) is None


def test_a_lost_lease_is_not_reentered(alias: str) -> None:
    lease = occupy.acquire("book:1", owner="alice", ttl=0.3, backend=alias)
    wait_until(lambda: occupy.holder("book:1", backend=alias) is None, what="the lease to expire")
    fresh = occupy.acquire("book:1", owner="alice", ttl=30, timeout=0, backend=alias)
    assert fresh.token != lease.token and fresh.fence > lease.fence and fresh.depth == 1
    with pytest.raises(occupy.LeaseLost):
        occupy.release(lease)
    occupy.release(fresh)  # the lost lease's release did not touch the new one's level
    assert occupy.holder("book:1", backend=alias) is None


@pytest.mark.multiprocess
@pytest.mark.slow  # seconds of turns per backend: make test-slow, which CI runs
@pytest.mark.parametrize("alias", backend_params(RACE_BACKENDS))
def test_a_worker_whose_release_failed_does_not_starve_the_others(
    alias: str, live_db: None
) -> None:
    """Four workers loop over one key; the first one's first release fails. Its claim
    expires by its ttl, and then every worker gets the key again, in turn (each stops
    after five turns; a starved one goes on for 6 s)."""
    Counter.objects.create(name="stock", value=0)
    results = multiproc.run(
        count_with_failed_release,
        [(alias, "stock", 6.0, index == 0, 5) for index in range(4)],
    )
    sections = [spans for spans, _failed in results]
    assert [failed for _spans, failed in results] == [True, False, False, False]
    # After the orphan expired (ttl 1 s), each of the others still got the key several
    # times: before the fix the failing worker re-entered its orphan for ever.
    assert all(len(spans) >= 3 for spans in sections[1:]), [len(s) for s in sections]
    assert_exclusive(sections, "stock")


def test_a_lease_handed_to_a_client_is_not_held_by_the_thread(alias: str) -> None:
    """``reentrant=False`` (an HTTP lease whose token the client keeps): the server
    thread that took it neither re-enters it for the next request nor is it held."""
    lease = occupy.acquire("book:1", owner="user:7", ttl=30, reentrant=False, backend=alias)
    with pytest.raises(occupy.Occupied):
        occupy.acquire("book:1", owner="user:7", timeout=0, backend=alias)
    occupy.release(lease)
    assert occupy.holder("book:1", backend=alias) is None
