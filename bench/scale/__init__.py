"""How occupy's cost grows with the work: ``python -m bench scale`` (``make bench-scale``).

Five measurements, on every store configured and reachable (PostgreSQL, MariaDB and
SQLite through the database backend, Redis, files, and the cache backend on
django-redis), in one run:

1. acquire + release latency against the number of live claims on other keys
   (:mod:`bench.scale.live`);
2. hand-off under a queue: one hot key, 1 to 64 waiters (:mod:`bench.scale.handoff`);
3. many keys: several processes on 10,000 distinct keys (:mod:`bench.scale.keys`);
4. footprint: bytes per claim, per Redis waiter, and a process holding 10,000
   renewed leases (:mod:`bench.scale.footprint`, and the sizes of part 1);
5. ``sweep_locks`` against the number of expired claims (:mod:`bench.scale.sweep`).

Each prints tables and writes PNG plots (with the ``bench`` extra's matplotlib) and CSV
files to ``bench/results/`` (``--quick``: ``bench/results/quick/``). Every table and
plot title starts with the machine line. Rounds alternate between stores and between
sizes wherever the store allows it, and every ratio comes from the same run.

Options: ``--quick`` (sizes lowered a hundredfold or so, for a look in a few minutes),
``--parts live,handoff,keys,footprint,sweep``, ``--stores postgresql,redis,…`` (from
postgresql, mariadb, sqlite, redis, cache, files, or their backend aliases; ``mysql``
is MariaDB, as Django's engine names it), ``--out DIR``. An unknown name, or a store
named that is not reachable here, stops the run before it measures anything.
"""

from __future__ import annotations

import argparse
import os
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import choose

__all__ = ["FULL", "QUICK", "Sizes", "main"]

PARTS = ("live", "handoff", "keys", "footprint", "sweep")
#: The stores ``--stores`` names (their labels' first words, in lower case), and the
#: other names it takes for them: their backend aliases, and Django's engine's name.
STORES = ("postgresql", "mariadb", "sqlite", "redis", "cache", "files")
STORE_ALIASES = {
    "db-postgresql": "postgresql",
    "db-mysql": "mariadb",
    "mysql": "mariadb",
    "db-sqlite": "sqlite",
}
RESULTS = Path(__file__).resolve().parent.parent / "results"


@dataclass(frozen=True)
class Sizes:
    """How much work each part does."""

    live: tuple[int, ...]
    live_rounds: int
    live_ops: int
    waiters: tuple[int, ...]
    handoff_rounds: int
    handoff_seconds: float
    processes: tuple[int, ...]
    distinct_keys: int
    keys_rounds: int
    keys_seconds: float
    leases: int
    lease_ttl: float
    hold_seconds: float
    redis_waiters: int
    sweep: tuple[int, ...]


FULL = Sizes(
    live=(1_000, 100_000, 1_000_000),
    live_rounds=8,
    live_ops=250,
    waiters=(1, 8, 32, 64),
    handoff_rounds=3,
    handoff_seconds=3.0,
    processes=(1, 2, 4, 8),
    distinct_keys=10_000,
    keys_rounds=3,
    keys_seconds=3.0,
    leases=10_000,
    lease_ttl=30,
    hold_seconds=30,
    redis_waiters=1_000,
    sweep=(10_000, 100_000, 1_000_000),
)
QUICK = Sizes(
    live=(100, 1_000, 10_000),
    live_rounds=4,
    live_ops=100,
    waiters=(1, 4, 8),
    handoff_rounds=2,
    handoff_seconds=1.0,
    processes=(1, 2),
    distinct_keys=1_000,
    keys_rounds=2,
    keys_seconds=1.0,
    leases=1_000,
    lease_ttl=6,
    hold_seconds=6,
    redis_waiters=100,
    sweep=(1_000, 10_000),
)


def setup() -> None:
    """Set Django up on the scale settings; create and migrate the scale databases."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.scale.settings"
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connections

    for alias, config in settings.DATABASES.items():
        if "sqlite" in config["ENGINE"]:
            continue
        connection = connections[alias]
        name = connection.settings_dict["NAME"]
        with connection._nodb_cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
                if not cursor.fetchone():
                    cursor.execute(f'CREATE DATABASE "{name}"')
            else:
                cursor.execute(f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4")
    for alias in settings.DATABASES:
        call_command("migrate", database=alias, verbosity=0)


def main(argv: list[str]) -> None:
    """Run the parts named by the options (default: all), and say how long it took."""
    parser = argparse.ArgumentParser(
        prog="python -m bench scale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="lower every size")
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"comma-separated, from {', '.join(PARTS)}"
    )
    parser.add_argument(
        "--stores",
        default="",
        help=f"comma-separated, from {', '.join(STORES)} or their backend aliases "
        "(default: every one reachable)",
    )
    parser.add_argument("--out", type=Path, default=None, help="where results go")
    args = parser.parse_args(argv)
    parts = choose(parser, "--parts", args.parts, PARTS) or list(PARTS)
    named = choose(parser, "--stores", args.stores, STORES, STORE_ALIASES)
    sizes = QUICK if args.quick else FULL
    out = args.out or (RESULTS / "quick" if args.quick else RESULTS)

    started = time.perf_counter()
    setup()
    from bench.scale import machine
    from bench.scale.report import Report
    from bench.scale.stores import available_stores, remove_trash, shrink_sqlite

    line = machine.describe()
    load_at_start = machine.load_average()
    report = Report(out, line)
    stores = available_stores(named)
    missing = set(named) - {s.name.lower().split(" ")[0] for s in stores}
    if missing:
        raise SystemExit(
            f"python -m bench scale: --stores names what is not reachable here: "
            f"{', '.join(sorted(missing))} (a server that does not answer, or a driver "
            f"that is missing); reachable: {', '.join(s.name for s in stores) or 'nothing'}"
        )
    print(line)
    print(
        f"stores: {', '.join(s.name for s in stores)}; load average {load_at_start}; "
        f"{'quick sizes' if args.quick else 'full sizes'}",
        flush=True,
    )
    timings = {}
    failed = []
    try:
        for part in parts:
            part_started = time.perf_counter()
            try:
                _run_part(part, report, stores, sizes)
            except Exception:  # the other parts still run; the exit status says so
                traceback.print_exc()
                failed.append(part)
            timings[part] = time.perf_counter() - part_started
    finally:
        cleanup_started = time.perf_counter()
        for store in stores:
            store.clear()
        remove_trash()
        shrink_sqlite()
        timings["clean-up"] = time.perf_counter() - cleanup_started
    total = time.perf_counter() - started
    print(f"\n{line}")
    print(
        f"## run time: {total / 60:.1f} min ("
        + ", ".join(f"{p} {s:.0f} s" for p, s in timings.items())
        + f"); load average {load_at_start} at start, {machine.load_average()} at end"
    )
    for path in report.written:
        print(f"  wrote {path}")
    if report.skipped_plots:
        print(
            f"  no plots ({', '.join(report.skipped_plots)}): matplotlib is missing; "
            "pip install -e '.[bench]'"
        )
    if failed:
        raise SystemExit(f"parts that failed: {', '.join(failed)}")


def _run_part(part: str, report: Any, stores: list[Any], sizes: Sizes) -> None:
    from bench.scale import footprint, handoff, keys, live, sweep

    if part == "live":
        live.run(report, stores, list(sizes.live), rounds=sizes.live_rounds, ops=sizes.live_ops)
    elif part == "handoff":
        handoff.run(report, stores, sizes)
    elif part == "keys":
        keys.run(report, stores, sizes)
    elif part == "footprint":
        footprint.run(report, stores, sizes)
    elif part == "sweep":
        sweep.run(report, stores, sizes)
