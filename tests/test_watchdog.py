"""The renewal watchdog, on every backend: it renews, stops on any failure, and lets a
dropped lease expire."""

from __future__ import annotations

import gc
import logging
import time

import pytest

import occupy
from occupy import signals
from occupy.backends import get_backend


def test_a_dropped_lease_is_no_longer_renewed(using: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="occupy.watchdog")
    lease = occupy.acquire("book:1", owner="alice", ttl=0.6, renew=True, using=using)
    del lease  # dropped without a release: nobody can release it any more
    gc.collect()
    time.sleep(1.5)  # several renewal periods (ttl / 3), and more than the ttl
    assert occupy.holder("book:1", using=using) is None
    assert any(
        r.name == "occupy.watchdog" and "'book:1'" in r.getMessage() and "dropped" in r.getMessage()
        for r in caplog.records
    ), caplog.text


class _StoreDown(ConnectionError):
    """What a driver raises when the store cannot be reached."""


def test_a_store_failure_marks_the_renewed_lease_lost(
    using: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = get_backend(using)
    lost: list = []
    signals.lease_lost.connect(
        lambda **kw: lost.append(kw["lease"]), weak=False, dispatch_uid="test-watchdog-store-down"
    )
    try:
        with (
            pytest.raises(occupy.LeaseLost),
            occupy.lock("book:1", owner="alice", ttl=0.6, renew=True, using=using) as lease,
        ):

            def store_down(lease, ttl):
                raise _StoreDown("connection refused")

            monkeypatch.setattr(backend, "extend", store_down)
            time.sleep(0.7)  # more than two renewal periods (ttl / 3)
            assert lease.lost
            with pytest.raises(occupy.LeaseLost):
                lease.ensure_held()
            monkeypatch.undo()  # the store is back: leaving still raises, as lost
        assert lost == [lease]
    finally:
        signals.lease_lost.disconnect(dispatch_uid="test-watchdog-store-down")
