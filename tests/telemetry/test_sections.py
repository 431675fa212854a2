"""``TRACE_EVERY_SECTION``: one span per section, acquire to release, made current inside
``occupy.lock`` (the block's work is its child); and a ``lock`` object shared by threads
leaves each thread's own section."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from django.conf import settings
from django.test import override_settings
from opentelemetry import trace
from opentelemetry.trace import StatusCode

import occupy
from tests.support.telemetry import Recorded
from tests.support.waiting import release_once_waiting

SECTION = "occupy.lock"


@pytest.fixture
def every_section() -> object:
    """Trace every section for the test."""
    telemetry = {"TRACE_EVERY_SECTION": True}
    with override_settings(OCCUPY={**settings.OCCUPY, "TELEMETRY": telemetry}):
        yield


def test_a_section_is_one_span_with_the_blocks_work_inside(
    otel: Recorded, family: str, every_section: None, live_db: None
) -> None:
    key = f"{family}:7"
    began = time.time_ns()
    with (
        occupy.lock(key, backend="memory"),
        occupy.lock(key, backend="memory"),  # re-entered: the same section
        trace.get_tracer("tests").start_as_current_span("work inside"),
    ):
        pass
    found = otel.spans_of(family)
    assert [span.name for span in found] == [SECTION]
    section = found[0]
    assert dict(section.attributes) == {
        "occupy.key.family": family,
        "occupy.backend": "memory",
        "occupy.store": "memory",
    }
    assert began <= section.start_time
    inner = [
        s
        for s in otel.spans.finished("work inside")
        if s.parent is not None and s.parent.span_id == section.context.span_id
    ]
    assert len(inner) == 1  # the block's own work is inside the lock's span
    assert trace.get_current_span() is trace.INVALID_SPAN  # made current only in the block


def test_an_acquire_and_its_release_are_one_span_not_made_current(
    otel: Recorded, family: str, every_section: None, live_db: None
) -> None:
    lease = occupy.acquire(f"{family}:1", backend="memory")
    assert trace.get_current_span() is trace.INVALID_SPAN
    time.sleep(0.05)
    occupy.release(lease)
    found = otel.spans_of(family)
    assert [span.name for span in found] == [SECTION]
    assert (found[0].end_time - found[0].start_time) / 1e9 >= 0.05


def test_a_section_that_waited_is_one_span_with_its_wait(
    otel: Recorded,
    family: str,
    every_section: None,
    live_db: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = f"{family}:1"
    holder = occupy.acquire(key, owner="ann", reentrant=False, backend="memory")
    released = release_once_waiting("memory", holder, monkeypatch, hold=0.3)
    began = time.time_ns()
    started = time.monotonic()
    try:
        with occupy.lock(key, owner="bob", timeout=10, backend="memory"):
            waited = time.monotonic() - started
    finally:
        released()
    assert waited >= 0.3
    found = otel.spans_of(family)
    assert [span.name for span in found] == [SECTION]  # no wait span besides
    assert found[0].attributes["occupy.wait.duration"] == pytest.approx(waited, rel=0.05)
    assert began <= found[0].start_time <= began + 0.05 * waited * 1e9


def test_a_block_that_raises_is_recorded_by_its_error_type_only(
    otel: Recorded, family: str, every_section: None, live_db: None
) -> None:
    with pytest.raises(ValueError), occupy.lock(f"{family}:1", backend="memory"):
        raise ValueError(f"{family}:1 went wrong")
    found = otel.spans_of(family)
    assert [span.name for span in found] == [SECTION]
    # Released as it should be: the section did not fail; the block's error is its own.
    assert found[0].status.status_code == StatusCode.UNSET


def test_a_lost_section_ends_with_its_error_type(
    otel: Recorded, family: str, every_section: None, live_db: None
) -> None:
    with pytest.raises(occupy.LeaseLost), occupy.lock(f"{family}:1", ttl=0.1, backend="memory"):
        time.sleep(0.3)
    found = otel.spans_of(family)
    assert [span.name for span in found] == [SECTION]
    assert found[0].attributes["error.type"] == "occupy.exceptions.LeaseLost"
    assert found[0].attributes["occupy.reason"] == "expired"
    assert found[0].status.status_code == StatusCode.ERROR
    assert found[0].status.description is None


# --- a lock object shared by threads ----------------------------------------------------


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
