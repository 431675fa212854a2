"""The renewal watchdog, on every backend: it renews, stops on any failure, and lets a
dropped lease expire."""

from __future__ import annotations

import gc
import logging
import threading

import pytest

import occupy
from occupy import signals
from occupy.backends import get_backend
from occupy.watchdog import watchdog
from tests.support.waiting import wait_until


def test_a_dropped_lease_is_no_longer_renewed(alias: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="occupy.watchdog")
    lease = occupy.acquire("book:1", owner="alice", ttl=0.3, renew=True, backend=alias)
    del lease  # dropped without a release: nobody can release it any more
    gc.collect()

    def said_dropped() -> bool:
        return any(
            r.name == "occupy.watchdog"
            and "'book:1'" in r.getMessage()
            and "dropped" in r.getMessage()
            for r in caplog.records
        )

    # Renewed on, the claim would never expire: the wait would fail.
    wait_until(lambda: occupy.holder("book:1", backend=alias) is None, what="the claim to expire")
    wait_until(said_dropped, what=f"the watchdog to report the lease dropped: {caplog.text}")


class _StoreDown(ConnectionError):
    """What a driver raises when the store cannot be reached."""


def test_a_store_failure_marks_the_renewed_lease_lost(
    alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = get_backend(alias)
    lost: list = []
    signals.lease_lost.connect(
        lambda **kw: lost.append(kw["lease"]), weak=False, dispatch_uid="test-watchdog-store-down"
    )
    try:
        with (
            pytest.raises(occupy.LeaseLost),
            occupy.lock("book:1", owner="alice", ttl=0.6, renew=True, backend=alias) as lease,
        ):

            def store_down(lease, ttl):
                raise _StoreDown("connection refused")

            monkeypatch.setattr(backend, "extend", store_down)
            wait_until(lambda: lease.lost, what="the next renewal to mark the lease lost")
            with pytest.raises(occupy.LeaseLost):
                lease.ensure_held()
            monkeypatch.undo()  # the store is back: leaving still raises, as lost
        assert lost == [lease]
    finally:
        signals.lease_lost.disconnect(dispatch_uid="test-watchdog-store-down")


def test_a_release_during_a_renewal_is_not_a_lost_lease(
    alias: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The lease is released while the watchdog's extend is on its way to the store: the
    extend then fails (nothing is held any more), which is the release's doing, not a
    lost lease: no ``lease_lost``, no warning, the lease not marked lost."""
    caplog.set_level(logging.WARNING, logger="occupy.watchdog")
    backend = get_backend(alias)
    extend = backend.extend
    in_flight, released, handled = threading.Event(), threading.Event(), threading.Event()

    def extend_after_the_release(lease, ttl):
        in_flight.set()
        released.wait(5)
        return extend(lease, ttl)

    renew = watchdog._renew

    def renew_and_tell(lease):
        try:
            renew(lease)
        finally:
            handled.set()

    monkeypatch.setattr(watchdog, "_renew", renew_and_tell)

    lost: list = []
    signals.lease_lost.connect(
        lambda **kw: lost.append(kw["lease"]), weak=False, dispatch_uid="test-watchdog-release"
    )
    try:
        lease = occupy.acquire("book:1", owner="alice", ttl=0.6, renew=True, backend=alias)
        monkeypatch.setattr(backend, "extend", extend_after_the_release)
        assert in_flight.wait(5)
        occupy.release(lease)
        released.set()
        assert handled.wait(5)  # the extend failed and the watchdog handled it
        assert not lease.lost
        assert lost == []
        assert "stopped renewing" not in caplog.text
    finally:
        released.set()
        signals.lease_lost.disconnect(dispatch_uid="test-watchdog-release")
