"""OpenTelemetry metrics, read back from the SDK's in-memory reader.

The suite runs under the SDK (tests/support/telemetry.py), so these tests read what the
lock path recorded. The counting rules: the wait histogram takes only acquires that
waited, each outcome is counted once in ``occupy.lock.acquires``, the hold histogram
once per lease held here. The session's end checks that no key, owner or token reached
an attribute, a status, an event or a link anywhere in the run.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.conf import settings
from django.test import override_settings

import occupy
from tests.support import multiproc
from tests.support.aliases import backend_params
from tests.support.telemetry import Recorded, hold_in_turns
from tests.support.waiting import wait_until
from tests.testapp.models import Document, StrictBook


def _acquires(otel: Recorded, family: str, outcome: str) -> float:
    return otel.total(
        "occupy.lock.acquires", **{"occupy.key.family": family, "occupy.outcome": outcome}
    )


@pytest.mark.parametrize("alias", backend_params(["default", "db-postgresql", "redis"]))
def test_the_wait_histogram_counts_each_contended_acquire_and_its_wait(
    otel: Recorded, family: str, alias: str, live_db: None
) -> None:
    rounds, key = 2, f"{family}:1"
    workers = multiproc.start(hold_in_turns, [(alias, key, rounds, 0.4)])
    waits = []
    for _ in range(rounds):
        wait_until(
            lambda: getattr(occupy.holder(key, backend=alias), "owner", None) == "holder-process",
            timeout=60,
            what="the other process holds the key",
        )
        started = time.monotonic()
        lease = occupy.acquire(key, owner="waiter", ttl=30, timeout=30, backend=alias)
        waits.append(time.monotonic() - started)
        occupy.release(lease)
    assert multiproc.collect(workers) == [rounds]

    count, total = otel.histogram(
        "occupy.lock.wait.duration",
        **{"occupy.key.family": family, "occupy.backend": alias, "occupy.outcome": "granted"},
    )
    assert count == rounds
    assert sum(waits) > 0.2 * rounds  # the waits were real ones
    assert total == pytest.approx(sum(waits), rel=0.05)
    assert otel.histogram("occupy.lock.wait.duration", **{"occupy.key.family": family}) == (
        count,
        total,
    )  # nothing else waited in this process
    assert _acquires(otel, family, "granted_after_wait") == rounds
    assert _acquires(otel, family, "granted_at_once") == 0
    held, _ = otel.histogram("occupy.lease.hold.duration", **{"occupy.key.family": family})
    assert held == rounds  # this process's leases; the other process records its own
    assert otel.total("occupy.lease.held", **{"occupy.key.family": family}) == 0
    assert otel.total("occupy.lock.waiting", **{"occupy.key.family": family}) == 0


def test_an_occupied_and_a_timed_out_acquire_are_counted_as_such(
    otel: Recorded, family: str, live_db: None
) -> None:
    key = f"{family}:1"
    with occupy.lock(key, owner="ann", backend="memory"):

        def other() -> None:
            for timeout in (0, 0.2):
                with pytest.raises(occupy.Occupied):
                    occupy.acquire(key, owner="bob", timeout=timeout, backend="memory")

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert _acquires(otel, family, "granted_at_once") == 1
    assert _acquires(otel, family, "occupied") == 1
    assert _acquires(otel, family, "timed_out") == 1
    # The refusal did not wait: it is not in the wait histogram, the timeout is.
    assert (
        otel.histogram(
            "occupy.lock.wait.duration",
            **{"occupy.key.family": family, "occupy.outcome": "occupied"},
        )[0]
        == 0
    )
    count, total = otel.histogram(
        "occupy.lock.wait.duration", **{"occupy.key.family": family, "occupy.outcome": "timed_out"}
    )
    assert count == 1 and total >= 0.2
    assert otel.histogram("occupy.lock.wait.duration", **{"occupy.key.family": family})[0] == 1


def test_a_reentered_lease_is_held_once_until_its_last_release(
    otel: Recorded, family: str, live_db: None
) -> None:
    key = f"{family}:1"
    with occupy.lock(key, backend="memory"), occupy.lock(key, backend="memory"):
        assert otel.total("occupy.lease.held", **{"occupy.key.family": family}) == 1
    assert otel.total("occupy.lease.held", **{"occupy.key.family": family}) == 0
    assert (
        otel.histogram(
            "occupy.lease.hold.duration",
            **{"occupy.key.family": family, "occupy.lease.end": None},  # None: released
        )[0]
        == 1
    )
    assert _acquires(otel, family, "granted_at_once") == 1  # re-entering is not an acquire


def test_a_released_hold_is_recorded_with_the_backend_and_family_alone(
    otel: Recorded, family: str
) -> None:
    # The SDK copies and hashes every attribute of a synchronous record: the store kind
    # (fixed by the alias) is left to spans, and a release is the end's absence.
    with occupy.lock(f"{family}:1", backend="memory"):
        pass
    (point,) = [
        point
        for point in otel.points("occupy.lease.hold.duration")
        if point.attributes.get("occupy.key.family") == family
    ]
    assert dict(point.attributes) == {"occupy.backend": "memory", "occupy.key.family": family}


@pytest.mark.parametrize("alias", backend_params(["default", "redis", "memory"]))
def test_a_lease_expired_while_held_is_lost_once(
    otel: Recorded, family: str, alias: str, live_db: None
) -> None:
    key = f"{family}:1"
    lease = occupy.acquire(key, ttl=0.3, backend=alias)
    time.sleep(0.6)
    with pytest.raises(occupy.LeaseLost):
        lease.ensure_held()
    with pytest.raises(occupy.LeaseLost):
        occupy.release(lease)
    assert otel.total("occupy.lease.lost", **{"occupy.key.family": family}) == 1
    assert (
        otel.total("occupy.lease.lost", **{"occupy.key.family": family, "occupy.reason": "expired"})
        == 1
    )
    assert (
        otel.histogram(
            "occupy.lease.hold.duration",
            **{"occupy.key.family": family, "occupy.lease.end": "expired"},
        )[0]
        == 1
    )
    assert otel.total("occupy.lease.held", **{"occupy.key.family": family}) == 0


@pytest.mark.parametrize("alias", backend_params(["default", "redis", "memory"]))
def test_a_takeover_counts_once_and_its_victim_is_lost_as_taken_over(
    otel: Recorded, family: str, alias: str, live_db: None
) -> None:
    key = f"{family}:1"
    lease = occupy.acquire(key, owner="ann", ttl=30, backend=alias)
    new = occupy.takeover(key, owner="bob", ttl=30, reentrant=False, backend=alias)
    with pytest.raises(occupy.LeaseLost):
        lease.ensure_held()
    with pytest.raises(occupy.LeaseLost):
        occupy.release(lease)
    occupy.release(new)
    assert otel.total("occupy.lease.takeovers", **{"occupy.key.family": family}) == 1
    assert otel.total("occupy.lease.lost", **{"occupy.key.family": family}) == 1
    assert (
        otel.total(
            "occupy.lease.lost", **{"occupy.key.family": family, "occupy.reason": "taken_over"}
        )
        == 1
    )


def _refusals(otel: Recorded, name: str, label: str) -> float:
    return otel.total(name, **{"occupy.model": label})


def test_a_fenced_out_save_and_a_version_conflict_count_once_each(
    otel: Recorded, live_db: None
) -> None:
    doc = Document.objects.create(body="first")
    fenced = _refusals(otel, "occupy.write.fenced_out", "testapp.document")
    conflicts = _refusals(otel, "occupy.write.version_conflicts", "testapp.strictbook")

    with pytest.raises(occupy.LeaseLost), doc.occupy(ttl=30) as old:
        new = occupy.takeover(old.key, owner="newer", ttl=30, reentrant=False)
        newer = Document.objects.get(pk=doc.pk)
        newer.body = "newer"
        newer.save(lease=new)  # the new holder writes: the row's fence rises
        stale = Document.objects.get(pk=doc.pk)
        stale.body = "stale"
        with pytest.raises(occupy.FencedOut):
            stale.save(lease=old)
    occupy.release(new)

    book = StrictBook.objects.create(name="a")
    first, second = StrictBook.objects.get(pk=book.pk), StrictBook.objects.get(pk=book.pk)
    first.name, second.name = "b", "c"
    first.save()
    with pytest.raises(occupy.VersionConflict):
        second.save()

    assert _refusals(otel, "occupy.write.fenced_out", "testapp.document") == fenced + 1
    assert _refusals(otel, "occupy.write.version_conflicts", "testapp.strictbook") == conflicts + 1


def test_a_store_error_is_counted_and_the_acquire_recorded_as_failed(
    otel: Recorded, family: str, tmp_path, live_db: None
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    backends = {
        **settings.OCCUPY["BACKENDS"],
        "down": {"BACKEND": "occupy.backends.file.FileBackend", "LOCATION": str(blocker / "locks")},
    }
    with (
        override_settings(OCCUPY={**settings.OCCUPY, "BACKENDS": backends}),
        pytest.raises(occupy.StoreUnavailable),
    ):
        occupy.acquire(f"{family}:1", timeout=0, backend="down")
    assert otel.total("occupy.store.errors", **{"occupy.key.family": family}) >= 1
    assert _acquires(otel, family, "store_error") == 1
    # It failed at its first try: it never waited.
    assert otel.histogram("occupy.lock.wait.duration", **{"occupy.key.family": family})[0] == 0


def test_the_counts_survive_a_settings_reload(otel: Recorded, family: str, live_db: None) -> None:
    """Attribute sets are rebuilt after a reload; the counts under them go on."""
    key = f"{family}:1"
    with occupy.lock(key, backend="memory"):
        pass
    with override_settings(OCCUPY={**settings.OCCUPY}), occupy.lock(key, backend="memory"):
        pass
    with occupy.lock(key, backend="memory"):
        pass
    assert _acquires(otel, family, "granted_at_once") == 3
