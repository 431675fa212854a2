"""What occupy's OpenTelemetry instrumentation costs: ``python -m bench telemetry``
(``--quick`` for a short run that shows it works; its figures mean little).

1. Uncontended acquire + release on Redis and on PostgreSQL, each variant in a process of
   its own (an SDK is set once per process), rounds alternating as
   :func:`bench.common.alternate` does: without instrumentation (occupy as if the
   ``opentelemetry-api`` package were absent), with the API and no SDK (target ≥ 0.98×),
   with the SDK, metrics and the default tracing (target ≥ 0.90× Redis, ≥ 0.93×
   PostgreSQL), and with every section traced (≥ 0.70×, ≥ 0.80×).
2. Beside each measured ratio, the ratio predicted from the SDK's own unit costs,
   measured during the same run: a histogram record and a span (start and end, through
   the batch processor), each made by a private SDK (not the global one) after every
   uninstrumented pair, against pairs alone (CPU time), rounds alternating, in the
   uninstrumented process (what the call costs *in* a lock path, where the SDK's code
   and data are no longer in the CPU's caches: about twice its cost in a loop of its
   own, which is also printed); and a collection of occupy's observable instruments (one
   per :data:`EXPORT_INTERVAL`, as the periodic reader does); times how many of each a
   pair made (read back from the SDK). What the measured ratio lacks of the predicted
   one is occupy's own share (target ≤ 3 %).
3. The wait histogram of a contended run: eight processes under the SDK take one Redis
   key in a loop; their ``occupy.lock.wait.duration`` buckets are added up and printed.
   ``--draw PATH`` also draws them into ``PATH`` (with matplotlib from the ``bench``
   extra); the picture of the telemetry how-to is drawn so, from a full run:
   ``python -m bench telemetry --draw docs/images/telemetry-wait-histogram.png``.
   Nothing is drawn without it, so a run leaves the checkout as it was.

The SDK's version is pinned by the ``bench`` extra (``pip install -e ".[bench]"``): its
unit costs change from one release to the next, so figures from another version are
said to be so.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import multiprocessing
import os
import re
import statistics
import time
from pathlib import Path
from typing import Any

from bench.common import Result, occupy_cycle, setup_django

NONE, API, SDK, EVERY = (
    "no instrumentation",
    "API, no SDK",
    "SDK, metrics + default tracing",
    "SDK, every section traced",
)
VARIANTS = [NONE, API, SDK, EVERY]
TARGETS = {
    "redis": {API: 0.98, SDK: 0.90, EVERY: 0.70},
    "db-postgresql": {API: 0.98, SDK: 0.93, EVERY: 0.80},
}
#: The periodic reader's default interval (seconds): one collection per interval.
EXPORT_INTERVAL = 60.0
CONTENDERS, HOLD = 8, 0.002
#: The key of the in-situ unit costs in :func:`uncontended`'s answer, and their rounds
#: (each times three runs of half the pairs of a round and two runs with a call each).
IN_SITU, IN_SITU_ROUNDS = "in situ", 3

_ctx = multiprocessing.get_context("spawn")


def pinned_sdk() -> str | None:
    """Return the SDK version the ``bench`` extra pins (``None`` if it cannot be read)."""
    try:
        requirements = importlib.metadata.requires("django-occupy") or []
    except importlib.metadata.PackageNotFoundError:
        requirements = []
    for requirement in requirements:
        found = re.match(
            r"opentelemetry-sdk\s*==\s*([\w.]+)\s*;.*extra\s*==\s*.bench.", requirement
        )
        if found:
            return found.group(1)
    return None


def installed_sdk() -> str | None:
    """Return the installed SDK's version, or ``None``."""
    try:
        return importlib.metadata.version("opentelemetry-sdk")
    except importlib.metadata.PackageNotFoundError:
        return None


def _instrument(variant: str) -> Any:
    """Set this process up as ``variant``; return the metric reader and the span
    counter, if any."""
    from occupy import telemetry

    if variant == NONE:
        telemetry.instruments.otel_metrics = telemetry.instruments.otel_trace = None
        return None
    if variant == API:
        return None
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    class Counted(SpanProcessor):  # type: ignore[misc]
        """Count the spans ended (to say how many a pair made)."""

        ended = 0

        def on_end(self, span: Any) -> None:
            Counted.ended += 1

    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_dropped()))
    provider.add_span_processor(Counted())
    trace.set_tracer_provider(provider)
    return reader, Counted


def _dropped() -> Any:
    """Return a span exporter that exports nowhere: what is measured is the SDK's work
    in the lock path."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class Dropped(SpanExporter):  # type: ignore[misc]
        def export(self, spans: Any) -> Any:
            return SpanExportResult.SUCCESS

    return Dropped()


def _in_situ(key: str, alias: str, ops: int, rounds: int) -> dict[str, float]:
    """Return what a histogram record and a span cost (seconds) each made after an
    uninstrumented acquire + release, by a private SDK that occupy does not see: the
    median over rounds of (pairs with one call each − pairs alone) / ``ops`` in this
    thread's CPU time, the pairs alone timed before and after, so that a machine that
    changes speed moves both."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace import SpanKind

    import occupy
    from occupy.telemetry.instruments import SECONDS_BUCKETS

    meter = MeterProvider(metric_readers=[InMemoryMetricReader()]).get_meter("bench")
    histogram = meter.create_histogram(
        "bench.unit", unit="s", explicit_bucket_boundaries_advisory=list(SECONDS_BUCKETS)
    )
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_dropped()))
    tracer = provider.get_tracer("bench")
    attributes = {"a.backend": alias, "a.family": "f"}  # as occupy's hold of a release
    started = time.time_ns()

    def record() -> None:
        histogram.record(0.001, attributes)

    def span() -> None:
        tracer.start_span(
            "bench", kind=SpanKind.INTERNAL, attributes=attributes, start_time=started
        ).end()

    acquire, release = occupy.acquire, occupy.release

    def pairs(then: Any) -> float:
        # CPU time of this thread: a call's cost is CPU work, and the waits for the store
        # and the neighbours' turns on the CPU would only add noise to a difference.
        began = time.thread_time()
        for _ in range(ops):
            release(acquire(key, owner="bench", ttl=60, timeout=0, backend=alias))
            then()
        return (time.thread_time() - began) / ops

    def nothing() -> None:
        return None

    found: dict[str, list[float]] = {"record": [], "span": []}
    for _ in range(rounds):
        for name, call in (("record", record), ("span", span)):
            before, with_call, after = pairs(nothing), pairs(call), pairs(nothing)
            found[name].append(with_call - (before + after) / 2)
    provider.shutdown()
    return {name: max(statistics.median(values), 0.0) for name, values in found.items()}


def _configure(variant: str) -> None:
    from django.conf import settings
    from django.test.utils import override_settings

    every = variant == EVERY
    override_settings(
        OCCUPY={**settings.OCCUPY, "TELEMETRY": {"TRACE_EVERY_SECTION": every}}
    ).enable()


def _best(fn: Any, calls: int, repeats: int = 5) -> float:
    """Return the median time of one ``fn()`` over ``repeats`` runs of ``calls``."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - started) / calls)
    return statistics.median(times)


def _records(reader: Any) -> int:
    total = 0
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            if scope.scope.name != "occupy":
                continue
            for metric in scope.metrics:
                if metric.name.endswith(".duration"):
                    total += sum(point.count for point in metric.data.data_points)
    return total


def _units(sdk: Any, run: Any, ops: int) -> dict[str, float]:
    """Return the SDK's unit costs here (seconds) and the records and spans of a pair."""
    if sdk is None:
        return {}
    reader, counted = sdk
    from opentelemetry import metrics, trace
    from opentelemetry.trace import SpanKind

    records, spans = _records(reader), counted.ended
    run(ops)
    records, spans = _records(reader) - records, counted.ended - spans
    histogram = metrics.get_meter("bench").create_histogram("bench.unit", unit="s")
    attributes = {"a.backend": "redis", "a.family": "f"}  # as occupy's hold of a release
    tracer = trace.get_tracer("bench")
    started = time.time_ns()

    def span() -> None:
        tracer.start_span(
            "bench", kind=SpanKind.INTERNAL, attributes=attributes, start_time=started
        ).end()

    calls = max(ops, 500)
    return {
        "record": _best(lambda: histogram.record(0.001, attributes), calls),
        "span": _best(span, calls),
        "collect": _best(reader.get_metrics_data, 20),
        "records": records / ops,
        "spans": spans / ops,
    }


def _timer(variant: str, alias: str, conn: Any) -> None:
    """Serve ``("run", ops)`` with the time of ``ops`` acquire + release pairs, and
    ``("units", ops)`` with the SDK's unit costs here."""
    setup_django()
    sdk = _instrument(variant)
    _configure(variant)
    key = f"bench-telemetry:{os.getpid()}"
    run = occupy_cycle(key, alias)
    run(100)  # warm-up
    while True:
        message = conn.recv()
        if message is None:
            return
        what, ops = message
        if what == "run":
            started = time.perf_counter()
            run(ops)
            conn.send(time.perf_counter() - started)
        elif what == "in-situ":
            conn.send(_in_situ(key, alias, max(ops // 2, 100), IN_SITU_ROUNDS))
        else:
            conn.send(_units(sdk, run, ops))


def uncontended(
    alias: str, ops: int, rounds: int, sets: int = 1
) -> tuple[list[Result], dict[str, Any]]:
    """Time each variant's acquire + release on ``alias``, rounds alternating, in
    ``sets`` sets of fresh processes; return the results (every round of every set) and
    each variant's unit costs (their medians over the sets). A process's memory layout
    moves its figures by several percent for its whole life, which more rounds in the
    same processes cannot average out; new processes can."""
    rates: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    measured: list[dict[str, Any]] = []
    for _ in range(sets):
        measured.append(_one_set(alias, ops, rounds, rates))
    units = {
        name: {
            field: statistics.median(each[name][field] for each in measured)
            for field in measured[0][name]
        }
        for name in measured[0]
    }
    return [Result(variant, rates[variant]) for variant in VARIANTS], units


def _one_set(alias: str, ops: int, rounds: int, rates: dict[str, list[float]]) -> dict[str, Any]:
    """Run one set of processes (one per variant): add their rounds' rates to
    ``rates``; return their unit costs."""
    pipes, procs = {}, []
    for variant in VARIANTS:
        parent, child = _ctx.Pipe()
        proc = _ctx.Process(target=_timer, args=(variant, alias, child))
        proc.start()
        pipes[variant] = parent
        procs.append(proc)
    units: dict[str, Any] = {}
    try:
        for number in range(rounds):
            # Each round starts with another variant: the first of a round runs after
            # the server and the caches served the last one, and must not always be the
            # same variant.
            shift = number % len(VARIANTS)
            for variant in VARIANTS[shift:] + VARIANTS[:shift]:
                pipes[variant].send(("run", ops))
                rates[variant].append(ops / pipes[variant].recv())
        for variant, conn in pipes.items():
            conn.send(("units", ops))
            found = conn.recv()
            if found:
                units[variant] = found
        pipes[NONE].send(("in-situ", ops))
        units[IN_SITU] = pipes[NONE].recv()
    finally:
        for conn in pipes.values():
            conn.send(None)
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    return units


def predicted(reference: Result, cost: dict[str, float], in_situ: dict[str, float]) -> float:
    """Return the ratio to ``reference`` that the SDK's unit costs alone predict: its
    records and spans at their cost in a lock path (``in_situ``), its collections."""
    if not cost:
        return 1.0
    pair = 1 / reference.rate
    sdk = cost["records"] * in_situ["record"] + cost["spans"] * in_situ["span"]
    sdk += cost["collect"] / (EXPORT_INTERVAL * reference.rate)  # one collection a minute
    return pair / (pair + sdk)


def report(alias: str, results: list[Result], units: dict[str, Any]) -> None:
    """Print each variant's measured and predicted ratio, and occupy's own share."""
    reference = results[0]
    targets = TARGETS[alias]
    print(f"\n## telemetry cost: acquire + release on {alias}")
    print(
        "target: "
        + "; ".join(f"{name} ≥ {value:.2f}×" for name, value in targets.items())
        + "; occupy's own share ≤ 3 %"
    )
    width = max(len(r.name) for r in results)
    for result in results:
        ratios = result.ratios(reference)
        measured = result.ratio(reference)
        line = (
            f"  {result.name.ljust(width)}  {result.rate:>9,.0f} pairs/s  "
            f"{measured:5.2f}× ({min(ratios):.2f}–{max(ratios):.2f})"
        )
        if result is not reference:
            expected = predicted(reference, units.get(result.name, {}), units[IN_SITU])
            line += f"  predicted {expected:5.2f}×  occupy's own {expected / measured - 1:+6.1%}"
        print(line)
    in_situ = units[IN_SITU]
    print(
        f"  after a pair: a record {in_situ['record'] * 1e6:.1f} µs, a span "
        f"{in_situ['span'] * 1e6:.1f} µs (the costs predicted from)"
    )
    for variant in (SDK, EVERY):
        cost = units.get(variant)
        if cost:
            print(
                f"  {variant}: in a loop, a record {cost['record'] * 1e6:.1f} µs, a span "
                f"{cost['span'] * 1e6:.1f} µs, a collection {cost['collect'] * 1e6:.0f} µs; "
                f"per pair {cost['records']:.2f} records, {cost['spans']:.2f} spans"
            )


def _contender(key: str, seconds: float, conn: Any) -> None:
    """Take ``key`` in a loop for ``seconds``; send the wait histogram's buckets."""
    setup_django()
    reader, _counted = _instrument(SDK)
    import occupy

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with occupy.lock(key, ttl=10, timeout=10, backend="redis"):
            time.sleep(HOLD)
    buckets: dict[float, int] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != "occupy.lock.wait.duration":
                    continue
                for point in metric.data.data_points:
                    bounds = [*point.explicit_bounds, float("inf")]
                    for bound, count in zip(bounds, point.bucket_counts, strict=True):
                        buckets[bound] = buckets.get(bound, 0) + count
    conn.send(buckets)


def contended_histogram(seconds: float) -> dict[float, int]:
    """Run the contended processes and return their wait buckets added up."""
    key = f"bench-telemetry-contended:{os.getpid()}"
    pipes, procs = [], []
    for _ in range(CONTENDERS):
        parent, child = _ctx.Pipe()
        proc = _ctx.Process(target=_contender, args=(key, seconds, child))
        proc.start()
        pipes.append(parent)
        procs.append(proc)
    total: dict[float, int] = {}
    try:
        for conn in pipes:
            if not conn.poll(seconds + 120):
                raise RuntimeError("a contending process did not answer")
            for bound, count in conn.recv().items():
                total[bound] = total.get(bound, 0) + count
    finally:
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    return dict(sorted(total.items()))


def draw(buckets: dict[float, int], path: Path, seconds: float) -> bool:
    """Draw the buckets as bars; return False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    labels = [f"≤{bound * 1000:g} ms" if bound != float("inf") else "more" for bound in buckets]
    figure, axes = plt.subplots(figsize=(9, 3.6))
    axes.bar(range(len(buckets)), list(buckets.values()), color="#4c72b0")
    axes.set_xticks(range(len(buckets)), labels, rotation=45, ha="right", fontsize=8)
    axes.set_ylabel("acquires that waited")
    axes.set_title(
        f"occupy.lock.wait.duration: {CONTENDERS} processes, one Redis key, "
        f"{HOLD * 1000:g} ms sections, {seconds:g} s"
    )
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def main(argv: list[str] | None = None) -> None:
    """Run the telemetry benchmarks and print their tables."""
    parser = argparse.ArgumentParser(
        prog="python -m bench telemetry",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="a short run that shows it works")
    parser.add_argument(
        "--draw",
        type=Path,
        default=None,
        metavar="PATH",
        help="draw the wait histogram into PATH, a PNG (default: draw nothing); the "
        "how-to's is docs/images/telemetry-wait-histogram.png, from a full run",
    )
    options = parser.parse_args(argv or [])
    ops, rounds, sets, seconds = (300, 2, 1, 2.0) if options.quick else (2000, 5, 3, 6.0)
    setup_django()
    from django.conf import settings

    pin, found = pinned_sdk(), installed_sdk()
    print(f"\nopentelemetry-sdk {found} (the bench extra pins {pin})")
    if pin is not None and found != pin:
        print("  not the pinned version: its unit costs, and so these figures, differ")
    if options.quick:
        print("  --quick: a few rounds, to show the bench works; its figures mean little")
    for alias, server in (("redis", "redis"), ("db-postgresql", "postgresql")):
        if server in settings.SKIPS:
            print(f"\n## telemetry on {alias}: skipped, {settings.SKIPS[server]}")
            continue
        report(alias, *uncontended(alias, ops, rounds, sets))
    if "redis" in settings.SKIPS:
        return
    buckets = contended_histogram(seconds)
    print(
        f"\n## wait histogram, {CONTENDERS} processes on one Redis key "
        f"({sum(buckets.values())} acquires that waited)"
    )
    for bound, count in buckets.items():
        print(f"  ≤ {bound:>8g} s  {count:>7}")
    if options.draw is None:
        return
    if draw(buckets, options.draw, seconds):
        print(f"drawn: {options.draw}")
    else:
        print("matplotlib is not installed (pip install -e '.[bench]'): not drawn")


if __name__ == "__main__":
    main()
