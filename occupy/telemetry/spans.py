"""occupy's spans and span events: made only where they carry news, most of them after
the fact and back-dated to when the acquire began (``start_time``).

Invariants:

- A failure is recorded by its type only: the ``error.type`` attribute (the exception's
  qualified class name), an ERROR status *without* a description, and an ``exception``
  event with ``exception.type`` and the key family. occupy's messages name keys and
  owners, so ``record_exception`` (which copies the message) is never called, and no
  span is entered through the SDK's context managers, which would call it.
- Every span is INTERNAL and, except a traced section inside ``occupy.lock``, never made
  current: nothing else is parented on it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from occupy.conf import occupy_settings
from occupy.telemetry import instruments
from occupy.telemetry.attributes import AttributeSet

try:
    from opentelemetry import context as otel_context
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError:  # every caller checks instruments.active() first
    pass

__all__ = [
    "ERROR_TYPE",
    "SECTION",
    "TAKEOVER",
    "WAIT",
    "add_event",
    "attach",
    "detach",
    "end_section",
    "error_type",
    "finished",
    "span_settings",
    "start_section",
]

logger = logging.getLogger("occupy.telemetry")

#: The span of an acquire that waited past the threshold, or failed (semantic
#: conventions' proposal for waits: ``wait_for {condition}``, with ``error.type``).
WAIT = "wait_for occupy.lock"
#: The span of a section, acquire to release: every one when asked for, else one that
#: ended in a lost lease or a fenced-out write.
SECTION = "occupy.lock"
#: The span of a takeover that was refused or failed.
TAKEOVER = "occupy.takeover"
ERROR_TYPE = "error.type"

_settings: tuple[int, bool] | None = None
#: A threshold past any wait (seconds): ten years.
_NEVER = 10 * 365 * 86400.0


def span_settings() -> tuple[int, bool]:
    """Return when spans are made: (``WAIT_SPAN_THRESHOLD`` in ns, ``TRACE_EVERY_SECTION``)."""
    global _settings
    found = _settings
    if found is None:
        try:
            values = occupy_settings.TELEMETRY
            threshold = min(float(values["WAIT_SPAN_THRESHOLD"]), _NEVER)
            found = (int(threshold * 1e9), bool(values["TRACE_EVERY_SECTION"]))
        except ImproperlyConfigured:  # check reports it (occupy.E007)
            logger.exception("OCCUPY['TELEMETRY'] is wrong; occupy records with its defaults")
            found = (1_000_000, False)
        _settings = found
    return found


def _forget_settings() -> None:
    global _settings
    _settings = None


occupy_settings.on_reload(_forget_settings)


_tracer: Any = None


def tracer() -> Any:
    """Return occupy's tracer, made once (the API's tracer follows the global provider)."""
    global _tracer
    if _tracer is None:
        trace = instruments.otel_trace
        assert trace is not None
        found = instruments.version()
        _tracer = trace.get_tracer("occupy") if found is None else trace.get_tracer("occupy", found)
    return _tracer


def error_type(error: type[BaseException]) -> str:
    """Return the ``error.type`` of an exception class: its qualified name."""
    return f"{error.__module__}.{error.__qualname__}"


def wall(perf_ns: int) -> int:
    """Return the epoch time (ns) of a ``time.perf_counter_ns()`` reading: what span
    timestamps take, while durations are measured on the monotonic clock."""
    return time.time_ns() - (time.perf_counter_ns() - perf_ns)


def _failed(span: Any, error: str, family: Any, at: int) -> None:
    span.set_status(Status(StatusCode.ERROR))
    span.add_event(
        "exception", {"exception.type": error, "occupy.key.family": family}, timestamp=at
    )


def finished(
    name: str,
    attributes: AttributeSet,
    started: int,
    ended: int,
    error: type[BaseException] | None = None,
) -> None:
    """Record a span that began at ``started`` and ended at ``ended`` (perf_counter ns),
    failed with ``error`` if given."""
    offset = time.time_ns() - time.perf_counter_ns()
    failure = None if error is None else error_type(error)
    if failure is not None:
        attributes = attributes.plus(ERROR_TYPE, failure)
    span = tracer().start_span(
        name,
        kind=SpanKind.INTERNAL,
        attributes=attributes.span_attributes,
        start_time=started + offset,
    )
    if failure is not None:
        _failed(span, failure, attributes.attributes.get("occupy.key.family"), ended + offset)
    span.end(end_time=ended + offset)


def start_section(attributes: AttributeSet, started: int, waited: float | None) -> Any:
    """Start a section's span, back-dated to ``started`` (perf_counter ns); with the
    seconds its acquire ``waited``, if it did."""
    values: dict[str, Any] = attributes.span_attributes
    if waited is not None:
        values = {**values, "occupy.wait.duration": waited}
    return tracer().start_span(
        SECTION, kind=SpanKind.INTERNAL, attributes=values, start_time=wall(started)
    )


def end_section(
    span: Any, attributes: AttributeSet, error: type[BaseException] | None, reason: str | None
) -> None:
    """End a section's span (of ``attributes``), failed with ``error`` if given, lost
    for ``reason``."""
    if error is not None:
        failure = error_type(error)
        span.set_attribute(ERROR_TYPE, failure)
        if reason is not None:
            span.set_attribute("occupy.reason", reason)
        _failed(span, failure, attributes.attributes.get("occupy.key.family"), time.time_ns())
    span.end()


def attach(span: Any) -> Any:
    """Make ``span`` current; return the token that :func:`detach` takes."""
    trace = instruments.otel_trace
    assert trace is not None
    return otel_context.attach(trace.set_span_in_context(span))


def detach(token: Any) -> None:
    """Undo :func:`attach`."""
    otel_context.detach(token)


def add_event(name: str, attributes: dict[str, Any]) -> None:
    """Add an event to the current span (the request's, say), if it is recorded."""
    trace = instruments.otel_trace
    assert trace is not None
    span = trace.get_current_span()
    if span.is_recording():
        span.add_event(name, attributes)
