"""The OpenTelemetry SDK the suite runs under, and what it recorded.

When ``opentelemetry-sdk`` is installed, the whole test session records occupy's metrics
and spans in memory (a provider can be set once per process, so it is set for all),
which lets the telemetry tests read them and lets the session check, at its end, that
no full key, owner or token reached an attribute anywhere in the suite's run.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import occupy
from occupy import signals

__all__ = ["Recorded", "hold_in_turns", "install", "recorded"]


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

    def leaks(self) -> list[str]:
        """Return every attribute (metric or span) that carries a full key, an owner or a
        token seen in this run: keys and owners with a ``:`` (a key without one has no
        family, and is recorded as ``other``), and every token."""
        secrets = (
            {k for k in self.keys if ":" in k} | {o for o in self.owners if ":" in o} | self.tokens
        )
        found: list[str] = []

        def look(where: str, attributes: Any) -> None:
            for name, value in (attributes or {}).items():
                text = str(value)
                if text in secrets or any(token in text for token in self.tokens):
                    found.append(f"{where}: {name}={text!r}")

        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        look(f"metric {metric.name}", point.attributes)
        for name, attributes in self.spans.attribute_sets:
            look(f"span {name}", dict(attributes))
        return found


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

    class _Spans(SpanProcessor):  # type: ignore[misc]
        """Keep the recent spans (for the tests to read) and every distinct (name,
        attributes) of the run (low-cardinality by design, so few), which the session's
        end checks for leaks."""

        def __init__(self) -> None:
            self.recent: deque[Any] = deque(maxlen=5000)
            self.attribute_sets: set[tuple[str, frozenset[tuple[str, Any]]]] = set()

        def on_start(self, span: Any, parent_context: Any = None) -> None:
            """Nothing to do when a span starts."""

        def on_end(self, span: Any) -> None:
            """Keep the finished span."""
            self.recent.append(span)
            self.attribute_sets.add((span.name, frozenset((span.attributes or {}).items())))

        def shutdown(self) -> None:
            """Nothing to flush."""

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            """Nothing to flush."""
            return True

        def finished(self, name: str) -> list[Any]:
            """Return the recent finished spans named ``name``."""
            return [span for span in self.recent if span.name == name]

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
