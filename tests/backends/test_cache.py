"""``CacheBackend`` beyond the contract: several processes, a killed holder, the Redis
backend's protocol on Redis caches, the caches it refuses, its system checks, and the
documented limit of caches without compare-and-set. (What the Redis protocol adds, on
the Redis caches too, is in ``test_redis.py``.)"""

from __future__ import annotations

import time

import pytest
from django.core.cache import caches
from django.core.management import call_command
from django.test import override_settings

import occupy
from occupy.backends import get_backend
from occupy.backends.cache import AddCacheBackend, CacheBackend, CacheStore
from occupy.backends.cache.store import names
from occupy.backends.claims import UNKNOWN_OWNER
from occupy.checks import check_backends
from occupy.exceptions import InvalidBackendError
from tests.support import multiproc
from tests.support.aliases import backend_params
from tests.support.exclusion import assert_exclusive, count_under_lock, taken_over_after_kill
from tests.testapp.models import Counter

#: The cache backends several processes can share here.
SHARED = backend_params(["cache", "cache-django", "cache-addonly"])

LOCMEM = "django.core.cache.backends.locmem.LocMemCache"


@pytest.mark.multiprocess
@pytest.mark.parametrize("alias", SHARED)
def test_processes_exclude_each_other(alias: str, live_db: None) -> None:
    Counter.objects.create(name="cache")
    results = multiproc.run(count_under_lock, [(alias, "cache", 5, 0.01)] * 4)
    assert_exclusive(results, "cache")


@pytest.mark.multiprocess
@pytest.mark.parametrize("alias", SHARED)
def test_a_killed_holder_frees_the_key_after_its_ttl(alias: str, live_db: None) -> None:
    assert taken_over_after_kill(alias, "cache:killed", ttl=2) <= 3


REDIS_CACHES = backend_params(["cache", "cache-django"])


@pytest.mark.parametrize("alias", REDIS_CACHES)
def test_redis_caches_run_the_redis_backends_protocol(alias: str, live_db: None) -> None:
    """One Redis lock protocol: the cache backend runs the very scripts the Redis
    backend runs (same text, so same SHA), on the cache's own client."""
    from occupy.backends.cache.redis_cache import RedisCacheBackend
    from occupy.backends.redis.attempt import RedisAttempt

    backend, redis_backend = get_backend(alias), get_backend("redis")
    assert isinstance(backend, RedisCacheBackend) and isinstance(backend, CacheBackend)
    assert isinstance(backend.attempt("book:1", "alice", 30), RedisAttempt)
    ours, theirs = backend.link.scripts, redis_backend.link.scripts
    assert ours._fields == theirs._fields
    assert [s.text for s in ours] == [s.text for s in theirs]
    assert [s.sha for s in ours] == [s.sha for s in theirs]
    assert backend.link.client is not redis_backend.link.client
    assert backend.sweep() == 0


@pytest.mark.parametrize("alias", REDIS_CACHES)
def test_redis_cache_keys_go_through_the_caches_make_key(alias: str, live_db: None) -> None:
    """``KEY_PREFIX`` and ``VERSION`` apply: the lock's keys are the cache's names."""
    backend = get_backend(alias)
    cache = caches[backend.cache_alias]
    lease = occupy.acquire("book:1", owner="alice", ttl=30, backend=alias)
    keys = backend.link.keys("book:1")
    assert keys.lock == cache.make_key(names("book:1").entry)
    assert keys.fence == cache.make_key(names("book:1").fence)
    assert keys.lock.startswith(cache.make_key("occupy:"))
    client = backend.link.client
    assert client.exists(keys.lock, keys.fence) == 2
    occupy.release(lease)
    assert client.exists(keys.lock) == 0


@pytest.mark.parametrize("alias", REDIS_CACHES)
def test_a_redis_cache_entry_the_scripts_did_not_write_is_held(alias: str, live_db: None) -> None:
    """A hash (the cache backend's layout before it ran the Redis protocol, during a
    rolling deploy) or a pickled entry under a lock's name is held by an unknown holder
    until it expires, never free."""
    backend = get_backend(alias)
    client, name = backend.link.client, backend.link.keys("book:1").lock
    client.hset(name, mapping={"token": "0" * 32, "owner": "old", "fence": 7, "depth": 1})
    client.pexpire(name, 60_000)
    with pytest.raises(occupy.Occupied) as info:
        occupy.acquire("book:1", owner="alice", ttl=30, timeout=0, backend=alias)
    assert info.value.holder.owner == UNKNOWN_OWNER
    client.delete(name)
    caches[backend.cache_alias].set(names("book:1").entry, ("t", "old", 7), 60)
    assert occupy.holder("book:1", backend=alias).owner == UNKNOWN_OWNER
    caches[backend.cache_alias].delete(names("book:1").entry)
    occupy.release(occupy.acquire("book:1", owner="alice", ttl=30, timeout=0, backend=alias))


def test_other_caches_take_the_add_path(live_db: None) -> None:
    backend = get_backend("cache-locmem")
    assert isinstance(backend, AddCacheBackend) and isinstance(backend, CacheBackend)
    assert isinstance(backend.store, CacheStore) and not backend.store.atomic


@pytest.mark.parametrize("alias", [*REDIS_CACHES, "cache-locmem"])
def test_telemetry_calls_either_class_a_cache(alias: str, live_db: None) -> None:
    """Whichever class building ``CacheBackend`` picked, its store is a ``cache``."""
    from occupy import telemetry

    assert telemetry.store_kind(get_backend(alias)) == "cache"


@pytest.mark.parametrize("alias", backend_params(["cache", "cache-django"]))
def test_list_locks_on_a_redis_cache(alias: str, live_db: None, capsys) -> None:
    lease = occupy.acquire("book:1", owner="alice", ttl=30, backend=alias)
    claims = list(get_backend(alias).claims())
    assert [(c.key, c.owner, c.state, c.fence) for c in claims] == [
        ("book:1", "alice", "using", lease.fence)
    ]
    call_command("list_locks", backend=[alias])
    out = capsys.readouterr().out
    assert "book:1" in out and "alice" in out and lease.token not in out
    occupy.release(lease)
    assert list(get_backend(alias).claims()) == []


def test_list_locks_says_why_a_plain_cache_cannot_list(live_db: None, capsys) -> None:
    with pytest.raises(NotImplementedError, match="cannot enumerate keys"):
        list(get_backend("cache-locmem").claims())
    call_command("list_locks", backend=["cache-locmem"])
    assert "cannot enumerate keys" in capsys.readouterr().err


# --- refusals and system checks ------------------------------------------------------
def _cache_setup(cache_backend: str, **options) -> dict:
    return {
        "CACHES": {
            "default": {"BACKEND": LOCMEM},
            "locks": {"BACKEND": cache_backend, "LOCATION": "/tmp/occupy-cachefile-x"},
        },
        "OCCUPY": {
            "BACKENDS": {
                "default": {"BACKEND": "occupy.backends.db.DatabaseBackend"},
                "cache": {
                    "BACKEND": "occupy.backends.cache.CacheBackend",
                    "OPTIONS": {"CACHE": "locks", **options},
                },
            }
        },
    }


def _ids() -> list[str]:
    return [m.id for m in check_backends()]


@pytest.mark.parametrize("single_process", [False, True])
def test_dummy_cache_is_refused_always(single_process: bool) -> None:
    with override_settings(
        **_cache_setup("django.core.cache.backends.dummy.DummyCache", SINGLE_PROCESS=single_process)
    ):
        assert _ids() == ["occupy.E005"]
        with pytest.raises(InvalidBackendError, match="stores nothing"):
            get_backend("cache")


def test_locmem_is_refused_unless_single_process() -> None:
    with override_settings(**_cache_setup(LOCMEM)):
        messages = check_backends()
        assert [m.id for m in messages] == ["occupy.E005"]
        assert "SINGLE_PROCESS" in messages[0].hint
        with pytest.raises(InvalidBackendError, match="SINGLE_PROCESS"):
            get_backend("cache")
    with override_settings(**_cache_setup(LOCMEM, SINGLE_PROCESS=True)):
        assert _ids() == []
        assert isinstance(get_backend("cache"), CacheBackend)


@pytest.mark.parametrize(
    "cache_backend",
    [
        "django.core.cache.backends.filebased.FileBasedCache",
        "django.core.cache.backends.db.DatabaseCache",
    ],
)
def test_file_and_database_caches_warn(cache_backend: str) -> None:
    with override_settings(**_cache_setup(cache_backend)):
        messages = check_backends()
        assert [m.id for m in messages] == ["occupy.W002"]
        assert "not atomic" in messages[0].msg or "read then a write" in messages[0].msg


@pytest.mark.parametrize(
    "cache_backend",
    [
        "django_redis.cache.RedisCache",
        "django.core.cache.backends.redis.RedisCache",
        "django.core.cache.backends.memcached.PyMemcacheCache",
    ],
)
def test_shared_caches_pass_the_checks(cache_backend: str) -> None:
    with override_settings(**_cache_setup(cache_backend)):
        assert _ids() == []


def test_a_missing_cache_alias_is_an_error() -> None:
    setup = _cache_setup(LOCMEM)
    setup["OCCUPY"]["BACKENDS"]["cache"]["OPTIONS"]["CACHE"] = "nope"
    with override_settings(**setup):
        assert _ids() == ["occupy.E004"]
        with pytest.raises(InvalidBackendError, match="'nope'"):
            get_backend("cache")


# --- the documented limit of caches without compare-and-set ----------------------------
def test_plain_caches_compare_the_token_before_deleting(live_db: None) -> None:
    """A late release or extend on the add path never touches the next holder."""
    alice = occupy.acquire("book:1", owner="alice", ttl=0.3, backend="cache-locmem")
    time.sleep(0.4)
    bob = occupy.acquire("book:1", owner="bob", ttl=30, timeout=0, backend="cache-locmem")
    with pytest.raises(occupy.LeaseLost):
        occupy.release(alice)
    assert occupy.holder("book:1", backend="cache-locmem").fence == bob.fence
    occupy.release(bob)


def test_a_release_within_the_margin_lets_the_entry_expire(
    live_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Too close to its expiry to delete safely: the entry is left to expire (the key
    stays taken for at most the margin), never deleted after it could be another's."""
    # A margin of 0.2 s (min(SAFETY_MARGIN, ttl / 4)): the release and the read after it
    # have 0.18 s to land inside it, not the 0.06 s the default 0.1 s would leave.
    monkeypatch.setattr(get_backend("cache-locmem").store, "margin", 0.2)
    lease = occupy.acquire("book:1", owner="alice", ttl=0.8, backend="cache-locmem")
    granted = time.monotonic()  # the entry expires 0.8 s after a moment before this
    time.sleep(0.8 - 0.18)  # inside the margin
    occupy.release(lease)
    assert occupy.holder("book:1", backend="cache-locmem").owner == "alice"
    time.sleep(max(0.0, granted + 0.8 + 0.02 - time.monotonic()))  # past its expiry
    assert occupy.holder("book:1", backend="cache-locmem") is None


def test_an_extend_within_the_margin_reports_the_lease_lost(live_db: None) -> None:
    lease = occupy.acquire("book:1", owner="alice", ttl=0.4, backend="cache-locmem")
    time.sleep(0.4 - 0.06)
    with pytest.raises(occupy.LeaseLost):
        lease.extend(30)


def test_a_stall_between_check_and_delete_frees_the_next_holder(
    live_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What can still go wrong without compare-and-set (memcached, locmem, file and
    database caches): a releaser that stalls after its check for longer than the lease
    has left deletes whoever took the key meanwhile. The Redis scripts cannot be
    interrupted between the two, see the next test."""
    cache = caches["locmem"]
    alice = occupy.acquire("book:1", owner="alice", ttl=0.5, backend="cache-locmem")
    taken = []
    real_delete = cache.delete

    def stalled_delete(name, *args, **kwargs):
        time.sleep(0.6)  # the lease expires while the releaser is paused
        taken.append(
            occupy.acquire("book:1", owner="bob", ttl=30, timeout=0, backend="cache-locmem")
        )
        return real_delete(name, *args, **kwargs)

    monkeypatch.setattr(cache, "delete", stalled_delete)
    occupy.release(alice)
    monkeypatch.undo()
    assert taken and taken[0].owner == "bob"
    assert occupy.holder("book:1", backend="cache-locmem") is None  # bob's entry is gone


@pytest.mark.parametrize("alias", backend_params(["cache", "cache-django"]))
def test_redis_release_is_one_atomic_compare_and_delete(alias: str, live_db: None) -> None:
    """On Redis the release script compares and deletes on the server: a release that
    arrives after the lease expired finds the next holder's token and deletes nothing."""
    alice = occupy.acquire("book:1", owner="alice", ttl=0.2, backend=alias)
    time.sleep(0.3)
    bob = occupy.acquire("book:1", owner="bob", ttl=30, timeout=0, backend=alias)
    with pytest.raises(occupy.LeaseLost):
        get_backend(alias).release(alice)
    assert occupy.holder("book:1", backend=alias).owner == "bob"
    occupy.release(bob)


def test_fences_survive_a_lost_counter(live_db: None) -> None:
    """The counter is only a cache entry: evicted, the clock floor keeps fences rising."""
    first = occupy.acquire("book:1", backend="cache-locmem")
    occupy.release(first)
    caches["locmem"].clear()
    second = occupy.acquire("book:1", backend="cache-locmem")
    occupy.release(second)
    assert second.fence > first.fence


@pytest.mark.parametrize(
    "alias", backend_params(["cache", "cache-django", "cache-addonly", "cache-locmem"])
)
def test_fences_rise_by_one_when_the_clock_is_behind_the_counter(alias: str, live_db: None) -> None:
    """A counter ahead of the clock (a clock stepped back, two grants in one µs): each
    grant is one above the last, never equal to it."""
    backend = get_backend(alias)
    ahead = (int(time.time()) + 3600) * 1_000_000
    caches[backend.cache_alias].set(names("book:1").fence, ahead, None)
    fences = []
    for _ in range(2):
        lease = occupy.acquire("book:1", ttl=30, backend=alias)
        fences.append(lease.fence)
        occupy.release(lease)
    assert fences == [ahead + 1, ahead + 2]


ADD_ONLY = backend_params(["cache-addonly", "cache-locmem"])


@pytest.mark.parametrize("alias", ADD_ONLY)
@pytest.mark.parametrize(
    ("value", "repairable"),
    [
        ("banana", True),
        (-5, True),
        (2**63 + 5, True),
        (1.5, True),
        (2**63 - 1, False),
    ],
    ids=["text", "negative", "past 2^63", "float", "at 2^63-1"],
)
def test_a_fence_counter_occupy_did_not_write_is_refused_on_the_add_path(
    alias: str, live_db: None, value: object, repairable: bool
) -> None:
    """Before: a ValueError from int() after add had granted the key (an orphan), or a
    fence past 2^63 - 1."""
    backend = get_backend(alias)
    cache, name = caches[backend.cache_alias], names("book:1").fence
    cache.set(name, value, 60)
    with pytest.raises(occupy.StoreUnavailable) as info:
        occupy.acquire("book:1", owner="alice", ttl=30, timeout=0, backend=alias)
    assert info.value.key == "book:1" and name in str(info.value)
    assert occupy.holder("book:1", backend=alias) is None  # the grant was given back
    if repairable:
        lease = occupy.takeover("book:1", owner="bob", ttl=30, backend=alias)
        assert 0 < lease.fence < 2**63 - 1
        occupy.release(lease)
    else:
        with pytest.raises(occupy.StoreUnavailable, match="delete it by hand"):
            occupy.takeover("book:1", owner="bob", ttl=30, backend=alias)
        cache.delete(name)
    occupy.release(occupy.acquire("book:1", owner="carol", ttl=30, timeout=0, backend=alias))


@pytest.mark.parametrize("alias", ADD_ONLY)
def test_add_path_fences_rise_exactly_near_2_63(alias: str, live_db: None) -> None:
    backend = get_backend(alias)
    caches[backend.cache_alias].set(names("book:1").fence, 2**63 - 3, 60)
    fences = []
    for _ in range(2):
        lease = occupy.acquire("book:1", owner="alice", ttl=30, timeout=0, backend=alias)
        fences.append(lease.fence)
        occupy.release(lease)
    assert fences == [2**63 - 2, 2**63 - 1]
    with pytest.raises(occupy.StoreUnavailable, match="largest fence"):
        occupy.acquire("book:1", owner="alice", ttl=30, timeout=0, backend=alias)
