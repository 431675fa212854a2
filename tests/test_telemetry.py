"""OpenTelemetry metrics and spans, read back from the SDK's in-memory reader.

The suite runs under the SDK (tests/support/telemetry.py), so these tests read what the
lock path recorded; each uses a key family of its own, so that the cumulative figures
of the rest of the run do not count. The session's end checks that no key, owner or
token reached an attribute anywhere in the run.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from django.conf import settings
from django.test import override_settings

import occupy
from occupy import telemetry
from tests.support import multiproc
from tests.support.aliases import backend_params
from tests.support.telemetry import Recorded, hold_in_turns, recorded
from tests.support.waiting import wait_until
from tests.testapp.models import Document, StrictBook


@pytest.fixture
def otel() -> Recorded:
    """What the SDK recorded in this session (the telemetry tests need the SDK)."""
    found = recorded()
    if found is None:
        pytest.skip("opentelemetry-sdk is not installed (pip install -e '.[test]')")
    assert telemetry.active()
    return found


@pytest.fixture
def family() -> str:
    """A key family of this test's own."""
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize("alias", backend_params(["default", "db-postgresql", "redis"]))
def test_the_wait_histogram_counts_each_contended_acquire_and_its_wait(
    otel: Recorded, family: str, alias: str, live_db: None
) -> None:
    rounds, key = 4, f"{family}:1"
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
    held, _ = otel.histogram("occupy.lease.hold.duration", **{"occupy.key.family": family})
    assert held == rounds  # this process's leases; the other process records its own
    assert otel.total("occupy.lease.held", **{"occupy.key.family": family}) == 0
    assert otel.total("occupy.lock.waiting", **{"occupy.key.family": family}) == 0


def test_an_occupied_and_a_timed_out_acquire_are_recorded_as_such(
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
    assert (
        otel.histogram(
            "occupy.lock.wait.duration",
            **{"occupy.key.family": family, "occupy.outcome": "occupied"},
        )[0]
        == 1
    )
    count, total = otel.histogram(
        "occupy.lock.wait.duration", **{"occupy.key.family": family, "occupy.outcome": "timed_out"}
    )
    assert count == 1 and total >= 0.2


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
            **{"occupy.key.family": family, "occupy.lease.end": "released"},
        )[0]
        == 1
    )


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
    assert (
        otel.histogram(
            "occupy.lock.wait.duration",
            **{"occupy.key.family": family, "occupy.outcome": "store_error"},
        )[0]
        == 1
    )


def test_spans_show_the_wait_and_the_critical_section(
    otel: Recorded, family: str, live_db: None
) -> None:
    from opentelemetry import trace

    key = f"{family}:7"
    with (
        occupy.lock(key, backend="memory"),
        trace.get_tracer("tests").start_as_current_span("work inside"),
    ):
        pass
    attributes = {"occupy.key.family": family, "occupy.backend": "memory", "occupy.store": "memory"}
    spans = {
        name: [
            s for s in otel.spans.finished(name) if s.attributes.get("occupy.key.family") == family
        ]
        for name in ("occupy.acquire", "occupy.lock", "occupy.release")
    }
    assert all(len(found) == 1 for found in spans.values()), spans
    for found in spans.values():
        assert dict(found[0].attributes) == attributes
    section = spans["occupy.lock"][0]
    inner = [
        s
        for s in otel.spans.finished("work inside")
        if s.parent is not None and s.parent.span_id == section.context.span_id
    ]
    assert len(inner) == 1  # the block's own work is inside the lock's span
    release = spans["occupy.release"][0]
    assert release.parent is not None and release.parent.span_id == section.context.span_id


def test_the_key_family_setting_names_the_function(otel: Recorded, live_db: None) -> None:
    tenant = uuid.uuid4().hex[:8]
    telemetry_settings = {"KEY_FAMILY": "tests.test_telemetry.tenant_family"}
    with (
        override_settings(OCCUPY={**settings.OCCUPY, "TELEMETRY": telemetry_settings}),
        occupy.lock(f"tenant-{tenant}/report:9", backend="memory"),
    ):
        pass
    assert (
        otel.histogram("occupy.lock.wait.duration", **{"occupy.key.family": f"report-{tenant}"})[0]
        == 1
    )


def tenant_family(key: str) -> str:
    """Map ``tenant-<id>/<family>:<id>`` to ``<family>-<id>`` (a test's own hook)."""
    tenant, _, rest = key.partition("/")
    return f"{rest.partition(':')[0]}-{tenant.removeprefix('tenant-')}"


def test_a_key_without_a_colon_is_family_other(otel: Recorded, live_db: None) -> None:
    assert telemetry.family("report-2026-11-26") == "other"
    assert telemetry.family("library.book:3") == "library.book"


# --- a lock object shared by threads (not telemetry, but the same enter/exit) -----------


def test_a_lock_object_shared_by_threads_releases_each_threads_own_lease(live_db: None) -> None:
    key = f"shared-{uuid.uuid4().hex[:8]}:1"
    shared = occupy.lock(key, ttl=0.3, timeout=5, backend="memory")
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    errors: list[BaseException] = []
    owners: dict[str, str] = {}

    def first() -> None:
        try:
            with shared as lease:
                owners["first"] = lease.owner
                first_in.set()
                second_in.wait(10)  # the lease expired and the second thread took the key
        except occupy.LeaseLost:
            pass  # its own lease was lost: said, and nobody else's was touched
        except BaseException as e:
            errors.append(e)
        first_out.set()

    def second() -> None:
        try:
            first_in.wait(10)
            with shared as lease:
                owners["second"] = lease.owner
                second_in.set()
                first_out.wait(10)
                holder = occupy.holder(key, backend="memory")
                assert holder is not None and holder.owner == owners["second"]
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert occupy.holder(key, backend="memory") is None


def test_leaving_a_lock_from_a_context_that_did_not_enter_it_says_so() -> None:
    shared = occupy.lock("never-entered:1", backend="memory")
    with pytest.raises(RuntimeError, match="did not enter it"):
        shared.__exit__(None, None, None)
