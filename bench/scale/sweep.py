"""5. ``sweep_locks`` against the number of expired claims, on every database.

For each size (ascending; the databases alternate within a size): the table holds
1,000 live claims and ``n`` expired ones (``tests.support.bulk_claims.insert_claims``), then
``manage.py sweep_locks --backend <backend>`` runs in this process; then the same rows are
made again and deleted by one bare ``DELETE`` (the floor). Figures: rows deleted per
second, that rate against the floor's, and memory while the sweep runs: the growth of
the process's peak resident memory (``VmHWM``, reset first) and the ``tracemalloc``
peak. Targets: memory flat whatever the backlog (batches of 10,000, never a row loaded
into Python); the rate at the largest backlog within 1.2x of the rate at the smallest
(every batch a range of the expiry index, whatever lies before it), and at least 0.3x
one ``DELETE`` of the same rows. The live claims are checked after each sweep: none may
go.
"""

from __future__ import annotations

import io
import time
import tracemalloc
from typing import Any

from bench.process_memory import reset_peak_rss, status_kib
from bench.scale.report import Panel, Report
from bench.scale.stores import DatabaseStore, Store

__all__ = ["run"]

LIVE = 1_000


def fill(store: DatabaseStore, expired: int) -> None:
    """Empty ``store``, then put ``expired`` expired and 1,000 live claims in it."""
    from tests.support.bulk_claims import insert_claims

    store.clear()
    insert_claims(store.database, LIVE, tag="scale-sweep-live", expired=False)
    done = 0
    while done < expired:  # statements of at most 100,000 rows
        n = min(100_000, expired - done)
        insert_claims(store.database, n, tag=f"scale-sweep-{done}", expired=True)
        done += n
    store.settle()


def one_delete(store: DatabaseStore, expired: int) -> float:
    """Return the rate of one bare ``DELETE`` of ``expired`` expired claims (the floor)."""
    from occupy.backends import get_backend
    from occupy.backends.db.dialects import TABLE

    fill(store, expired)
    now = get_backend(store.alias).store.dialect.now.replace("%%", "%")
    started = time.perf_counter()
    store.execute(f"DELETE FROM {TABLE} WHERE expires_at <= {now}")
    return expired / (time.perf_counter() - started)


def sweep_once(store: DatabaseStore, expired: int) -> dict[str, Any]:
    """Fill ``store`` with ``expired`` expired and 1,000 live claims; sweep; then time
    one ``DELETE`` of as many; return the figures."""
    from django.core.management import call_command

    from tests.support.bulk_claims import tokens_of

    fill(store, expired)
    live = tokens_of(store.database, "scale-sweep-live")
    rss = status_kib("VmRSS")
    reset = reset_peak_rss()
    tracemalloc.start()
    started = time.perf_counter()
    call_command("sweep_locks", backend=[store.alias], stdout=io.StringIO())
    elapsed = time.perf_counter() - started
    traced = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    growth = (status_kib("VmHWM") - rss) if reset else float("nan")
    left = store.rows()
    kept = tokens_of(store.database, "scale-sweep-live")
    floor = one_delete(store, expired)
    store.clear()
    return {
        "rate": expired / elapsed,
        "floor": floor,
        "seconds": elapsed,
        "rss_growth_kib": growth,
        "traced_kib": traced / 1024,
        "left": left - len(kept),
        "lost_live": len(live - kept),
    }


def run(report: Report, stores: list[Store], sizes: Any) -> None:
    """Sweep every database at every size; print, write and plot."""
    from django.core.management import call_command

    databases = [s for s in stores if isinstance(s, DatabaseStore)]
    for store in databases:  # imports, connections: not part of any figure
        store.clear()
        call_command("sweep_locks", backend=[store.alias], stdout=io.StringIO())
    figures: dict[tuple[str, int], dict[str, Any]] = {}
    for size in sizes.sweep:
        for store in databases:
            figures[store.name, size] = sweep_once(store, size)
        print(f"  sweep_locks: {size:,} expired done", flush=True)
    rows, csv_rows, notes = [], [], ["target: memory flat whatever the backlog"]
    rate_panel = Panel("rows deleted per second", logy=True)
    memory_panel = Panel("memory during the sweep (KiB)")
    for store in databases:
        for size in sizes.sweep:
            got = figures[store.name, size]
            rows.append(_row(store.name, size, got))
            csv_rows.append(
                [
                    store.name,
                    size,
                    f"{got['rate']:.0f}",
                    f"{got['floor']:.0f}",
                    f"{got['seconds']:.2f}",
                    got["rss_growth_kib"],
                    f"{got['traced_kib']:.1f}",
                    got["left"],
                    got["lost_live"],
                ]
            )
            rate_panel.add(store.name, size, got["rate"])
            rate_panel.add(f"{store.name} one DELETE", size, got["floor"])
            memory_panel.add(f"{store.name} peak RSS growth", size, got["rss_growth_kib"])
            memory_panel.add(f"{store.name} tracemalloc peak", size, got["traced_kib"])
        least, most = figures[store.name, sizes.sweep[0]], figures[store.name, sizes.sweep[-1]]
        notes.append(
            f"{store.name}: rows/s at {sizes.sweep[-1]:,} expired are "
            f"{most['rate'] / least['rate']:.2f}x those at {sizes.sweep[0]:,} "
            "(target: at least 0.83x, i.e. within 1.2x)"
        )
    notes.append("target: sweep_locks at least 0.3x one DELETE of the same rows")
    report.table(
        f"5. sweep_locks against expired claims ({LIVE:,} live beside them, batches of 10,000)",
        [
            "database",
            "expired",
            "rows/s",
            "one DELETE rows/s",
            "x DELETE",
            "seconds",
            "peak RSS growth MiB",
            "tracemalloc peak KiB",
            "problems",
        ],
        rows,
        notes=notes,
    )
    report.csv(
        "scale-sweep",
        [
            "database",
            "expired",
            "rows_per_s",
            "one_delete_rows_per_s",
            "seconds",
            "rss_growth_kib",
            "tracemalloc_peak_kib",
            "expired_left",
            "live_swept",
        ],
        csv_rows,
    )
    report.plot(
        "scale-sweep",
        "5. sweep_locks against expired claims (1,000 live beside them)",
        "expired claims",
        [rate_panel, memory_panel],
        xticks=sizes.sweep,
    )


def _row(database: str, size: int, got: dict[str, Any]) -> list[Any]:
    """Return the printed row of one sweep's figures, with what went wrong."""
    problems = []
    if got["left"]:
        problems.append(f"{got['left']:,} expired left")
    if got["lost_live"]:
        problems.append(f"VIOLATION: {got['lost_live']:,} live claims swept")
    return [
        database,
        size,
        got["rate"],
        got["floor"],
        f"{got['rate'] / got['floor']:.2f}",
        f"{got['seconds']:.1f}",
        f"{got['rss_growth_kib'] / 1024:.1f}",
        f"{got['traced_kib']:.0f}",
        "; ".join(problems),
    ]
