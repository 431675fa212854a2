"""2. Hand-off under a queue: one hot key, 1, 8, 32 and 64 waiters.

``n + 1`` workers (threads spread over up to 8 spawned processes: 65 processes would
exceed a small machine) take one key in a loop: ask, hold it for a short critical
section, release, ask again. So ``n`` wait whenever one holds. Rounds alternate between
stores and between queue lengths. From every worker's (asked, granted, released) times
on the host's one monotonic clock:

- **hand-off**: from a holder's call to release to the next holder's grant (median,
  p99, worst), counted from the round's first half second on;
- **store calls per release**: every database statement, Redis command or locked
  file step the workers made in the round (waiters' polls and heartbeats included),
  over the releases; and the tries (each wake-up or poll of a waiter) per release;
- **order of service**: a grant is in order when it goes to the worker that has been
  waiting longest; the share in order, and the worst overtake (how much earlier the
  passed-over waiter had asked).

Target: p99 hand-off with 64 waiters within 2× of that with 1; store calls per
release independent of the number of waiters; service in arrival order. (The cache
backend on a Redis cache runs the Redis backend's protocol, queue included.)
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from bench.scale.report import Panel, Report, median, percentile
from bench.scale.stores import Store
from bench.scale.workers import Pool, start_at

__all__ = ["run"]

#: The critical section, and the start of a round left out (connections, first waits).
HOLD = 0.001
WARM = 0.5
MAX_PROCESSES = 8
P99_TARGET = 2.0


def hot_loop(worker: int, alias: str, start: float, stop: float) -> list[tuple[float, ...]]:
    """Take the hot key in turns until ``stop``; return (asked, granted, released) times."""
    import occupy

    events: list[tuple[float, ...]] = []
    # Connect (the pool closes connections between rounds) before the clock starts.
    occupy.release(occupy.acquire(f"scale:warm:{worker}", ttl=5, timeout=10, backend=alias))
    time.sleep(max(0.0, start - time.monotonic()))
    while time.monotonic() < stop:
        asked = time.monotonic()
        lease = occupy.acquire("scale:hot", ttl=30, timeout=60, backend=alias)
        granted = time.monotonic()
        time.sleep(HOLD)
        released = time.monotonic()
        occupy.release(lease)
        events.append((asked, granted, released))
    return events


def analyse(events: list[tuple[float, float, float]], start: float, stop: float) -> dict[str, Any]:
    """Return the hand-offs, order of service and overlaps of one round's events."""
    events = sorted(events, key=lambda e: e[1])
    handoffs, overtakes, overlaps, releases = [], [], 0, 0
    for before, after in itertools.pairwise(events):
        released, granted = before[2], after[1]
        if granted < released:
            overlaps += 1  # two holders at once: a violation
            continue
        if not start + WARM <= granted <= stop:
            continue
        waiting = [e[0] for e in events if e[0] < released < e[1]]
        if not waiting:
            continue  # nobody was queued: no hand-off
        releases += 1
        handoffs.append(granted - released)
        overtakes.append(after[0] - min(waiting))
    return {
        "handoffs": handoffs,
        "overtakes": overtakes,
        "overlaps": overlaps,
        "releases": releases,
    }


def run(report: Report, stores: list[Store], sizes: Any) -> None:
    """Measure hand-offs for every store and queue length; print, write and plot."""
    waiters = list(sizes.waiters)
    workers = max(waiters) + 1
    processes = min(MAX_PROCESSES, workers)
    threads = -(-workers // processes)
    pool = Pool(processes, threads, [s.alias for s in stores])
    rounds: dict[tuple[str, int], list[dict[str, Any]]] = {}
    try:
        first = True
        for _ in range(sizes.handoff_rounds):
            for n in waiters:
                for store in stores:
                    # Spawned children start slowly; n + 1 connections take a while too.
                    start = start_at(8.0 if first else 0.5 + 0.02 * n)
                    first = False
                    stop = start + sizes.handoff_seconds
                    results, counted = pool.run(hot_loop, n + 1, store.alias, start, stop)
                    events = [e for got in results.values() for e in got]
                    got = analyse(events, start, stop)
                    got["store_calls"] = counted.get("store", 0)
                    got["tries"] = counted.get("tries", 0)
                    got["polled_grants"] = counted.get("polled_grants", 0)
                    got["all_releases"] = len(events)
                    rounds.setdefault((store.name, n), []).append(got)
            print("  hand-off: a round of every store and queue length done", flush=True)
    finally:
        pool.close()
    _summarize(report, stores, waiters, rounds, sizes)


def _summarize(
    report: Report,
    stores: list[Store],
    waiters: list[int],
    rounds: dict[tuple[str, int], list[dict[str, Any]]],
    sizes: Any,
) -> None:
    rows, csv_rows = [], []
    p99_panel = Panel("hand-off p99 (ms)", logy=True)
    med_panel = Panel("hand-off median (ms)", logy=True)
    calls_panel = Panel("store calls per release", logy=True)
    verdicts = []
    for store in stores:
        p99s = {}
        calls = {}
        for n in waiters:
            got = rounds[store.name, n]
            handoffs = [h * 1000 for r in got for h in r["handoffs"]]
            overtakes = [o * 1000 for r in got for o in r["overtakes"]]
            releases = sum(r["all_releases"] for r in got)
            store_calls = sum(r["store_calls"] for r in got) / max(releases, 1)
            tries = sum(r["tries"] for r in got) / max(releases, 1)
            polled = sum(r["polled_grants"] for r in got) / max(releases, 1)
            overlaps = sum(r["overlaps"] for r in got)
            in_order = sum(1 for o in overtakes if o <= 0) / max(len(overtakes), 1)
            med, p99 = median(handoffs), percentile(handoffs, 99)
            worst = max(handoffs, default=float("nan"))
            p99s[n], calls[n] = p99, store_calls
            rows.append(
                [
                    store.name,
                    n,
                    len(handoffs),
                    med,
                    p99,
                    worst,
                    store_calls,
                    tries,
                    f"{polled:.0%}",
                    f"{in_order:.1%}",
                    max(overtakes, default=0.0),
                    overlaps or "",
                ]
            )
            csv_rows.append(
                [
                    store.name,
                    n,
                    len(handoffs),
                    f"{med:.3f}",
                    f"{p99:.3f}",
                    f"{worst:.3f}",
                    f"{store_calls:.2f}",
                    f"{tries:.2f}",
                    f"{polled:.4f}",
                    f"{in_order:.4f}",
                    f"{max(overtakes, default=0.0):.3f}",
                    overlaps,
                    releases,
                ]
            )
            med_panel.add(store.name, n, med)
            p99_panel.add(store.name, n, p99)
            calls_panel.add(store.name, n, store_calls)
        lo, hi = waiters[0], waiters[-1]
        ratio = p99s[hi] / p99s[lo]
        growth = calls[hi] / calls[lo]
        verdicts.append(
            f"{store.name}: p99 {hi} / {lo} waiters {ratio:.2f}× "
            f"({'met' if ratio <= P99_TARGET else 'MISSED'}); store calls per "
            f"release {calls[lo]:.1f} → {calls[hi]:.1f} ({growth:.2f}×)"
        )
    report.table(
        f"2. Hand-off under a queue: one key, {HOLD * 1000:g} ms critical section, "
        f"{sizes.handoff_rounds} rounds of {sizes.handoff_seconds:g} s per queue length",
        [
            "store",
            "waiters",
            "hand-offs",
            "median ms",
            "p99 ms",
            "worst ms",
            "store calls/release",
            "tries/release",
            "polled grants",
            "in order",
            "worst overtake ms",
            "overlaps",
        ],
        rows,
        notes=[
            f"target: p99 with {waiters[-1]} waiters ≤ {P99_TARGET}× that with "
            f"{waiters[0]}; store calls per release flat; arrival order",
            "polled grants: grants a waiter found by a poll that ran its full time, "
            "not by a wake-up (all of them where waiters poll)",
            *verdicts,
        ],
    )
    report.csv(
        "scale-handoff",
        [
            "store",
            "waiters",
            "handoffs",
            "median_ms",
            "p99_ms",
            "worst_ms",
            "store_calls_per_release",
            "tries_per_release",
            "polled_grants_share",
            "in_order_share",
            "worst_overtake_ms",
            "overlaps",
            "releases",
        ],
        csv_rows,
    )
    report.plot(
        "scale-handoff",
        f"2. hand-off under a queue: one key, {HOLD * 1000:g} ms critical section",
        "waiters",
        [med_panel, p99_panel, calls_panel],
        xticks=waiters,
    )
