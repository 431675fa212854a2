"""3. Many keys: 1, 2, 4 and 8 processes on 10,000 distinct keys.

Each process takes and releases its own share of the keys in turn (``timeout=0``:
they never meet), for a fixed time; rounds alternate between stores and process
counts. Figures: acquire + release pairs per second, all processes together, against
the single process's (the median of round-by-round ratios), and the CPU each pair
costs: in the client (the worker threads' CPU time) and in the store's server (on
PostgreSQL each connection's own server process; MariaDB and Redis as whole server
processes, so work for anyone else on the same servers counts too; SQLite and the
file backend work inside the client).
"""

from __future__ import annotations

import time
from typing import Any

from bench.scale.report import Panel, Report, median
from bench.scale.stores import Store, cpu_seconds
from bench.scale.workers import Pool, start_at

__all__ = ["run"]


def keys_loop(
    worker: int, alias: str, workers: int, keys: int, start: float, stop: float
) -> tuple[int, float, float, float | None, int]:
    """Take and release this worker's share of ``keys`` until ``stop``; return pairs,
    elapsed seconds, client CPU seconds, server CPU seconds (PostgreSQL) and how many
    acquires were refused (``StoreUnavailable`` on a key nobody else takes: SQLite's
    file stayed write-locked by another process for the whole wait)."""
    import occupy
    from occupy.backends import get_backend

    mine = [f"scale:keys:{j}" for j in range(worker, keys, workers)]
    acquire, release = occupy.acquire, occupy.release
    for key in mine[:20]:  # connect (and prepare) before the clock starts
        release(acquire(key, ttl=60, timeout=0, backend=alias))
    server_pid = _server_pid(get_backend(alias))
    time.sleep(max(0.0, start - time.monotonic()))
    server_before = None if server_pid is None else cpu_seconds(server_pid)
    client_before, began = time.thread_time(), time.monotonic()
    pairs = refused = 0
    clock = time.monotonic
    while clock() < stop:
        for key in mine:
            try:
                lease = acquire(key, ttl=60, timeout=0, backend=alias)
            except occupy.StoreUnavailable:
                refused += 1  # SQLite: the write lock stayed with another process
                continue
            release(lease)
            pairs += 1
            if not pairs % 16 and clock() >= stop:
                break
    elapsed = time.monotonic() - began
    client = time.thread_time() - client_before
    server = (
        None
        if server_pid is None or server_before is None
        else cpu_seconds(server_pid) - server_before
    )
    return pairs, elapsed, client, server, refused


def _server_pid(backend: Any) -> int | None:
    """Return the PostgreSQL server process of this thread's backend connection."""
    store = getattr(backend, "store", None)  # a database backend's: its dialect, its statements
    dialect = getattr(store, "dialect", None)
    if dialect is None or dialect.vendor != "postgresql":
        return None
    return int(store.execute("SELECT pg_backend_pid()", [])[1][0][0])


def run(report: Report, stores: list[Store], sizes: Any) -> None:
    """Measure every store with every process count; print, write and plot."""
    counts = list(sizes.processes)
    pool = Pool(max(counts), 1, [s.alias for s in stores])
    figures: dict[tuple[str, int], list[dict[str, float]]] = {}
    try:
        first = True
        for _ in range(sizes.keys_rounds):
            for store in stores:
                for n in counts:
                    start = start_at(8.0 if first else 0.5)
                    first = False
                    stop = start + sizes.keys_seconds
                    pids = store.server_pids()
                    before = sum(cpu_seconds(pid) for pid in pids)
                    results, _ = pool.run(
                        keys_loop, n, store.alias, n, sizes.distinct_keys, start, stop
                    )
                    server = sum(cpu_seconds(pid) for pid in pids) - before if pids else None
                    pairs = sum(r[0] for r in results.values())
                    elapsed = max(r[1] for r in results.values())
                    client = sum(r[2] for r in results.values())
                    if any(r[3] is not None for r in results.values()):
                        server = sum(r[3] or 0.0 for r in results.values())
                    figures.setdefault((store.name, n), []).append(
                        {
                            "refused": sum(r[4] for r in results.values()),
                            "rate": pairs / elapsed,
                            "client_us": client / pairs * 1e6,
                            "server_us": float("nan") if server is None else server / pairs * 1e6,
                        }
                    )
            print("  many keys: a round of every store and process count done", flush=True)
    finally:
        pool.close()
    _summarize(report, stores, counts, figures, sizes)


def _summarize(
    report: Report,
    stores: list[Store],
    counts: list[int],
    figures: dict[tuple[str, int], list[dict[str, float]]],
    sizes: Any,
) -> None:
    rows, csv_rows = [], []
    ratio_panel = Panel("throughput × one process")
    rate_panel = Panel("acquire + release pairs/s", logy=True)
    cpu_panel = Panel("server CPU µs per pair", logy=True)
    for store in stores:
        single = figures[store.name, counts[0]]
        for n in counts:
            got = figures[store.name, n]
            rates = [g["rate"] for g in got]
            ratios = [g["rate"] / s["rate"] for g, s in zip(got, single, strict=True)]
            rate, ratio = median(rates), median(ratios)
            client = median([g["client_us"] for g in got])
            server = median([g["server_us"] for g in got])
            refused = sum(int(g["refused"]) for g in got)
            rows.append(
                [
                    store.name,
                    n,
                    rate,
                    f"{ratio:.2f}× ({min(ratios):.2f}–{max(ratios):.2f})",
                    client,
                    server,
                    refused or "",
                ]
            )
            csv_rows.append(
                [
                    store.name,
                    n,
                    f"{rate:.1f}",
                    f"{ratio:.3f}",
                    f"{min(ratios):.3f}",
                    f"{max(ratios):.3f}",
                    f"{client:.1f}",
                    f"{server:.1f}",
                    refused,
                ]
            )
            ratio_panel.add(store.name, n, ratio)
            rate_panel.add(store.name, n, rate)
            cpu_panel.add(store.name, n, server)
    report.table(
        f"3. Many keys: processes on {sizes.distinct_keys:,} distinct keys, "
        f"{sizes.keys_rounds} rounds of {sizes.keys_seconds:g} s",
        [
            "store",
            "processes",
            "pairs/s",
            "× one process (spread)",
            "client CPU µs/pair",
            "server CPU µs/pair",
            "refused",
        ],
        rows,
        notes=[
            "server CPU: PostgreSQL per connection; MariaDB and Redis whole server "
            "processes (others' work included); SQLite and files run in the client",
            "refused: acquires with timeout=0 of a key no other process takes that "
            "raised StoreUnavailable (SQLite: the file stayed write-locked by another "
            "process)",
        ],
    )
    report.csv(
        "scale-many-keys",
        [
            "store",
            "processes",
            "pairs_per_s",
            "ratio_to_one",
            "ratio_min",
            "ratio_max",
            "client_cpu_us_per_pair",
            "server_cpu_us_per_pair",
            "refused",
        ],
        csv_rows,
    )
    report.plot(
        "scale-many-keys",
        f"3. many keys: processes on {sizes.distinct_keys:,} distinct keys",
        "processes",
        [ratio_panel, rate_panel, cpu_panel],
        logx=False,
        xticks=counts,
    )
