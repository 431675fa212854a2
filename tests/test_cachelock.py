"""``CacheLock``: a lock on a cache named by its alias, with no ``OCCUPY`` settings, on
django-redis, Django's ``RedisCache`` and (one process) ``LocMemCache``."""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

import occupy
from occupy import CacheLock, InvalidBackendError, LeaseLost, LockTimeout
from occupy.backends import get_backend
from occupy.backends.cache import CacheBackend
from occupy.cachelock import cache_backend
from tests.support import multiproc
from tests.support.waiting import watch_waiters

_NO_REDIS = pytest.mark.skipif("redis" in settings.SKIPS, reason=settings.SKIPS.get("redis", ""))
#: The caches of tests/settings.py it runs on: django-redis, Django's own Redis cache,
#: and locmem (one process: single_process=True).
CACHES = [
    pytest.param("locks", id="django-redis", marks=_NO_REDIS),
    pytest.param("locks-django", id="django-RedisCache", marks=_NO_REDIS),
    pytest.param("locmem", id="locmem"),
]
LOCMEM = "django.core.cache.backends.locmem.LocMemCache"


@pytest.fixture(params=CACHES)
def cache(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def key() -> str:
    """A key no other test uses (the caches are shared with the rest of the suite)."""
    return f"config:{uuid.uuid4().hex[:12]}"


def cache_lock(key: str, cache: str, **kwargs: Any) -> CacheLock:
    return CacheLock(key, cache=cache, single_process=cache == "locmem", **kwargs)


def in_thread(func: Any, *args: Any) -> Any:
    """Run ``func(*args)`` in another thread (another owner); return or raise its result."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(func, *args).result()


def enter(lock: CacheLock) -> occupy.Lease:
    with lock as lease:
        return lease


def test_a_second_caller_gets_lock_timeout_naming_the_holder(cache: str, key: str) -> None:
    with cache_lock(key, cache, owner="alice", ttl=30) as lease:
        assert lease.key == key and lease.owner == "alice"
        with pytest.raises(LockTimeout) as raised:
            in_thread(enter, cache_lock(key, cache, owner="bob"))
    error = raised.value
    assert error.key == key and error.holder.owner == "alice"
    assert error.holder.fence == lease.fence and 1 <= error.retry_after <= 30
    assert "alice" in str(error)
    in_thread(enter, cache_lock(key, cache, owner="bob"))  # free after the block


def test_the_block_raising_still_releases(cache: str, key: str) -> None:
    with pytest.raises(RuntimeError), cache_lock(key, cache):
        raise RuntimeError("the edit failed")
    in_thread(enter, cache_lock(key, cache, owner="bob"))


def test_as_a_decorator_the_key_is_formatted_from_the_call(cache: str, key: str) -> None:
    seen = []

    @CacheLock(key + ":{config_id}", cache=cache, single_process=cache == "locmem")
    def edit_config(config_id: int, user: str = "alice") -> str:
        with pytest.raises(LockTimeout):  # this config is held...
            in_thread(enter, cache_lock(f"{key}:{config_id}", cache))
        in_thread(enter, cache_lock(f"{key}:{config_id + 1}", cache))  # ...not the next one
        seen.append(config_id)
        return user

    assert edit_config(7, user="bob") == "bob" and edit_config(config_id=8) == "alice"
    assert seen == [7, 8]
    in_thread(enter, cache_lock(f"{key}:7", cache))
    with pytest.raises(ValueError, match="config_id"):
        CacheLock("config:{config_id}")(lambda pk: pk)


def test_it_waits_up_to_its_timeout(cache: str, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    held = cache_lock(key, cache, owner="alice")
    held.__enter__()
    waiting = watch_waiters(f"CacheLock:{cache}", monkeypatch)  # built by the enter

    def let_go_once_bob_waits() -> None:
        try:
            waiting.wait_for(1)
        finally:  # whatever happened, so that bob cannot hang
            held.__exit__(None, None, None)

    releaser = threading.Thread(target=let_go_once_bob_waits)
    releaser.start()
    started = time.monotonic()
    try:
        in_thread(enter, cache_lock(key, cache, owner="bob", timeout=10))
    finally:
        releaser.join()
    assert waiting.count() == 1  # bob waited, and got the key once alice let go
    assert time.monotonic() - started < 5
    with cache_lock(key, cache, owner="alice"), pytest.raises(LockTimeout, match="waiting"):
        in_thread(enter, cache_lock(key, cache, owner="bob", timeout=0.2))


def test_a_late_release_leaves_the_next_holder_alone(cache: str, key: str) -> None:
    """A hand-written cache lock that expired reads, then deletes: the next holder's.
    Here a release after expiry raises ``LeaseLost`` and the next holder keeps the key."""
    first = cache_lock(key, cache, owner="alice", ttl=0.3)
    first.__enter__()
    time.sleep(0.45)
    second = cache_lock(key, cache, owner="bob", ttl=30)
    in_thread(second.__enter__)
    with pytest.raises(LeaseLost):
        first.__exit__(None, None, None)
    with pytest.raises(LockTimeout) as raised:
        in_thread(enter, cache_lock(key, cache, owner="carol"))
    assert raised.value.holder.owner == "bob"


def test_the_holding_thread_re_enters(cache: str, key: str) -> None:
    with cache_lock(key, cache) as outer, cache_lock(key, cache) as inner:
        assert (inner.token, inner.depth) == (outer.token, 2)
    in_thread(enter, cache_lock(key, cache, owner="bob"))


def test_async_with(cache: str, key: str) -> None:
    async def main() -> tuple[int, int]:
        async with cache_lock(key, cache) as lease:
            with pytest.raises(LockTimeout):
                await asyncio.to_thread(enter, cache_lock(key, cache, owner="bob"))
            return lease.depth, lease.fence

    depth, fence = asyncio.run(main())
    assert depth == 1 and fence > 0
    in_thread(enter, cache_lock(key, cache, owner="bob"))


def test_no_occupy_setting_is_needed(cache: str, key: str) -> None:
    with override_settings(OCCUPY={}), cache_lock(key, cache) as lease:
        backend = lease.backend
        assert isinstance(backend, CacheBackend) and backend.cache_alias == cache
        assert lease.alias == f"CacheLock:{cache}"
    assert cache_backend(cache, single_process=cache == "locmem") is cache_backend(
        cache, single_process=cache == "locmem"
    )


# --- the caches it refuses, as CacheBackend does ---------------------------------------
@override_settings(
    CACHES={
        "default": {"BACKEND": LOCMEM},
        "dummy": {"BACKEND": "django.core.cache.backends.dummy.DummyCache"},
    }
)
def test_a_dummy_cache_is_refused() -> None:
    for single_process in (False, True):
        with pytest.raises(InvalidBackendError, match=r"stores nothing.*occupy\.E005"):
            enter(CacheLock("k", cache="dummy", single_process=single_process))


@override_settings(CACHES={"default": {"BACKEND": LOCMEM}})
def test_locmem_is_refused_unless_single_process() -> None:
    with pytest.raises(InvalidBackendError, match=r"one process.s memory.*single_process="):
        enter(CacheLock("k"))
    assert enter(CacheLock("k", single_process=True)).owner


@override_settings(CACHES={"default": {"BACKEND": LOCMEM}})
def test_an_unknown_cache_is_refused() -> None:
    with pytest.raises(InvalidBackendError, match="'nope'"):
        enter(CacheLock("k", cache="nope"))


def test_a_racy_cache_is_used_with_the_check_s_warning(tmp_path: Any, caplog: Any) -> None:
    caches = {
        "default": {"BACKEND": LOCMEM},
        "files": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(tmp_path),
        },
    }
    with override_settings(CACHES=caches), caplog.at_level(logging.WARNING, "occupy"):
        enter(CacheLock("k", cache="files"))
        enter(CacheLock("k", cache="files"))
    assert [r.getMessage().endswith("(occupy.W002)") for r in caplog.records] == [True]


def test_bad_arguments_are_refused_up_front() -> None:
    with pytest.raises(TypeError, match="cache"):
        CacheLock("k", cache=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ttl"):
        CacheLock("k", ttl=0)
    with pytest.raises(ValueError, match="timeout"):
        CacheLock("k", timeout=-1)
    with pytest.raises(TypeError, match="DEFAULT"):
        CacheLock("k", ttl=occupy.DEFAULT)


# --- several processes ----------------------------------------------------------------
def spans_under_cache_lock(cache: str, key: str, rounds: int) -> list[tuple[float, float]]:
    """Hold ``key`` ``rounds`` times (waiting for it); return each (entered, left) by the
    host's monotonic clock, which every process shares."""
    spans = []
    for _ in range(rounds):
        with CacheLock(key, cache=cache, ttl=30, timeout=60):
            entered = time.monotonic()
            time.sleep(0.005)
            spans.append((entered, time.monotonic()))
    return spans


@pytest.mark.multiprocess
@pytest.mark.parametrize("cache", CACHES[:2])
def test_processes_exclude_each_other(cache: str, key: str) -> None:
    results = multiproc.run(spans_under_cache_lock, [(cache, key, 10)] * 4)
    spans = sorted(span for result in results for span in result)
    assert len(spans) == 40
    overlaps = [(a, b) for a, b in itertools.pairwise(spans) if b[0] < a[1]]
    assert not overlaps


# --- one registry: get_backend builds and keeps CacheLock's backends ---------------------
def test_its_backend_is_get_backends_and_reload_forgets_it(cache: str, key: str) -> None:
    """The backend lives in get_backend's registry under the lease's ``alias``: the other
    functions reach it there, and a settings reload forgets it as it forgets the rest."""
    with cache_lock(key, cache, owner="alice") as lease:
        assert get_backend(lease.alias) is lease.backend
        assert occupy.holder(key, backend=lease.alias).owner == "alice"
        with override_settings(OCCUPY={}), pytest.raises(InvalidBackendError, match=lease.alias):
            get_backend(lease.alias)
    assert cache_backend(cache, single_process=cache == "locmem") is not lease.backend


@override_settings(CACHES={"default": {"BACKEND": LOCMEM}})
def test_another_configuration_of_its_alias_builds_the_backend_again() -> None:
    single = cache_backend("default", single_process=True)
    assert cache_backend("default", single_process=True) is single
    with pytest.raises(InvalidBackendError, match=r"one process.s memory.*single_process="):
        cache_backend("default")
    assert get_backend("CacheLock:default") is single  # the refused one was not kept


def test_a_configured_alias_takes_no_other_configuration(live_db: None) -> None:
    with pytest.raises(InvalidBackendError, match="'default' is configured in OCCUPY"):
        get_backend("default", config={"BACKEND": "occupy.backends.db.DatabaseBackend"})
