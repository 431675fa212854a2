"""occupy.testing: the memory store, its clock, the override, the fixtures and the
TestCase mixin (the contract suite runs on the memory store as alias ``memory``)."""

from __future__ import annotations

import io
import time
import unittest

import pytest
from django.core.management import call_command
from django.test import SimpleTestCase

import occupy
from occupy.backends import get_backend
from occupy.testing import MemoryBackend, OccupyTestCaseMixin, StoreClock, memory_backends


def test_advancing_the_clock_expires_a_lease_without_sleeping(occupy_memory: StoreClock) -> None:
    lease = occupy.acquire("book:1", owner="alice", ttl=300)
    assert occupy.holder("book:1").owner == "alice"
    occupy_memory.advance(299)
    assert occupy.holder("book:1").owner == "alice"
    occupy_memory.advance(2)
    assert occupy.holder("book:1") is None
    with pytest.raises(occupy.LeaseLost):
        lease.extend(300)  # a renewal after expiry fails, as the watchdog's would
    bob = occupy.acquire("book:1", owner="bob", ttl=300, timeout=0)
    assert bob.fence > lease.fence


def test_a_renewed_lease_is_lost_at_the_renewal_after_the_clock_passed_it(
    occupy_memory: StoreClock,
) -> None:
    """The watchdog renews every third of the ttl of real time: after advance() past
    the expiry, its next renewal finds the lease gone and marks it lost."""
    lease = occupy.acquire("book:1", owner="alice", ttl=0.6, renew=True)
    occupy_memory.advance(1)
    deadline = time.monotonic() + 10  # bounded: the renewal is due within 0.2 s
    while not lease.lost and time.monotonic() < deadline:
        time.sleep(0.02)
    assert lease.lost
    with pytest.raises(occupy.LeaseLost):
        lease.ensure_held()
    with pytest.raises(occupy.LeaseLost):
        occupy.release(lease)


def test_sweep_locks_finds_what_expired(occupy_memory: StoreClock) -> None:
    occupy.acquire("book:1", owner="alice", ttl=10)
    occupy.acquire("book:2", owner="alice", ttl=100)
    out = io.StringIO()
    backend = get_backend()
    assert isinstance(backend, MemoryBackend)
    occupy_memory.advance(11)
    assert sorted(backend.grants) == ["book:1", "book:2"]  # expired, not yet swept
    call_command("sweep_locks", stdout=out)
    assert sorted(backend.grants) == ["book:2"]
    assert [c.key for c in backend.claims()] == ["book:2"]


def test_the_fixture_puts_every_alias_in_memory_and_empty(occupy_memory: StoreClock) -> None:
    from occupy.conf import occupy_settings

    for alias in occupy_settings.BACKENDS:
        assert isinstance(get_backend(alias), MemoryBackend)
    assert occupy.holder("book:1") is None  # nothing left from another test


def test_memory_backends_for_some_aliases_leaves_the_others() -> None:
    before = type(get_backend("files"))
    with memory_backends("default"):
        assert isinstance(get_backend("default"), MemoryBackend)
        assert type(get_backend("files")) is before
    assert not isinstance(get_backend("default"), MemoryBackend)


def test_the_clock_refuses_going_back(occupy_clock: StoreClock) -> None:
    with pytest.raises(ValueError, match="-1"):
        occupy_clock.advance(-1)
    with pytest.raises(ValueError, match="nan"):
        occupy_clock.advance(float("nan"))
    with pytest.raises(TypeError, match="str"):
        occupy_clock.advance("1")  # type: ignore[arg-type]


def test_the_testcase_mixin_puts_backends_in_memory_and_resets_the_clock() -> None:
    seen: list[object] = []

    class Case(OccupyTestCaseMixin, SimpleTestCase):
        def test_expiry(self) -> None:
            occupy.acquire("book:1", ttl=30)
            self.occupy_clock.advance(31)
            seen.append(type(get_backend()))
            self.assertIsNone(occupy.holder("book:1"))

    result = unittest.TextTestRunner(stream=io.StringIO()).run(Case("test_expiry"))
    assert result.wasSuccessful(), result.errors + result.failures
    assert seen == [MemoryBackend]
    assert not isinstance(get_backend(), MemoryBackend)
    from occupy.testing import clock

    assert clock.offset == 0
