"""``BaseBackend.clear_expired()``: the backend sweeps and sends ``lease_expired``, as
Django's ``SessionStore.clear_expired()`` does the work ``clearsessions`` asks for; the
batch size has one bound, checked before the store is asked anything."""

from __future__ import annotations

from typing import Any

import pytest

import occupy
from occupy import signals
from occupy.backends import get_backend
from occupy.backends.base import MAX_SWEEP_BATCH
from tests.backends.test_contract import pass_time


def _received() -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    def receiver(sender: type, signal: object, **kwargs: Any) -> None:
        sent.append({"sender": sender, **kwargs})

    signals.lease_expired.connect(receiver, weak=False, dispatch_uid="test_clear_expired")
    return sent


@pytest.fixture
def sent() -> Any:
    yield _received()
    signals.lease_expired.disconnect(dispatch_uid="test_clear_expired")


def test_clear_expired_sweeps_and_signals_once_with_the_count(alias: str, sent: list) -> None:
    backend = get_backend(alias)
    for key in ("book:1", "book:2"):
        occupy.acquire(key, owner="alice", ttl=0.2, backend=alias)
    live = occupy.acquire("book:3", owner="alice", ttl=30, backend=alias)
    pass_time(alias, 0.4)
    swept = 0 if backend.expires_by_itself else 2

    assert backend.clear_expired(dry_run=True) == swept
    assert sent == []  # a dry run deletes nothing, so nothing expired is announced
    assert backend.clear_expired(batch_size=1) == swept
    assert sent == ([{"sender": type(backend), "key": None, "count": 2}] if swept else [])
    assert backend.clear_expired() == 0
    assert len(sent) == (1 if swept else 0)  # nothing swept, nothing sent
    assert occupy.holder("book:3", backend=alias).owner == "alice"
    occupy.release(live)


def test_clear_expired_refuses_a_batch_size_out_of_bounds(alias: str) -> None:
    """Each size out of bounds is refused, and the expired claim is not swept. (The sizes
    in one test: the claim expires once, not once per size.)"""
    backend = get_backend(alias)
    occupy.acquire("book:1", owner="alice", ttl=0.2, backend=alias)
    pass_time(alias, 0.4)
    for size in [0, -1, MAX_SWEEP_BATCH + 1, 2**63, True]:
        message = rf"batch_size must be between 1 and 1,000,000, not {size!r}\.$"
        with pytest.raises(ValueError, match=message):
            backend.clear_expired(batch_size=size)
    if not backend.expires_by_itself:
        assert backend.clear_expired(dry_run=True) == 1  # nothing was swept
