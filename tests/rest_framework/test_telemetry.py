"""The DRF layer counts its answers with an occupy status (``occupy.http.responses``), and
its guarded write's lock is an event on the request's span, not spans of its own."""

from __future__ import annotations

import time

import pytest

import occupy
from occupy.owners import lease_owner, write_owner
from tests.support.telemetry import Recorded, recorded
from tests.support.waiting import release_once_waiting
from tests.testapp.models import Book


@pytest.fixture
def otel() -> Recorded:
    """What the SDK recorded in this session (needs opentelemetry-sdk)."""
    found = recorded()
    if found is None:
        pytest.skip("opentelemetry-sdk is not installed (pip install -e '.[test]')")
    return found


def _count(otel: Recorded, status: int, code: str | None) -> float:
    attributes: dict[str, object] = {"http.response.status_code": status}
    if code is not None:
        attributes["occupy.code"] = code
    return otel.total("occupy.http.responses", **attributes)


def test_occupy_statuses_are_counted_by_status_and_code(otel, users, client_for) -> None:
    book = Book.objects.create(name="Dune")
    client = client_for(users.editor)
    url = f"/api/books/{book.pk}/"
    before = {
        (412, "precondition_failed"): _count(otel, 412, "precondition_failed"),
        (428, "precondition_required"): _count(otel, 428, "precondition_required"),
        (304, None): _count(otel, 304, None),
    }

    assert (
        client.patch(url, {"status": "lent"}, format="json", HTTP_IF_MATCH='"99"').status_code
        == 412
    )
    assert client.patch(url, {"status": "lent"}, format="json").status_code == 428
    etag = client.get(url)["ETag"]
    assert client.get(url, HTTP_IF_NONE_MATCH=etag).status_code == 304
    assert client.get(url).status_code == 200  # not an occupy status: not counted

    for (status, code), count in before.items():
        assert _count(otel, status, code) == count + 1, (status, code)


# --- the guarded write: an event on the request's span, no span of its own -------------------


def _write_under_a_request_span(client, book: Book, **headers: str) -> tuple[int, object]:
    """PATCH ``book`` inside a span standing for the request's (an instrumented server
    makes one); return the status and that span, once ended."""
    from opentelemetry import trace

    with trace.get_tracer("tests").start_as_current_span("request") as request:
        status = client.patch(
            f"/api/books/{book.pk}/", {"name": "x"}, format="json", **headers
        ).status_code
    return status, request


def _occupy_spans_under(otel: Recorded, request: object) -> list[str]:
    return [
        span.name
        for span in otel.spans.recent
        if span.parent is not None and span.parent.span_id == request.context.span_id  # type: ignore[attr-defined]
    ]


def test_a_write_that_waited_is_an_event_on_the_request_span(
    otel, users, client_for, monkeypatch
) -> None:
    book = Book.objects.create(name="Dune")
    writing = occupy.acquire(
        book.occupy_key, owner=write_owner(users.other.pk), ttl=30, reentrant=False
    )
    # Released 0.1 s after the write began to wait: the wait lasts at least that long.
    released = release_once_waiting(writing.alias, writing, monkeypatch, hold=0.1)
    started = time.monotonic()
    try:
        status, request = _write_under_a_request_span(
            client_for(users.editor), book, HTTP_IF_MATCH='"1"'
        )
    finally:
        released()
    took = time.monotonic() - started
    assert status == 200
    assert _occupy_spans_under(otel, request) == []  # no span of its own
    [event] = [e for e in request.events if e.name == "occupy.write_lock"]
    assert event.attributes["occupy.outcome"] == "granted_after_wait"
    assert event.attributes["occupy.key.family"] == "testapp.book"
    assert 0.1 <= event.attributes["occupy.wait.duration"] <= took  # in seconds
    assert "error.type" not in event.attributes


def test_a_write_refused_by_an_edit_lease_is_an_event_with_its_error_type(
    otel, users, client_for
) -> None:
    book = Book.objects.create(name="Dune")
    lease = occupy.acquire(
        book.occupy_key, owner=lease_owner(users.other.pk), ttl=40, reentrant=False
    )
    try:
        status, request = _write_under_a_request_span(
            client_for(users.editor), book, HTTP_IF_MATCH='"1"'
        )
    finally:
        occupy.release(lease)
    assert status == 423
    assert _occupy_spans_under(otel, request) == []
    [event] = [e for e in request.events if e.name == "occupy.write_lock"]
    assert event.attributes["occupy.outcome"] == "occupied"
    assert event.attributes["error.type"] == "occupy.exceptions.Occupied"
    # Nobody named in any value; the wait's duration is a number whose digits may happen
    # to contain the holder's pk.
    shown = {k: v for k, v in event.attributes.items() if k != "occupy.wait.duration"}
    assert not any(str(users.other.pk) in str(value) for value in shown.values()), shown


def test_an_uncontended_write_records_no_event(otel, users, client_for) -> None:
    book = Book.objects.create(name="Dune")
    status, request = _write_under_a_request_span(
        client_for(users.editor), book, HTTP_IF_MATCH='"1"'
    )
    assert status == 200
    assert request.events == () or list(request.events) == []
    assert _occupy_spans_under(otel, request) == []
