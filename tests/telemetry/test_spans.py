"""Spans only where they carry news: none on an uncontended acquire, release or section;
one back-dated span for an acquire that waited past the threshold, timed out, was
refused or failed, and for a section that ended lost or fenced out. Failures are
recorded by type and key family only: no key, owner or token in a status or an event."""

from __future__ import annotations

import time

import pytest
from django.conf import settings
from django.test import override_settings
from opentelemetry.trace import SpanKind, StatusCode

import occupy
from tests.support.aliases import backend_params
from tests.support.telemetry import Recorded
from tests.support.waiting import release_once_waiting
from tests.testapp.models import Document

WAIT = "wait_for occupy.lock"


def _telemetry(**values: object) -> override_settings:
    return override_settings(OCCUPY={**settings.OCCUPY, "TELEMETRY": values})


@pytest.mark.parametrize("alias", backend_params(["default", "redis", "memory"]))
def test_uncontended_acquires_releases_and_sections_make_no_span(
    otel: Recorded, family: str, alias: str, live_db: None
) -> None:
    key = f"{family}:1"
    occupy.release(occupy.acquire(key, backend=alias))
    with occupy.lock(key, backend=alias), occupy.lock(key, backend=alias):
        pass
    occupy.release(occupy.takeover(key, owner="bob", backend=alias))
    assert otel.spans_of(family) == []
    assert (
        otel.histogram("occupy.lease.hold.duration", **{"occupy.key.family": family})[0] == 3
    )  # recorded all the same, as metrics


@pytest.mark.parametrize("alias", backend_params(["redis", "memory"]))
def test_a_wait_over_the_threshold_makes_one_back_dated_span(
    otel: Recorded, family: str, alias: str, live_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = f"{family}:1"
    ann = occupy.acquire(key, owner="ann", reentrant=False, backend=alias)
    released = release_once_waiting(alias, ann, monkeypatch, hold=0.3)
    began = time.time_ns()
    started = time.monotonic()
    try:
        lease = occupy.acquire(key, owner="bob", timeout=10, backend=alias)
    finally:
        released()
    waited = time.monotonic() - started
    occupy.release(lease)

    assert waited >= 0.3
    found = otel.spans_of(family)
    assert [span.name for span in found] == [WAIT]
    span = found[0]
    assert (span.end_time - span.start_time) / 1e9 == pytest.approx(waited, rel=0.05)
    # Back-dated: made when the acquire returned, it begins when the acquire began.
    assert began <= span.start_time <= began + 0.05 * waited * 1e9
    assert span.kind == SpanKind.INTERNAL
    assert span.status.status_code == StatusCode.UNSET
    assert dict(span.attributes) == {
        "occupy.backend": alias,
        "occupy.store": span.attributes["occupy.store"],
        "occupy.key.family": family,
        "occupy.outcome": "granted_after_wait",
    }


def test_a_wait_under_the_threshold_makes_no_span(
    otel: Recorded, family: str, live_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = f"{family}:1"
    with _telemetry(WAIT_SPAN_THRESHOLD=5):
        holder = occupy.acquire(key, reentrant=False, backend="memory")
        released = release_once_waiting("memory", holder, monkeypatch)
        try:
            occupy.release(occupy.acquire(key, timeout=10, backend="memory"))
        finally:
            released()
    assert otel.spans_of(family) == []
    assert otel.histogram("occupy.lock.wait.duration", **{"occupy.key.family": family})[0] == 1


def _fail_every_way(family: str, tmp_path) -> None:
    """Make every failure a span records: refused, timed out, takeover refused, lost
    (expired), store unavailable."""
    key = f"{family}:1"
    holder = occupy.acquire(key, owner="user:42:ann", ttl=30, reentrant=False, backend="memory")
    with pytest.raises(occupy.Occupied):
        occupy.acquire(key, owner="user:43:bob", timeout=0, backend="memory")
    with pytest.raises(occupy.LockTimeout):
        occupy.acquire(key, owner="user:43:bob", timeout=0.05, backend="memory")
    with pytest.raises(occupy.TakeoverRefused):
        occupy.takeover(key, owner="user:43:bob", if_fence=holder.fence + 1, backend="memory")
    occupy.release(holder)
    with pytest.raises(occupy.LeaseLost), occupy.lock(f"{family}:2", ttl=0.1, backend="memory"):
        time.sleep(0.3)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    backends = {
        **settings.OCCUPY["BACKENDS"],
        "down": {"BACKEND": "occupy.backends.file.FileBackend", "LOCATION": str(blocker / "x")},
    }
    with (
        override_settings(OCCUPY={**settings.OCCUPY, "BACKENDS": backends}),
        pytest.raises(occupy.StoreUnavailable),
    ):
        occupy.acquire(f"{family}:3", owner="user:43:bob", timeout=0, backend="down")


def test_failures_on_spans_carry_no_key_or_owner(
    otel: Recorded, family: str, tmp_path, live_db: None
) -> None:
    _fail_every_way(family, tmp_path)
    secrets = [f"{family}:1", f"{family}:2", f"{family}:3", "user:42:ann", "user:43:bob"]
    found = otel.spans_of(family)
    assert found
    for span in found:
        texts = [span.name, span.status.description or ""]
        for event in span.events:
            texts += [event.name, *(str(value) for value in event.attributes.values())]
        texts += [str(value) for value in span.attributes.values()]
        leaked = [secret for secret in secrets for text in texts if secret in text]
        assert leaked == [], (
            span.name,
            span.status.description,
            [e.attributes for e in span.events],
        )


def test_each_failure_is_one_span_with_its_error_type(
    otel: Recorded, family: str, tmp_path, live_db: None
) -> None:
    _fail_every_way(family, tmp_path)
    found = [(span.name, span.attributes.get("error.type")) for span in otel.spans_of(family)]
    assert sorted(found) == sorted(
        [
            (WAIT, "occupy.exceptions.Occupied"),
            (WAIT, "occupy.exceptions.LockTimeout"),
            ("occupy.takeover", "occupy.exceptions.TakeoverRefused"),
            ("occupy.lock", "occupy.exceptions.LeaseLost"),
            (WAIT, "occupy.exceptions.StoreUnavailable"),
        ]
    )
    for span in otel.spans_of(family):
        assert span.status.status_code == StatusCode.ERROR
        assert span.status.description is None
        assert [(e.name, dict(e.attributes)) for e in span.events] == [
            (
                "exception",
                {"exception.type": span.attributes["error.type"], "occupy.key.family": family},
            )
        ]
    lost = otel.spans_of(family, "occupy.lock")[0]
    assert lost.attributes["occupy.reason"] == "expired"
    assert (lost.end_time - lost.start_time) / 1e9 >= 0.25  # from its acquire to the loss


def test_a_section_that_wrote_fenced_out_gets_one_span(otel: Recorded, live_db: None) -> None:
    doc = Document.objects.create(body="first")
    began = time.time_ns()
    with pytest.raises(occupy.FencedOut), doc.occupy(ttl=30) as old:
        new = occupy.takeover(old.key, owner="newer", ttl=30, reentrant=False)
        stale = Document.objects.get(pk=doc.pk)
        newer = Document.objects.get(pk=doc.pk)
        newer.body = "newer"
        newer.save(lease=new)
        stale.body = "stale"
        stale.save(lease=old)
    occupy.release(new)
    found = [s for s in otel.spans_of("testapp.document") if s.start_time >= began]
    assert [(s.name, s.attributes["error.type"]) for s in found] == [
        ("occupy.lock", "occupy.exceptions.FencedOut")
    ]
    assert found[0].attributes["occupy.reason"] == "taken_over"


def test_an_async_acquire_that_waited_is_recorded_as_one_that_waited(
    otel: Recorded, family: str, live_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    key = f"{family}:1"
    ann = occupy.acquire(key, owner="ann", reentrant=False, backend="memory")
    released = release_once_waiting("memory", ann, monkeypatch, hold=0.3)

    async def wait_for_it() -> float:
        started = time.monotonic()
        lease = await occupy.aacquire(key, owner="bob", timeout=10, backend="memory")
        waited = time.monotonic() - started
        await occupy.arelease(lease)
        return waited

    try:
        waited = asyncio.run(wait_for_it())
    finally:
        released()
    assert waited >= 0.3
    count, total = otel.histogram("occupy.lock.wait.duration", **{"occupy.key.family": family})
    assert count == 1 and total == pytest.approx(waited, rel=0.05)
    assert [span.name for span in otel.spans_of(family)] == [WAIT]
