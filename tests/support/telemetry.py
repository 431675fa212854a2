"""The OpenTelemetry SDK the suite runs under, and what it recorded.

When ``opentelemetry-sdk`` is installed, the whole test session records occupy's metrics
and spans in memory (a provider can be set once per process, so it is set for all),
which lets the telemetry tests read them and lets the session check, at its end, that
no full key, owner or token reached an attribute, a span status, a span event or a link
anywhere in the suite's run.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import occupy
from occupy import signals

__all__ = ["Recorded", "SpanRecord", "hold_in_turns", "install", "recorded"]


@dataclass
class Recorded:
    """The SDK's in-memory reader and span exporter, and the secrets seen in the run."""

    reader: Any
    spans: Any
    keys: set[str] = field(default_factory=set)
    owners: set[str] = field(default_factory=set)
    tokens: set[str] = field(default_factory=set)

    def points(self, name: str) -> Iterator[Any]:
        """Yield the data points of metric ``name`` (cumulative, since the start)."""
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        yield from metric.data.data_points

    def total(self, name: str, **attributes: Any) -> float:
        """Return the sum (counters) or count (histograms) of ``name`` over the points
        whose attributes include ``attributes``."""
        total = 0.0
        for point in self.points(name):
            if all(point.attributes.get(k) == v for k, v in attributes.items()):
                total += point.value if hasattr(point, "value") else point.count
        return total

    def histogram(self, name: str, **attributes: Any) -> tuple[int, float]:
        """Return (count, sum) of histogram ``name`` over the matching points."""
        count, total = 0, 0.0
        for point in self.points(name):
            if all(point.attributes.get(k) == v for k, v in attributes.items()):
                count += point.count
                total += point.sum
        return count, total

    def spans_of(self, family: str, name: str | None = None) -> list[Any]:
        """Return the recent finished spans of key family ``family`` (named ``name``)."""
        return [
            span
            for span in self.spans.recent
            if (span.attributes or {}).get("occupy.key.family") == family
            and (name is None or span.name == name)
        ]

    def leaks(self) -> list[str]:
        """Return every attribute (metric, span, span event or link), span name and span
        status description that carries a full key, an owner or a token seen in this
        run: keys and owners with a ``:`` (a key without one has no family, and is
        recorded as ``other``), and every token. A status or an event (an exception's
        message) leaks by containing one, an attribute also by being one."""
        look = _Look(
            {k for k in self.keys if ":" in k} | {o for o in self.owners if ":" in o} | self.tokens,
            self.tokens,
        )
        for name, description in self.spans.statuses:
            look.text(f"span {name}: status", description or "")
        for name, event, attributes in self.spans.events:
            look.attributes(f"span {name}: event {event}", dict(attributes))
        for name, attributes in self.spans.links:
            look.attributes(f"span {name}: link", dict(attributes))
        for name in self.spans.names:
            look.text("span name", name)
        for name, attributes in self.spans.attribute_sets:
            look.attributes(f"span {name}", dict(attributes))
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        look.attributes(f"metric {metric.name}", point.attributes)
        return look.found


class _Look:
    """Look for secrets in what was recorded, and keep what leaked."""

    def __init__(self, secrets: set[str], tokens: set[str]) -> None:
        self.secrets, self.tokens = secrets, tokens
        self.found: list[str] = []

    def _contains(self, text: str) -> bool:
        return any(secret in text for secret in self.secrets)

    def text(self, where: str, text: str) -> None:
        """Keep free ``text`` (a status, a name) if a secret is anywhere in it."""
        if self._contains(text):
            self.found.append(f"{where} {text!r}")

    def attributes(self, where: str, attributes: Any) -> None:
        """Keep each attribute that is a secret or holds a token, or, being free text
        (an exception's message), holds a secret anywhere."""
        for name, value in (attributes or {}).items():
            text = str(value)
            whole = text in self.secrets or any(token in text for token in self.tokens)
            if whole or (name in FREE_TEXT and self._contains(text)):
                self.found.append(f"{where}: {name}={text!r}")


#: Attributes whose value is free text (an exception's message, a stack trace): a
#: secret anywhere inside one is a leak.
FREE_TEXT = frozenset({"exception.message", "exception.stacktrace"})


def _frozen(attributes: Any) -> frozenset[tuple[str, Any]]:
    return frozenset(
        (name, tuple(value) if isinstance(value, list | tuple) else value)
        for name, value in (attributes or {}).items()
    )


class SpanRecord:
    """Keep the recent spans (for the tests to read) and every distinct (name,
    attributes), status, event and link of the run (low-cardinality by design, so few),
    which the session's end checks for leaks; the SDK's span processor, once mixed in."""

    def __init__(self) -> None:
        self.recent: deque[Any] = deque(maxlen=5000)
        self.attribute_sets: set[tuple[str, frozenset[tuple[str, Any]]]] = set()
        self.names: set[str] = set()
        self.statuses: set[tuple[str, str | None]] = set()
        self.events: set[tuple[str, str, frozenset[tuple[str, Any]]]] = set()
        self.links: set[tuple[str, frozenset[tuple[str, Any]]]] = set()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        """Nothing to do when a span starts."""

    def on_end(self, span: Any) -> None:
        """Keep the finished span."""
        self.recent.append(span)
        self.attribute_sets.add((span.name, _frozen(span.attributes)))
        self.names.add(span.name)
        self.statuses.add((span.name, span.status.description))
        for event in span.events:
            self.events.add((span.name, event.name, _frozen(event.attributes)))
        for link in span.links:
            self.links.add((span.name, _frozen(link.attributes)))

    def shutdown(self) -> None:
        """Nothing to flush."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing to flush."""
        return True

    def finished(self, name: str) -> list[Any]:
        """Return the recent finished spans named ``name``."""
        return [span for span in self.recent if span.name == name]


_recorded: Recorded | None = None


def install() -> Recorded | None:
    """Set the SDK's providers with in-memory readers, once; ``None`` without the SDK."""
    global _recorded
    if _recorded is not None:
        return _recorded
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
    except ImportError:
        return None
    from opentelemetry.sdk.trace import SpanProcessor

    class _Spans(SpanRecord, SpanProcessor):  # type: ignore[misc]
        """:class:`SpanRecord` as the SDK's span processor."""

    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    spans = _Spans()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(spans)
    trace.set_tracer_provider(tracer_provider)
    _recorded = Recorded(reader, spans)
    signals.lease_acquired.connect(_seen, dispatch_uid="tests.telemetry.seen")
    return _recorded


def _seen(sender: Any, lease: Any, **kwargs: Any) -> None:
    assert _recorded is not None
    _recorded.keys.add(lease.key)
    _recorded.owners.add(lease.owner)
    _recorded.tokens.add(lease.token)


def recorded() -> Recorded | None:
    """Return what the session recorded, or ``None`` without the SDK."""
    return _recorded


def hold_in_turns(alias: str, key: str, rounds: int, hold: float) -> int:
    """Hold ``key`` ``rounds`` times for ``hold`` seconds, pausing as long between."""
    for _ in range(rounds):
        with occupy.lock(key, owner="holder-process", ttl=30, timeout=30, backend=alias):
            time.sleep(hold)
        time.sleep(hold)
    return rounds
