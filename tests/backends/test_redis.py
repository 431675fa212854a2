"""What the Redis lock protocol adds to the contract: one slot per lock, refusals made
in Lua, first-come-first-served waiting with hand-over, fences floored by the server's
clock, values occupy did not write, nothing left behind, and mutual exclusion proven
with several OS processes on the real server. The tests that take the ``backend``
fixture run on every backend that runs the protocol: ``RedisBackend``, and
``CacheBackend`` on both Redis caches.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import threading
import time
from datetime import datetime, timezone
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command

import occupy
from occupy.backends import get_backend
from occupy.exceptions import InvalidBackendError
from occupy.leases import Lease
from tests.support import multiproc
from tests.support.aliases import backend_params, server_skip
from tests.support.waiting import (
    release_once_waiting,
    wait_for_waiters,
    wait_until,
    waiters,
    watch_waiters,
)

pytestmark = pytest.mark.skipif(bool(server_skip("redis")), reason=server_skip("redis") or "")

ALIAS = "redis"
#: Every backend that runs the Redis lock protocol: the Redis backend, and the cache
#: backend on django-redis and on Django's own ``RedisCache``.
PROTOCOL_BACKENDS = backend_params(["redis", "cache", "cache-django"])


@pytest.fixture(params=PROTOCOL_BACKENDS)
def backend(request: pytest.FixtureRequest, live_db: None):
    """Each backend that runs the Redis lock protocol, on clean keys."""
    return get_backend(request.param)


@pytest.fixture
def redis_backend(live_db: None):
    """The configured Redis backend, on clean keys."""
    return get_backend(ALIAS)


def _names(backend, pattern: str = "*") -> list[str]:
    """Return the backend's Redis keys that exist now, sorted."""
    link = backend.link
    return sorted(
        name.decode() for name in link.client.scan_iter(match=f"{link.prefix}{pattern}", count=1000)
    )


def _brisk(**options):
    """Return a Redis backend on the tests' cache with short waiting settings."""
    from occupy.backends.redis import RedisBackend

    return RedisBackend(
        "brisk",
        {"OPTIONS": {"CACHE": "redis", "PREFIX": f"{settings.REDIS_PREFIX}occupy:", **options}},
    )


# --- keys, options, refusals ----------------------------------------------------------
@pytest.mark.parametrize(
    "key", ["book:1", "{", "}", "a{b}c", "{}", "}{x}{", "bööк:{1}", "k" * 255, "quote\"'{tag}"]
)
def test_every_redis_key_of_a_lock_is_in_one_slot(backend, key: str) -> None:
    from redis.crc import key_slot

    names = [*backend.link.keys(key), backend.link.keys(key).wake + "0" * 32]
    slots = {key_slot(name.encode()) for name in names}
    assert len(slots) == 1, (key, names)
    assert backend.link.keys(key) != backend.link.keys(key + " ")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"CACHE": "redis", "SPEED": 1}, "unknown keys"),
        ({"CACHE": "redis", "PREFIX": "app{1}:"}, "PREFIX"),
        ({"CACHE": "redis", "POLL_INTERVAL": 0}, "POLL_INTERVAL"),
        ({"CACHE": "redis", "QUEUE_TTL": "3"}, "QUEUE_TTL"),
        ({"CACHE": "redis", "POLL_INTERVAL": 1, "QUEUE_TTL": 1}, "twice"),
        ({"CACHE": ""}, "CACHE"),
    ],
)
def test_bad_options_are_refused_naming_them(options: dict, message: str) -> None:
    from occupy.backends.redis import RedisBackend

    with pytest.raises(InvalidBackendError, match=message):
        RedisBackend("bad", {"OPTIONS": options})


@pytest.mark.parametrize(
    ("cache", "message"), [("default", "django-redis"), ("nowhere", "not in settings.CACHES")]
)
def test_a_cache_without_a_raw_redis_client_is_refused(cache: str, message: str) -> None:
    from occupy.backends.redis import RedisBackend

    with pytest.raises(InvalidBackendError, match=message):
        RedisBackend("bad", {"OPTIONS": {"CACHE": cache}}).client  # noqa: B018


def test_a_ttl_that_is_not_positive_is_refused_in_python_and_in_lua(backend) -> None:
    from redis.exceptions import ResponseError

    for ttl in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="ttl"):
            backend.acquire("book:1", owner="alice", ttl=ttl, timeout=0)
    lease = occupy.acquire("book:1", ttl=30, backend=backend.alias)
    with pytest.raises(ValueError, match="ttl"):
        backend.extend(lease, 0)
    scripts, keys = backend.link.scripts, backend.link.keys("book:2")
    held = backend.link.keys("book:1").lock
    # Lua's tonumber() reads all of these; none is a whole number of milliseconds.
    for ttl_ms in ("0", "-5", "soon", "nan", "inf", "-inf", "0.5", "1e300"):
        with pytest.raises(ResponseError, match="ttl must be positive"):
            scripts.acquire(keys.lock, "t" * 32, "bob\0book:2", ttl_ms)
        with pytest.raises(ResponseError, match="ttl must be positive"):
            scripts.queue(keys.lock, "t" * 32, "bob\0book:2", ttl_ms)
        with pytest.raises(ResponseError, match="ttl must be positive"):
            scripts.extend(held, lease.token, ttl_ms)
        with pytest.raises(ResponseError, match="ttl must be positive"):  # re-entry
            scripts.resume(held, lease.token, ttl_ms, 1)
    assert backend.link.client.exists(*keys) == 0  # nothing was written for the refused ttl
    assert occupy.holder("book:1", backend=backend.alias).expires_at == lease.expires_at
    occupy.release(lease)
    assert occupy.holder("book:1", backend=backend.alias) is None  # no level was added


# --- re-entry, claims, cleanliness -------------------------------------------------------
def test_reentry_returns_the_same_token_and_fence(backend) -> None:
    outer = occupy.acquire("book:1", owner="alice", ttl=30, backend=backend.alias)
    inner = occupy.acquire("book:1", owner="alice", ttl=5, backend=backend.alias)
    assert (inner.token, inner.fence, inner.depth) == (outer.token, outer.fence, 2)
    assert inner.expires_at == outer.expires_at  # a shorter ttl never shortens the lease
    occupy.release(inner)
    occupy.release(outer)
    with pytest.raises(occupy.LeaseLost):
        occupy.release(outer)


def test_reentry_with_a_longer_ttl_moves_the_expiry_in_redis_too(backend) -> None:
    outer = occupy.acquire("book:1", owner="alice", ttl=5, backend=backend.alias)
    inner = occupy.acquire("book:1", owner="alice", ttl=60, backend=backend.alias)
    assert inner.expires_at > outer.expires_at
    assert backend.link.client.pttl(backend.link.keys("book:1").lock) > 50_000
    assert occupy.holder("book:1", backend=backend.alias).expires_at == inner.expires_at
    occupy.release(inner)  # one level undone: the expiry stays where re-entry put it
    assert backend.link.client.pttl(backend.link.keys("book:1").lock) > 50_000
    occupy.release(outer)
    assert occupy.holder("book:1", backend=backend.alias) is None


def test_a_newcomer_does_not_overtake_a_waiter_when_the_holder_expires(live_db: None) -> None:
    """The key is free between the holder's expiry and the waiter's next look: a newcomer
    that tries then is refused, and the key goes to the waiter."""
    brisk = _brisk(POLL_INTERVAL=5, QUEUE_TTL=10)
    alice = brisk.acquire("book:1", owner="alice", ttl=30, timeout=0)
    bob = brisk.attempt("book:1", "bob", 30)
    assert bob.try_acquire() is None
    bob.enqueue()  # queued, and not looking until the test says so
    alice.extend(0.1)  # shortened only now that bob is queued, however long that took
    time.sleep(0.3)  # alice's lease has run out; the key is free but bob is in line
    with pytest.raises(occupy.Occupied) as refused:
        brisk.acquire("book:1", owner="carol", ttl=30, timeout=0)
    assert refused.value.holder.owner == "bob"  # carol's try handed the key to bob
    lease = bob.try_acquire()
    assert lease is not None and lease.owner == "bob" and lease.fence > alice.fence
    occupy.release(lease)
    assert _names(brisk) == [brisk.keys("book:1").fence]


def test_claims_show_the_holder_and_the_waiters_never_tokens(backend) -> None:
    alice = occupy.acquire("book:1", owner="alice", ttl=30, backend=backend.alias)
    got = []
    waiter = threading.Thread(
        target=lambda: got.append(
            occupy.acquire("book:1", owner="bob", ttl=30, timeout=10, backend=backend.alias)
        )
    )
    waiter.start()
    wait_for_waiters(backend, "book:1")
    claims = list(backend.claims())
    assert [(c.key, c.owner, c.state) for c in claims] == [
        ("book:1", "alice", "using"),
        ("book:1", "bob", "pending"),
    ]
    assert claims[0].fence == alice.fence and claims[1].fence is None
    assert claims[0].since <= claims[1].since
    out = StringIO()
    call_command("list_locks", backend=[backend.alias], stdout=out)
    assert "alice" in out.getvalue() and "bob" in out.getvalue()
    assert alice.token not in repr(claims) + out.getvalue()
    occupy.release(alice)
    waiter.join(10)
    assert got and got[0].owner == "bob" and got[0].fence > alice.fence
    occupy.release(got[0])


def test_waiting_leaves_nothing_behind_but_the_fence(backend) -> None:
    """Queue places, wake-up lists and claims all go; only the fence counter stays."""
    holder = occupy.acquire("book:1", owner="alice", ttl=30, backend=backend.alias)
    with pytest.raises(occupy.LockTimeout):
        occupy.acquire("book:1", owner="bob", timeout=0.3, backend=backend.alias)
    leases = []
    waiters = [
        threading.Thread(
            target=lambda n=n: leases.append(
                occupy.acquire("book:1", owner=f"w{n}", ttl=30, timeout=10, backend=backend.alias)
            )
        )
        for n in range(3)
    ]
    for thread in waiters:
        thread.start()
    wait_for_waiters(backend, "book:1", 3)
    occupy.release(holder)
    for _ in range(3):
        wait_until(lambda: leases, what="the next waiter to be served")
        occupy.release(leases.pop())
    for thread in waiters:
        thread.join(10)
    assert _names(backend) == [backend.link.keys("book:1").fence]
    assert backend.sweep() == 0


def test_cancelling_an_async_waiter_leaves_no_trace(
    backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    waiting = watch_waiters(backend.alias, monkeypatch)

    async def main() -> None:
        lease = await occupy.aacquire("book:1", owner="alice", ttl=30, backend=backend.alias)
        waiter = asyncio.ensure_future(
            occupy.aacquire("book:1", owner="bob", timeout=30, backend=backend.alias)
        )
        await waiting.await_for(1)
        assert backend.link.client.zcard(backend.link.keys("book:1").queue) == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert backend.link.client.exists(backend.link.keys("book:1").queue) == 0
        await occupy.arelease(lease)

    asyncio.run(main())
    assert _names(backend) == [backend.link.keys("book:1").fence]


def test_a_waiter_that_gives_up_after_being_handed_the_key_passes_it_on(backend) -> None:
    """Cancel removes a grant that a release handed over before the waiter saw it."""
    alice = occupy.acquire("book:1", owner="alice", ttl=30, backend=backend.alias)
    bob = backend.attempt("book:1", "bob", 30)
    assert bob.try_acquire() is None
    bob.enqueue()
    occupy.release(alice)  # hands the key to bob, who is not looking
    assert occupy.holder("book:1", backend=backend.alias).owner == "bob"
    bob.cancel()
    assert occupy.holder("book:1", backend=backend.alias) is None
    assert _names(backend) == [backend.link.keys("book:1").fence]


def test_a_key_handed_over_and_then_reentered_survives_the_waiter_giving_up(backend) -> None:
    """A waiter is handed the key; before it looks, the key is re-entered by its token.
    The waiter giving up takes back its own level only."""
    alice = occupy.acquire("book:1", owner="alice", ttl=30, backend=backend.alias)
    waiter = backend.attempt("book:1", "xavier", 30)
    assert waiter.try_acquire() is None and waiter.enqueue() is None
    occupy.release(alice)  # hands the key to the waiter, who is not looking
    with pytest.raises(occupy.Occupied):  # the owner string alone never re-enters
        occupy.acquire("book:1", owner="xavier", ttl=30, timeout=0, backend=backend.alias)
    again = backend.resume("book:1", waiter.token, 30)
    assert again.depth == 2
    waiter.cancel()
    with pytest.raises(occupy.Occupied):
        occupy.acquire("book:1", owner="carol", ttl=30, timeout=0, backend=backend.alias)
    assert occupy.holder("book:1", backend=backend.alias).owner == "xavier"
    occupy.release(again)
    assert occupy.holder("book:1", backend=backend.alias) is None


def test_joining_the_queue_can_grant_the_key_which_acquire_returns(backend) -> None:
    """The key comes free between a refused try and the queueing: queueing takes it,
    and that lease is the caller's. Another attempt of the same owner that got there
    first makes the late one queue behind it (owners do not re-enter)."""
    alice = occupy.acquire("book:1", owner="alice", ttl=30, backend=backend.alias)
    late = backend.attempt("book:1", "xavier", 30)
    assert late.try_acquire() is None
    occupy.release(alice)
    granted = late.enqueue()
    assert granted is not None and (granted.token, granted.depth) == (late.token, 1)
    occupy.release(granted)
    early = occupy.acquire("book:1", owner="xavier", ttl=30, timeout=0, backend=backend.alias)
    later = backend.attempt("book:1", "xavier", 30)
    assert later.try_acquire() is None and later.enqueue() is None
    later.cancel()
    occupy.release(early)
    assert occupy.holder("book:1", backend=backend.alias) is None


def test_a_dead_waiter_blocks_the_queue_only_until_its_place_expires(live_db: None) -> None:
    brisk = _brisk(POLL_INTERVAL=0.1, QUEUE_TTL=0.5)
    alice = brisk.acquire("book:1", owner="alice", ttl=30, timeout=0)
    dead = brisk.attempt("book:1", "dead", 30)
    assert dead.try_acquire() is None
    dead.enqueue()  # and never looks again, as if killed
    got = []
    carol = threading.Thread(
        target=lambda: got.append(brisk.acquire("book:1", owner="carol", ttl=30, timeout=5))
    )
    carol.start()
    wait_until(lambda: "carol" in waiters(brisk, "book:1"), what="carol to queue")
    time.sleep(0.6)  # the dead waiter's place expires; carol's is kept alive by her polls
    occupy.release(alice)
    carol.join(5)
    assert got and got[0].owner == "carol"
    occupy.release(got[0])
    assert not _names(brisk, "*wake*")


def test_expiry_of_the_holder_wakes_the_waiter_without_a_release(live_db: None) -> None:
    brisk = _brisk(POLL_INTERVAL=5, QUEUE_TTL=10)  # a poll would come far too late
    alice = brisk.acquire("book:1", owner="alice", ttl=0.4, timeout=0)
    started = time.monotonic()
    bob = brisk.acquire("book:1", owner="bob", ttl=30, timeout=5)
    assert 0.3 < time.monotonic() - started < 1.2
    assert bob.fence > alice.fence
    occupy.release(bob)


def test_fences_rise_when_the_counter_was_set_back(backend) -> None:
    """A restore of an older snapshot, or a failover to a replica that lagged, sets the
    counter back; the next fence is still above every fence handed out before."""
    first = occupy.acquire("book:1", backend=backend.alias)
    occupy.release(first)
    backend.link.client.set(backend.link.keys("book:1").fence, 5)
    again = occupy.acquire("book:1", backend=backend.alias)
    assert again.fence > first.fence
    occupy.release(again)


def test_fences_never_fall_below_the_counter_when_the_clock_is_behind(backend) -> None:
    """A counter ahead of the server's clock (a clock stepped back) still rises by one."""
    ahead = (int(time.time()) + 3600) * 1_000_000
    backend.link.client.set(backend.link.keys("book:1").fence, ahead)
    lease = occupy.acquire("book:1", backend=backend.alias)
    assert lease.fence == ahead + 1
    occupy.release(lease)
    assert occupy.acquire("book:1", backend=backend.alias).fence == ahead + 2


@pytest.mark.parametrize(
    "start",
    [2**53 - 2, 2**62, 2**63 - 10, 10**18 + 999],
    ids=["2^53-2", "2^62", "2^63-10", "1e18+999"],
)
def test_fences_are_exact_integers_up_to_2_63(backend, start: int) -> None:
    """Before, the scripts counted in Lua doubles: a counter at 2^62 gave three grants
    the same fence, one past 2^63 a negative one."""
    backend.link.client.set(backend.link.keys("book:1").fence, start)
    fences = []
    for n in range(3):
        lease = occupy.acquire("book:1", owner=f"w{n}", backend=backend.alias)
        assert occupy.holder("book:1", backend=backend.alias).fence == lease.fence
        fences.append(lease.fence)
        occupy.release(lease)
    taken = occupy.takeover("book:1", owner="t", ttl=30, backend=backend.alias)
    fences.append(taken.fence)
    occupy.release(taken)
    assert fences == [start + 1, start + 2, start + 3, start + 4]


def test_a_waiter_handed_the_key_gets_an_exact_fence(
    backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend.link.client.set(backend.link.keys("book:1").fence, 2**62)
    first = occupy.acquire("book:1", owner="alice", ttl=30, backend=backend.alias)
    released = release_once_waiting(backend.alias, first, monkeypatch)
    second = occupy.acquire("book:1", owner="bob", ttl=30, timeout=10, backend=backend.alias)
    released()
    assert (first.fence, second.fence) == (2**62 + 1, 2**62 + 2)
    occupy.release(second)


#: Fence counters occupy did not write, and whether a takeover rewrites them.
BAD_FENCES = {
    "text": (lambda client, name: client.set(name, "banana"), True),
    "negative": (lambda client, name: client.set(name, "-5"), True),
    "leading zeros": (lambda client, name: client.set(name, "0012"), True),
    "past 2^63": (lambda client, name: client.set(name, str(2**63 + 5)), True),
    "hash": (lambda client, name: client.hset(name, "fence", "7"), True),
    "at 2^63-1": (lambda client, name: client.set(name, str(2**63 - 1)), False),
}


@pytest.mark.parametrize(("plant", "repairable"), BAD_FENCES.values(), ids=BAD_FENCES.keys())
def test_a_fence_counter_occupy_did_not_write_is_refused_by_name(
    backend, plant, repairable: bool
) -> None:
    """Before: "attempt to compare nil with number" from the script on every acquire,
    WRONGTYPE on every call (takeover included), or a negative fence."""
    name = backend.link.keys("book:1").fence
    plant(backend.link.client, name)
    for timeout in (0, 0.2):  # the first try, and the queueing script
        with pytest.raises(occupy.StoreUnavailable) as info:
            occupy.acquire("book:1", owner="alice", ttl=30, timeout=timeout, backend=backend.alias)
        message = str(info.value)
        assert name in message and info.value.key == "book:1"
        assert ("takeover" in message) == repairable and "Lua" not in message
    assert occupy.holder("book:1", backend=backend.alias) is None
    if not repairable:
        with pytest.raises(occupy.StoreUnavailable, match="delete it by hand"):
            occupy.takeover("book:1", owner="bob", ttl=30, backend=backend.alias)
        backend.link.client.delete(name)
    else:
        lease = occupy.takeover("book:1", owner="bob", ttl=30, backend=backend.alias)
        assert lease.fence > 0
        occupy.release(lease)
    again = occupy.acquire("book:1", owner="carol", ttl=30, timeout=0, backend=backend.alias)
    assert again.fence > 0
    occupy.release(again)


#: Queue keys occupy did not write: the Redis key's suffix and how to plant it.
BAD_QUEUES = {
    "queue string": ("queue", lambda client, name: client.set(name, "junk")),
    "queue hash": ("queue", lambda client, name: client.hset(name, "a", "b")),
    "waiters string": ("waiters", lambda client, name: client.set(name, "junk")),
    "waiters set": ("waiters", lambda client, name: client.sadd(name, "x")),
}


@pytest.mark.parametrize(("suffix", "plant"), BAD_QUEUES.values(), ids=BAD_QUEUES.keys())
def test_a_queue_occupy_did_not_write_is_refused_by_name_and_repaired_by_takeover(
    backend, suffix: str, plant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, WRONGTYPE from the script on every try that met the queue, and a takeover
    left the queue as it was, so its own release failed too: the key was blocked for
    good."""
    keys = backend.link.keys("book:1")
    name = getattr(keys, suffix)
    plant(backend.link.client, name)
    holder = None
    if suffix == "waiters":  # only a waiter reads it: somebody must hold the key
        holder = occupy.acquire("book:1", owner="alice", ttl=30, backend=backend.alias)
    for timeout in (0, 0.2):  # the first try, and the queueing script
        if holder is not None and timeout == 0:
            continue  # refused as Occupied, before any queue is read
        with pytest.raises(occupy.StoreUnavailable) as info:
            occupy.acquire("book:1", owner="bob", ttl=30, timeout=timeout, backend=backend.alias)
        message = str(info.value)
        assert name in message and "takeover" in message and "delete it by hand" in message
        assert "WRONGTYPE" not in message and info.value.key == "book:1"
    if holder is not None:
        occupy.release(holder)  # a release hands nothing over, and succeeds
    assert occupy.holder("book:1", backend=backend.alias) is None
    lease = occupy.takeover("book:1", owner="carol", ttl=30, backend=backend.alias)
    assert backend.link.client.type(name) in (b"none", "none")
    # Repaired: the queue works again, a waiter included.
    released = release_once_waiting(backend.alias, lease, monkeypatch)
    waited = occupy.acquire("book:1", owner="dave", ttl=30, timeout=10, backend=backend.alias)
    released()
    assert waited.fence > lease.fence
    occupy.release(waited)
    assert occupy.holder("book:1", backend=backend.alias) is None


def test_a_release_does_not_hand_over_while_the_counter_is_refused(backend) -> None:
    holder = occupy.acquire("book:1", owner="alice", ttl=30, backend=backend.alias)
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            occupy.acquire("book:1", owner="bob", ttl=30, timeout=5, backend=backend.alias)
        except occupy.OccupyError as e:
            errors.append(e)

    thread = threading.Thread(target=wait)
    thread.start()
    wait_for_waiters(backend, "book:1", 1)
    backend.link.client.set(backend.link.keys("book:1").fence, "banana")
    occupy.release(holder)  # the release itself succeeds
    thread.join(10)
    assert len(errors) == 1 and isinstance(errors[0], occupy.StoreUnavailable)
    assert occupy.holder("book:1", backend=backend.alias) is None


# --- values occupy did not write ---------------------------------------------------------
#: Under a lock's Redis key: text of another layout, bytes that are not UTF-8 (also in
#: our layout), and a hash.
FOREIGN = {
    "old layout": lambda client, name: client.set(name, "v1:owner:123", px=60_000),
    "binary": lambda client, name: client.set(name, b"\xff\xfe\x00garbage", px=60_000),
    "almost ours": lambda client, name: client.set(name, b"t -1 5 9 8 \xff\x00k", px=60_000),
    "hash": lambda client, name: (client.hset(name, "owner", "x"), client.pexpire(name, 60_000)),
}


@pytest.mark.parametrize("plant", FOREIGN.values(), ids=FOREIGN.keys())
def test_a_foreign_value_is_held_by_an_unknown_holder(backend, plant) -> None:
    from occupy.backends.claims import UNKNOWN_OWNER

    name = backend.link.keys("book:1").lock
    plant(backend.link.client, name)
    holder = occupy.holder("book:1", backend=backend.alias)
    assert holder.owner == UNKNOWN_OWNER and holder.fence == 0
    assert 55 < (holder.expires_at - datetime.now(timezone.utc)).total_seconds() <= 60
    with pytest.raises(occupy.Occupied) as info:
        occupy.acquire("book:1", owner="alice", ttl=30, timeout=0, backend=backend.alias)
    assert info.value.holder.owner == UNKNOWN_OWNER
    with pytest.raises(occupy.LockTimeout):  # the queueing script refuses it too
        occupy.acquire("book:1", owner="alice", ttl=30, timeout=0.1, backend=backend.alias)
    stale = Lease(
        key="book:1",
        owner="alice",
        token="0" * 32,
        fence=1,
        expires_at=holder.expires_at,
        ttl=30,
        alias=backend.alias,
        backend=backend,
    )
    for call in (lambda: backend.extend(stale, 30), lambda: backend.release(stale)):
        stale.lost = False
        with pytest.raises(occupy.LeaseLost):
            call()
    assert not backend.is_held(stale)
    claims = [c for c in backend.claims() if c.owner == UNKNOWN_OWNER]
    assert [(c.key, c.state, c.since, c.fence) for c in claims] == [(name, "using", None, None)]
    out = StringIO()
    call_command("list_locks", backend=[backend.alias], stdout=out)
    assert UNKNOWN_OWNER in out.getvalue() and name in out.getvalue()
    backend.link.client.delete(name)
    occupy.release(occupy.acquire("book:1", timeout=0, backend=backend.alias))


def test_a_foreign_value_without_expiry_is_held_for_ever(backend) -> None:
    backend.link.client.set(backend.link.keys("book:1").lock, "not ours")
    assert occupy.holder("book:1", backend=backend.alias).expires_at.year == 9999
    with pytest.raises(occupy.Occupied):
        occupy.acquire("book:1", timeout=0, backend=backend.alias)


def test_a_foreign_value_frees_the_key_when_redis_expires_it(backend) -> None:
    backend.link.client.set(backend.link.keys("book:1").lock, "not ours", px=300)
    started = time.monotonic()
    lease = occupy.acquire("book:1", owner="alice", ttl=30, timeout=5, backend=backend.alias)
    assert 0.2 < time.monotonic() - started < 2
    assert occupy.holder("book:1", backend=backend.alias).owner == "alice"
    occupy.release(lease)


# --- several OS processes ---------------------------------------------------------------
def _counter_store(kind: str):
    """Return ``(read, write)`` of the shared counter in the Redis or the default DB."""
    if kind == "redis":
        from django_redis import get_redis_connection

        client = get_redis_connection("redis")
        name = f"{settings.REDIS_PREFIX}counter"
        return (lambda: int(client.get(name) or 0)), (lambda v: client.set(name, v))
    from tests.testapp.models import Counter

    return (
        (lambda: Counter.objects.get(name="c").value),
        (lambda v: Counter.objects.filter(name="c").update(value=v)),
    )


def _count(alias: str, kind: str, sections: int, hold: float) -> list:
    """Increment the counter ``sections`` times, slowly, under the lock; return the
    (enter, exit, fence) of each section."""
    read, write = _counter_store(kind)
    spans = []
    for _ in range(sections):
        with occupy.lock("counter", ttl=30, timeout=60, backend=alias) as lease:
            enter = time.monotonic()
            value = read()
            time.sleep(hold)  # widen the window a lost update needs
            write(value + 1)
            spans.append((enter, time.monotonic(), lease.fence))
    return spans


@pytest.mark.multiprocess
@pytest.mark.parametrize("kind", ["redis", "db"])
def test_processes_exclude_each_other(redis_backend, kind: str) -> None:
    from tests.testapp.models import Counter

    Counter.objects.create(name="c")
    procs, sections = 4, 12
    spans = sorted(
        s for out in multiproc.run(_count, [(ALIAS, kind, sections, 0.003)] * procs) for s in out
    )
    read, _write = _counter_store(kind)
    assert read() == procs * sections  # no increment lost
    for (_e1, exit1, fence1), (enter2, _x2, fence2) in itertools.pairwise(spans):
        assert enter2 >= exit1, "two holders overlapped"
        assert fence2 > fence1, "fences did not rise in grant order"


def _hold_and_hang(alias: str, ttl: float, granted) -> None:
    lease = occupy.acquire("victim", owner="doomed", ttl=ttl, timeout=5, backend=alias)
    granted.put((time.monotonic(), lease.fence))
    time.sleep(60)  # killed long before this


@pytest.mark.multiprocess
def test_a_killed_holder_frees_the_key_within_its_ttl(redis_backend) -> None:
    ttl = 1.5
    granted = multiproc._ctx.Queue()
    workers = multiproc.start(_hold_and_hang, [(ALIAS, ttl, granted)])
    try:
        granted_at, fence = granted.get(timeout=60)
        os.kill(workers.procs[0].pid, signal.SIGKILL)
        lease = occupy.acquire("victim", owner="next", ttl=30, timeout=ttl + 1, backend=ALIAS)
        waited = time.monotonic() - granted_at
        assert waited <= ttl + 1
        assert waited >= ttl - 0.1  # it was held, by a dead process, until it expired
        assert lease.fence > fence
        occupy.release(lease)
    finally:
        for proc in workers.procs:
            proc.kill()
            proc.join(10)


def _busy(alias: str, looping, done, hold: float) -> list:
    """Re-take the key in a tight loop until the patient process is done (≤ 20 s); set
    ``looping`` once inside the first section."""
    starts = []
    deadline = time.monotonic() + 20
    while not done.is_set() and time.monotonic() < deadline:
        with occupy.lock("busy", owner="busy", ttl=30, timeout=30, backend=alias):
            starts.append(time.monotonic())
            looping.set()
            time.sleep(hold)
    return starts


def _patient(alias: str, looping, done, rounds: int) -> list:
    """Ask for the key ``rounds`` times while the busy process loops; return (asked, got)."""
    waits = []
    try:
        # Connect and load the scripts first: only the wait itself is measured.
        occupy.release(occupy.acquire("warm-up", owner="patient", backend=alias))
        assert looping.wait(30), "the busy process never took the key"
        for _ in range(rounds):
            asked = time.monotonic()
            with occupy.lock("busy", owner="patient", ttl=30, timeout=10, backend=alias):
                waits.append((asked, time.monotonic()))
            time.sleep(0.02)
    finally:
        done.set()
    return waits


@pytest.mark.multiprocess
def test_a_waiter_is_served_before_a_process_that_retakes_the_key_in_a_loop(backend) -> None:
    done = multiproc._ctx.Event()
    starts, waits = _run_pair(backend.alias, done)
    assert len(waits) == 10
    for asked, got in waits:
        overtaking = [s for s in starts if asked < s < got]
        # At most the section that began as it asked, and one begun before it queued.
        assert len(overtaking) <= 2, (len(overtaking), got - asked)
    assert len(starts) > 20  # the busy process really was looping


def _run_pair(alias: str, done) -> tuple[list, list]:
    looping = multiproc._ctx.Event()
    busy = multiproc.start(_busy, [(alias, looping, done, 0.002)])
    patient = multiproc.start(_patient, [(alias, looping, done, 10)])
    waits = multiproc.collect(patient, timeout=60)[0]
    starts = multiproc.collect(busy, timeout=60)[0]
    return starts, waits


def test_a_redis_failure_is_an_occupy_error_naming_the_key(live_db: None) -> None:
    import socket

    import redis

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nobody listens here once the socket is closed
    brisk = _brisk()
    brisk.bind(redis.Redis(port=port, socket_connect_timeout=0.2, retry_on_error=[], retry=None))
    with pytest.raises(occupy.OccupyError, match="book:1") as info:
        brisk.acquire("book:1", owner="alice", ttl=30, timeout=0)
    assert info.value.key == "book:1"
    assert isinstance(info.value.__cause__, redis.ConnectionError)
    with pytest.raises(occupy.OccupyError, match="book:1"):
        brisk.holder("book:1")
