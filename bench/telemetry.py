"""What occupy's OpenTelemetry instrumentation costs: ``python -m bench telemetry``.

1. Uncontended acquire + release on Redis and on PostgreSQL, each variant in a process of
   its own (an SDK is set once per process): without instrumentation (occupy as if the
   ``opentelemetry-api`` package were absent), with the API installed and no SDK (the
   default for a user who installs the extra and configures nothing: target ≥ 0.98×),
   and with the SDK and an in-memory metric reader and span processor (target ≥ 0.9×).
   Rounds alternate between the processes, as :func:`bench.common.alternate` does.
2. The wait histogram of a contended run: eight processes under the SDK take one Redis
   key in a loop; their ``occupy.lock.wait.duration`` buckets are added up and drawn
   (``docs/images/telemetry-wait-histogram.png``, with matplotlib from the ``bench``
   extra) — the picture of the telemetry how-to, drawn from the exported metrics.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

from bench.common import Result, occupy_cycle, print_table, setup_django

VARIANTS = ["no instrumentation", "API, no SDK", "SDK, in-memory reader"]
OPS, ROUNDS = 2000, 5
CONTENDERS, CONTENDED_SECONDS, HOLD = 8, 6.0, 0.002

_ctx = multiprocessing.get_context("spawn")


def _instrument(variant: str) -> Any:
    """Set this process up as ``variant``; return the metric reader, if any."""
    from occupy import telemetry

    if variant == "no instrumentation":
        telemetry.instruments.otel_metrics = telemetry.instruments.otel_trace = None
        return None
    if variant == "API, no SDK":
        return None
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    provider = TracerProvider()
    provider.add_span_processor(SpanProcessor())  # spans are made, and dropped
    trace.set_tracer_provider(provider)
    return reader


def _timer(variant: str, alias: str, conn: Any) -> None:
    """Serve ``("run", ops)`` requests with the time of ``ops`` acquire + release pairs."""
    setup_django()
    _instrument(variant)
    run = occupy_cycle(f"bench-telemetry:{os.getpid()}", alias)
    run(100)  # warm-up
    while True:
        message = conn.recv()
        if message is None:
            return
        started = time.perf_counter()
        run(message)
        conn.send(time.perf_counter() - started)


def uncontended(alias: str) -> list[Result]:
    """Time each variant's acquire + release on ``alias``, rounds alternating."""
    pipes, procs = {}, []
    for variant in VARIANTS:
        parent, child = _ctx.Pipe()
        proc = _ctx.Process(target=_timer, args=(variant, alias, child))
        proc.start()
        pipes[variant] = parent
        procs.append(proc)
    rates: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    try:
        for _ in range(ROUNDS):
            for variant, conn in pipes.items():
                conn.send(OPS)
                rates[variant].append(OPS / conn.recv())
    finally:
        for conn in pipes.values():
            conn.send(None)
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    return [Result(variant, rates[variant]) for variant in VARIANTS]


def _contender(key: str, seconds: float, conn: Any) -> None:
    """Take ``key`` in a loop for ``seconds``; send the wait histogram's buckets."""
    setup_django()
    reader = _instrument("SDK, in-memory reader")
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


def contended_histogram() -> dict[float, int]:
    """Run the contended processes and return their wait buckets added up."""
    key = f"bench-telemetry-contended:{os.getpid()}"
    pipes, procs = [], []
    for _ in range(CONTENDERS):
        parent, child = _ctx.Pipe()
        proc = _ctx.Process(target=_contender, args=(key, CONTENDED_SECONDS, child))
        proc.start()
        pipes.append(parent)
        procs.append(proc)
    total: dict[float, int] = {}
    try:
        for conn in pipes:
            if not conn.poll(CONTENDED_SECONDS + 120):
                raise RuntimeError("a contending process did not answer")
            for bound, count in conn.recv().items():
                total[bound] = total.get(bound, 0) + count
    finally:
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    return dict(sorted(total.items()))


def draw(buckets: dict[float, int], path: Path) -> bool:
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
    axes.set_ylabel("acquires")
    axes.set_title(
        f"occupy.lock.wait.duration: {CONTENDERS} processes, one Redis key, "
        f"{HOLD * 1000:g} ms sections, {CONTENDED_SECONDS:g} s"
    )
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def main() -> None:
    """Run the telemetry benchmarks and print their tables."""
    setup_django()
    from django.conf import settings

    for alias, server in (("redis", "redis"), ("db-postgresql", "postgresql")):
        if server in settings.SKIPS:
            print(f"\n## telemetry on {alias}: skipped, {settings.SKIPS[server]}")
            continue
        print_table(
            f"telemetry cost: acquire + release on {alias}",
            uncontended(alias),
            reference="no instrumentation",
            target="API, no SDK ≥ 0.98×; SDK, in-memory reader ≥ 0.9×",
        )
    if "redis" in settings.SKIPS:
        return
    buckets = contended_histogram()
    print(
        f"\n## wait histogram, {CONTENDERS} processes on one Redis key "
        f"({sum(buckets.values())} acquires)"
    )
    for bound, count in buckets.items():
        print(f"  ≤ {bound:>8g} s  {count:>7}")
    image = Path(__file__).resolve().parent.parent / "docs/images/telemetry-wait-histogram.png"
    if draw(buckets, image):
        print(f"drawn: {image}")
    else:
        print("matplotlib is not installed (pip install -e '.[bench]'): not drawn")


if __name__ == "__main__":
    main()
