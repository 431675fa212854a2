"""1. Acquire + release latency against the number of live claims held on other keys.

Each pair is ``occupy.acquire`` then ``occupy.release`` of a free key
(``scale:probe:<i>``), timed; rounds alternate between stores and sizes.

- The databases and the file backend hold every size at once, each size in stores of
  its own (:mod:`bench.scale.settings`), so their rounds alternate between sizes too:
  a machine whose speed drifts slows every size alike. Each size's backend first
  works on a table of the smallest size (PostgreSQL prepares its statements then, as
  in an application whose table grows), then its table is filled to its size.
- Redis and the cache backend share one Redis database, so their sizes come in
  stages: the smallest, each larger one, then the smallest again (emptied and filled
  anew); their baseline pools both stages of the smallest size, which bracket the
  large ones in time.

Target (databases and Redis): median and p99 at the largest size within 1.2× of those
at the smallest. The hot statements' plans at the largest size are written to
``scale-explain.txt``.
"""

from __future__ import annotations

import time
from typing import Any

from bench.scale.report import Panel, Report, median, percentile
from bench.scale.stores import DatabaseStore, Store, available_stores

__all__ = ["run"]

#: Stores held to the 1.2× target; the file backend is reported as it is.
TARGETED = ("PostgreSQL", "MariaDB", "SQLite", "Redis", "cache (django-redis)")
TARGET = 1.2
#: The stage of the smallest size measured again at the end (shared stores only).
AGAIN = -1


def probe(store: Store, ops: int) -> list[float]:
    """Return the latency (µs) of ``ops`` acquire + release pairs on free keys."""
    import occupy

    acquire, release, clock = occupy.acquire, occupy.release, time.perf_counter_ns
    alias = store.alias
    out = []
    for i in range(ops):
        started = clock()
        release(acquire(f"scale:probe:{i}", ttl=60, timeout=0, backend=alias))
        out.append((clock() - started) / 1000)
    return out


class Figures:
    """What part 1 measured, by (store label, stage); a stage is a size's index, or
    :data:`AGAIN`."""

    def __init__(self) -> None:
        self.samples: dict[tuple[str, int], list[float]] = {}
        self.round_medians: dict[tuple[str, int], list[float]] = {}
        #: CPU seconds and pairs: in this thread, and on the server (where it can say).
        self.cpu: dict[tuple[str, int], list[float]] = {}
        self.footprints: dict[tuple[str, int], dict[str, float]] = {}
        self.fill_seconds: dict[tuple[str, int], float] = {}
        self.server_means: dict[str, str] = {}

    def measure(self, store: Store, stage: int, ops: int) -> None:
        server_before = store.server_cpu()
        client_before = time.thread_time()
        got = probe(store, ops)
        client = time.thread_time() - client_before
        server_after = store.server_cpu()
        server = (
            float("nan")
            if server_before is None or server_after is None
            else server_after - server_before
        )
        self.samples.setdefault((store.name, stage), []).extend(got)
        self.round_medians.setdefault((store.name, stage), []).append(median(got))
        totals = self.cpu.setdefault((store.name, stage), [0.0, 0.0, 0.0])
        totals[0] += client
        totals[1] += server
        totals[2] += ops
        self.server_means[store.name] = store.server_cpu_means

    def fill(self, store: Store, stage: int, size: int) -> None:
        started = time.perf_counter()
        if store.claims > size:
            store.clear()
        store.fill(size - store.claims)
        self.fill_seconds[store.name, stage] = (
            self.fill_seconds.get((store.name, stage), 0.0) + time.perf_counter() - started
        )


def run(
    report: Report, stores: list[Store], sizes: list[int], *, rounds: int, ops: int
) -> dict[str, Any]:
    """Measure every store at every size; print, write and plot the figures."""
    figures = Figures()
    wanted = [s.alias for s in stores]
    slotted = [available_stores(wanted, slot) for slot in range(len(sizes))]
    shared = [s for s in stores if not any(s.name == t.name for t in slotted[0])]
    for store in stores:  # warm this process's code paths before any figure counts
        store.clear()
        probe(store, 300)
    # Redis first: the databases' fills leave their servers busy for a while (flushing,
    # a checkpoint), which would fall on one Redis stage and not the others.
    _staged(figures, shared, sizes, rounds, ops)
    _alternating(report, figures, slotted, sizes, rounds, ops)
    order = [s.name for s in stores]
    return _summarize(report, order, sizes, figures)


def _alternating(
    report: Report,
    figures: Figures,
    slotted: list[list[Store]],
    sizes: list[int],
    rounds: int,
    ops: int,
) -> None:
    """Every size at once, in stores of its own; rounds alternate between sizes."""
    if not slotted[0]:
        return
    _fill_slots(figures, slotted, sizes, ops)
    order = [(stage, store) for stage, slot in enumerate(slotted) for store in slot]
    for r in range(rounds):
        # Each round starts at another place in the order, so that no size or store is
        # always first after the same neighbour.
        shift = r * len(order) // rounds
        for stage, store in order[shift:] + order[:shift]:
            figures.measure(store, stage, ops)
    for stage, store in order:
        figures.footprints[store.name, stage] = store.footprint()
    explain(report, slotted[-1])
    for _, store in order:
        store.clear()


def _fill_slots(figures: Figures, slotted: list[list[Store]], sizes: list[int], ops: int) -> None:
    """Fill each slot's stores to its size, after a probe of every store while small."""
    for slot in slotted:
        for store in slot:
            store.clear()
            figures.fill(store, 0, sizes[0])
            probe(store, min(ops, 100))  # connections and prepared statements, small table
    for stage, slot in enumerate(slotted):
        for store in slot:
            figures.fill(store, stage, sizes[stage])
            probe(store, min(ops, 100))  # warm the caches after the fill
            print(
                f"  live claims: {store.name} at {sizes[stage]:,} "
                f"(filled in {figures.fill_seconds[store.name, stage]:.0f} s)",
                flush=True,
            )


def _staged(figures: Figures, stores: list[Store], sizes: list[int], rounds: int, ops: int) -> None:
    """One size at a time (one Redis database), then the smallest again."""
    if not stores:
        return
    for store in stores:  # whatever an interrupted run left
        store.clear()
    for stage, size in [*enumerate(sizes), (AGAIN, sizes[0])]:
        for store in stores:
            figures.fill(store, stage, size)
            probe(store, min(ops, 100))
        for r in range(rounds):
            for store in stores[r % len(stores) :] + stores[: r % len(stores)]:
                figures.measure(store, stage, ops)
        if stage != AGAIN:
            for store in stores:
                figures.footprints[store.name, stage] = store.footprint()
        fills = ", ".join(f"{figures.fill_seconds[s.name, stage]:.0f} s" for s in stores)
        print(
            f"  live claims: {', '.join(s.name for s in stores)} at {size:,} (fills: {fills})",
            flush=True,
        )
    for store in stores:
        store.clear()


def _summarize(
    report: Report, order: list[str], sizes: list[int], figures: Figures
) -> dict[str, Any]:
    samples = figures.samples
    last = len(sizes) - 1
    rows, csv_rows, verdicts = [], [], {}
    med_panel = Panel("median acquire + release (ms)", logy=True)
    p99_panel = Panel("p99 acquire + release (ms)", logy=True)
    for name in order:
        stages = [*range(len(sizes)), *([AGAIN] if (name, AGAIN) in samples else [])]
        base = [v for stage in (0, AGAIN) for v in samples.get((name, stage), [])]
        base_median, base_p99 = median(base), percentile(base, 99)
        cells: list[Any] = [name]
        for stage in stages:
            got = samples[name, stage]
            m, p = median(got), percentile(got, 99)
            cells.append(f"{m / 1000:.2f} / {p / 1000:.2f}")
            spread = figures.round_medians[name, stage]
            size = sizes[0] if stage == AGAIN else sizes[stage]
            csv_rows.append(
                [
                    name,
                    size,
                    "again" if stage == AGAIN else "",
                    len(got),
                    f"{m:.1f}",
                    f"{p:.1f}",
                    f"{min(spread):.1f}",
                    f"{max(spread):.1f}",
                    f"{figures.fill_seconds.get((name, stage), 0.0):.1f}",
                ]
            )
            if stage != AGAIN:
                med_panel.add(name, size, m / 1000)
                p99_panel.add(name, size, p / 1000)
        if AGAIN not in stages:
            cells.append("(alternating)")
        top = samples[name, last]
        ratio_m, ratio_p = median(top) / base_median, percentile(top, 99) / base_p99
        met = (
            "–"
            if name not in TARGETED
            else ("met" if max(ratio_m, ratio_p) <= TARGET else "MISSED")
        )
        verdicts[name] = (ratio_m, ratio_p, met)
        rows.append([*cells, f"{ratio_m:.2f}×", f"{ratio_p:.2f}×", met])
    header = [
        "store",
        *(f"{s:,}" for s in sizes),
        f"{sizes[0]:,} again",
        "median ratio",
        "p99 ratio",
        f"≤ {TARGET}×",
    ]
    report.table(
        f"1. Acquire + release latency (ms, median / p99) against live claims on other "
        f"keys; ratios {sizes[-1]:,} / {sizes[0]:,}",
        header,
        rows,
        notes=[
            f"target: median and p99 at {sizes[-1]:,} within {TARGET}× of {sizes[0]:,} "
            "(databases and Redis); the file backend is reported as it is",
            "databases and files: every size at once, rounds alternating between sizes; "
            f"Redis and cache: sizes in stages, {sizes[0]:,} measured before and after "
            "and pooled",
        ],
    )
    report.csv(
        "scale-live-claims",
        [
            "store",
            "live_claims",
            "stage",
            "pairs",
            "median_us",
            "p99_us",
            "round_median_min_us",
            "round_median_max_us",
            "fill_seconds",
        ],
        csv_rows,
    )
    report.plot(
        "scale-live-claims",
        "1. acquire + release latency against live claims held on other keys",
        "live claims on other keys",
        [med_panel, p99_panel],
        xticks=sizes,
    )
    _cpu_table(report, order, sizes, figures)
    _footprint_table(report, order, sizes, figures.footprints)
    return {"verdicts": verdicts, "footprints": figures.footprints}


def _cpu_table(report: Report, order: list[str], sizes: list[int], figures: Figures) -> None:
    """CPU per pair: steadier than latency on a shared machine."""
    rows, csv_rows = [], []
    panel = Panel("CPU µs per acquire + release (client + server)", logy=True)
    for name in order:
        cells: list[Any] = [name]
        for stage, size in enumerate(sizes):
            client, server, ops = figures.cpu[name, stage]
            if stage == 0 and (name, AGAIN) in figures.cpu:  # both stages of the first size
                client, server, ops = (
                    a + b
                    for a, b in zip(figures.cpu[name, stage], figures.cpu[name, AGAIN], strict=True)
                )
            c, s = client / ops * 1e6, server / ops * 1e6
            cells.append(f"{c:.0f} + {s:.0f}" if s == s else f"{c:.0f}")
            csv_rows.append([name, size, f"{c:.1f}", "" if s != s else f"{s:.1f}"])
            panel.add(name, size, c + (s if s == s else 0.0))
        first, last = panel.series[name][0][1], panel.series[name][-1][1]
        cells += [f"{last / first:.2f}×", figures.server_means.get(name, "")]
        rows.append(cells)
    report.table(
        "1b. CPU per acquire + release (µs, client + server) against live claims",
        [
            "store",
            *(f"{s:,}" for s in sizes),
            f"{sizes[-1]:,} / {sizes[0]:,}",
            "server CPU counted",
        ],
        rows,
        notes=[
            "client: this thread (SQLite and files do all their work here); "
            "steadier than latency when neighbours load the machine"
        ],
    )
    report.csv(
        "scale-live-claims-cpu",
        ["store", "live_claims", "client_cpu_us", "server_cpu_us"],
        csv_rows,
    )
    report.plot(
        "scale-live-claims-cpu",
        "1b. CPU per acquire + release against live claims (client + server where counted)",
        "live claims on other keys",
        [panel],
        xticks=sizes,
    )


def _footprint_table(
    report: Report,
    order: list[str],
    sizes: list[int],
    footprints: dict[tuple[str, int], dict[str, float]],
) -> None:
    rows, csv_rows = [], []
    panel = Panel("bytes per live claim")
    for name in order:
        for stage, size in enumerate(sizes):
            figures = footprints[name, stage]
            for part, value in figures.items():
                csv_rows.append([name, size, part, f"{value:.1f}"])
            headline = figures.get("total", figures.get("keys", float("nan")))
            panel.add(name, size, headline)
        top = footprints[name, len(sizes) - 1]
        rows.append([name, ", ".join(f"{part} {value:,.0f}" for part, value in top.items())])
    report.table(
        f"4a. Footprint per live claim at {sizes[-1]:,} claims (bytes)",
        ["store", "bytes per claim"],
        rows,
        notes=[
            "databases: table and indexes / rows; Redis: MEMORY USAGE of a "
            "claim's keys (sampled) and used_memory growth / claims; files: "
            "disk blocks of a claim file and the directory's size / claims"
        ],
    )
    report.csv(
        "scale-footprint-claims", ["store", "live_claims", "part", "bytes_per_claim"], csv_rows
    )
    report.plot(
        "scale-footprint-claims",
        "4. bytes per live claim (databases: table + "
        "indexes; Redis: MEMORY USAGE; files: blocks + directory)",
        "live claims",
        [panel],
        xticks=sizes,
    )


def explain(report: Report, stores: list[Store]) -> None:
    """Write the plans of the grant, release and queue statements, as the backends run them,
    at the current size, to ``scale-explain.txt``."""
    from occupy.backends import get_backend
    from occupy.backends.claims import digest

    lines = [f"# {report.machine}", ""]
    d = digest("scale:probe:0")
    for store in stores:
        if not isinstance(store, DatabaseStore):
            continue
        backend: Any = get_backend(store.alias)
        dialect = backend.store.dialect
        grant = dialect.grant_if_free()
        grant_params = [
            *dialect.guard_params("scale:probe:0", None),
            "scale:probe:0",
            d,
            d,
            None,
            None,
            "explain",
            "t" * 32,
            dialect.seconds(60),
            d,
        ]
        statements = [
            ("grant_if_free", grant, grant_params),
            ("release", dialect.release(), [d, "t" * 32]),
            ("queue_position", dialect.queue_position(), [d, 2**62, d]),
            ("sweep batch", dialect.sweep_batches()[0], [1000]),
        ]
        if store.vendor == "postgresql":
            statements[1] = ("release (and wake)", dialect.release_and_wake(), [d, "t" * 32])
        lines.append(f"## {store.name}, {store.rows():,} rows")
        for name, sql, params in statements:
            lines.append(f"### {name}")
            lines += _plan(store, sql, params)
            lines.append("")
    path = report.out / "scale-explain.txt"
    path.write_text("\n".join(lines) + "\n")
    report.written.append(path)


def _plan(store: DatabaseStore, sql: str, params: list[Any]) -> list[str]:
    """Return the plan of ``sql``: on PostgreSQL run (EXPLAIN ANALYZE, rolled back) both
    as planned for these values and as the generic plan a prepared statement keeps."""
    from django.db import connections, transaction

    connection = connections[store.database]
    out: list[str] = []
    if store.vendor == "postgresql":
        with transaction.atomic(using=store.database), connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {sql}", params)
            out += ["custom plan:"] + [f"  {row[0]}" for row in cursor.fetchall()]
            cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            numbered = sql
            for i in range(1, len(params) + 1):
                numbered = numbered.replace("%s", f"${i}", 1)
            cursor.execute(f"PREPARE scale_plan AS {numbered}")
            literal = ", ".join("NULL" if p is None else f"'{p}'" for p in params)
            cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE scale_plan({literal})")
            out += ["generic plan (what a prepared statement keeps):"]
            out += [f"  {row[0]}" for row in cursor.fetchall()]
            cursor.execute("DEALLOCATE scale_plan")
            transaction.set_rollback(True, using=store.database)
    elif store.vendor == "mysql":
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN {sql}", params)
            names = [c[0] for c in cursor.description]
            out += [f"  {dict(zip(names, row, strict=True))}" for row in cursor.fetchall()]
    else:
        from occupy.backends.claims import now_us

        connection.ensure_connection()
        # The clock the SQLite dialect gives the backend's own connections.
        connection.connection.create_function("occupy_clock_us", 0, now_us)
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
            out += [f"  {row[-1]}" for row in cursor.fetchall()]
    return out
