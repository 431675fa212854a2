"""The fault soak: ``python -m bench faults`` (``make faults``; ``--short`` in CI).

It starts private servers in a temporary directory, on spare ports (from
``--port-base``, default 16700): PostgreSQL (``initdb`` and ``postgres``, the newest
under ``/usr/lib/postgresql`` or ``OCCUPY_FAULTS_PG_BIN``), MariaDB
(``mariadb-install-db`` and ``mariadbd``) and two Redis servers, one with the
append-only file and one with no persistence. Then, one store after the other, several
worker processes (:mod:`bench.faults.worker`) run acquire → fenced read of a counter →
fenced write of the counter + 1 → release, while the coordinator
(:mod:`bench.faults.soak`) restarts the store's server (its own shutdown, or a kill),
kills its connections, pauses a holder past its ttl and kills holders. The counter and
the record of every section live in a SQLite ledger per store that no fault touches
(:mod:`bench.faults.ledger`).

The stores: the database backend on PostgreSQL, MariaDB and SQLite, the Redis backend
on both Redis servers, the cache backend (django-redis) on the Redis server with the
append-only file, and the file backend. A store whose server or driver is missing is
skipped, and said so (``--require`` makes that an error, as in CI).

The report gives, per store: sections run, faults injected, overlaps, lost increments,
fence violations, refusals and their reasons, grants lost with the store's data,
foreign exceptions, and the longest time a key stayed unobtainable. The rule that
passes or fails a store is in :mod:`bench.faults.analysis`; the exit status is 1 when
any store failed. Everything started is stopped by PID, also on Ctrl-C.

Options: ``--short`` (a round of about two minutes in all), ``--seconds`` (per store),
``--stores postgresql,redis,…``, ``--faults restart,kill holder,…``, ``--pending-ttl``
(the database and file backends' ``PENDING_TTL``), ``--port-base``, ``--require``,
``--keep`` (leave the temporary directory, with the servers' and workers' logs and the
ledgers).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from bench.common import choose
from bench.faults.analysis import Tally
from bench.faults.servers import PG_BIN, MariaDB, PostgreSQL, Redis, Server, describe
from bench.faults.soak import REPO, SERVER_FAULTS, Plan, Store, soak

__all__ = ["FULL", "SHORT", "STORES", "main"]

#: The stores, in the order they run.
STORES = (
    Store("postgresql", "postgresql"),
    Store("mariadb", "mariadb"),
    Store("redis-aof", "redis-aof"),
    Store("redis", "redis"),
    Store("cache-redis-aof", "redis-aof"),
    Store("sqlite", None),
    Store("files", None),
)
FULL = Plan(seconds=150, interval=2.5)
SHORT = Plan(seconds=10, interval=1.0)
#: The Python driver each server's stores need.
DRIVERS = {
    "postgresql": "psycopg",
    "mariadb": "MySQLdb",
    "redis-aof": "django_redis",
    "redis": "django_redis",
}


def _free_ports(base: int, count: int) -> Iterator[int]:
    """Yield ``count`` ports from ``base`` on (at most 300 tried) that nothing listens on."""
    given = 0
    for port in range(base, base + 300):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        yield port
        given += 1
        if given == count:
            return
    raise RuntimeError(f"no {count} free ports from {base}")


def _servers(labels: set[str], root: Path, base: int) -> list[Server]:
    ports = _free_ports(base, len(labels))
    made: list[Server] = []
    for label in ("postgresql", "mariadb", "redis-aof", "redis"):
        if label not in labels:
            continue
        if label == "postgresql":
            made.append(PostgreSQL(root, next(ports)))
        elif label == "mariadb":
            made.append(MariaDB(root, next(ports)))
        else:
            made.append(Redis(root, next(ports), appendonly=label == "redis-aof"))
    return made


def _migrate(env: dict[str, str], databases: list[str]) -> None:
    for alias in databases:
        subprocess.run(
            [sys.executable, "-m", "django", "migrate", "--database", alias, "--verbosity", "0"],
            cwd=REPO,
            env=env,
            check=True,
            timeout=300,
        )


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str]) -> None:
    """Run the soak on the stores the options name; exit 1 if any store failed."""
    parser = _parser()
    args = parser.parse_args(argv)
    plan = _plan(parser, args)
    stores, skipped = _stores(parser, args)
    _run(stores, skipped, plan, args)


def _parser() -> argparse.ArgumentParser:
    """Return the command line's parser."""
    parser = argparse.ArgumentParser(
        prog="python -m bench faults",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--short", action="store_true", help="a round of about 2 minutes")
    parser.add_argument("--seconds", type=float, default=None, help="per store")
    parser.add_argument(
        "--stores",
        default="",
        help=f"comma-separated, from {', '.join(s.name for s in STORES)} (default: all)",
    )
    parser.add_argument("--port-base", type=int, default=16700)
    parser.add_argument(
        "--require", action="store_true", help="fail when a store's server or driver is missing"
    )
    parser.add_argument(
        "--faults",
        default="",
        help=f"comma-separated fault kinds to inject, from {', '.join(SERVER_FAULTS)} "
        "(default: all)",
    )
    parser.add_argument(
        "--pending-ttl",
        type=float,
        default=None,
        help="the database and file backends' PENDING_TTL (default: theirs)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    return parser


def _plan(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Plan:
    """Return the plan the options ask for (``--short``, ``--seconds``, ``--faults``)."""
    plan = SHORT if args.short else FULL
    if args.seconds is not None:
        if not 5 <= args.seconds <= 3600:
            parser.error("--seconds must be between 5 and 3600")
        # A short soak still gets several faults of each kind's turn.
        plan = dataclasses.replace(
            plan, seconds=args.seconds, interval=min(plan.interval, max(0.5, args.seconds / 10))
        )
    kinds = choose(parser, "--faults", args.faults, SERVER_FAULTS)
    if kinds:
        plan = dataclasses.replace(plan, faults=tuple(kinds))
    return plan


def _stores(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[list[Store], dict[str, str]]:
    """Return the stores to soak, and why each store that cannot run is skipped (or
    exit, with ``--require``)."""
    every = [s.name for s in STORES]
    names = choose(parser, "--stores", args.stores, every, {"mysql": "mariadb"}) or every
    stores = [s for s in STORES if s.name in names]
    binary = {
        "postgresql": str(PG_BIN / "postgres"),
        "mariadb": "mariadbd",
        "redis-aof": "redis-server",
        "redis": "redis-server",
    }
    skipped = {}
    for store in stores:
        label = store.server
        if not label:
            continue
        if importlib.util.find_spec(DRIVERS[label]) is None:
            skipped[store.name] = f"its driver {DRIVERS[label]} is not installed"
        elif shutil.which(binary[label]) is None:
            skipped[store.name] = f"{binary[label]} is not installed"
    if skipped and args.require:
        raise SystemExit(
            "stores that cannot run: " + "; ".join(f"{k} ({v})" for k, v in skipped.items())
        )
    return [s for s in stores if s.name not in skipped], skipped


def _run(
    stores: list[Store], skipped: dict[str, str], plan: Plan, args: argparse.Namespace
) -> None:
    """Start the servers, soak each store, stop them, print the report; exit 1 if a
    store failed."""
    previous = signal.signal(signal.SIGTERM, _interrupted)
    root = Path(tempfile.mkdtemp(prefix="occupy-faults-"))
    root.chmod(0o755)  # PostgreSQL runs as its own user below it
    servers = _servers({s.server for s in stores if s.server}, root, args.port_base)
    results: dict[str, Tally] = {}
    began = time.monotonic()
    load_at_start = _load()
    print(
        f"fault soak: {len(stores)} stores, {plan.seconds:.0f} s each, {plan.workers} "
        f"workers on {plan.keys} keys, ttl {plan.ttl} s, a fault every {plan.interval} s, "
        f"PENDING_TTL {args.pending_ttl or 'default'}; "
        f"load average {load_at_start}; {os.cpu_count()} CPUs",
        flush=True,
    )
    for name, why in skipped.items():
        print(f"  skipped {name}: {why}")
    try:
        for server in servers:
            server.prepare()
            server.start()
            server.after_start()
        env = {
            **os.environ,
            **describe(servers),
            "OCCUPY_FAULTS_DIR": str(root),
            "DJANGO_SETTINGS_MODULE": "bench.faults.settings",
            **({"OCCUPY_FAULTS_PENDING_TTL": str(args.pending_ttl)} if args.pending_ttl else {}),
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p
            ),
        }
        _migrate(
            env, ["default", *(s.label for s in servers if s.label in ("postgresql", "mariadb"))]
        )
        by_label = {s.label: s for s in servers}
        for number, store in enumerate(stores):
            result = soak(store, by_label.get(store.server or ""), root, env, plan, seed=number)
            results[store.name] = result
            print(
                f"  {store.name}: {result.sections:,} sections, "
                f"{sum(result.faults.values())} faults, "
                f"{'passed' if result.passed else 'FAILED'} ({_load()})",
                flush=True,
            )
    finally:
        for server in reversed(servers):
            with contextlib.suppress(Exception):
                server.stop()
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)
    print_report(results, plan)
    print(
        f"run time {(time.monotonic() - began) / 60:.1f} min; load average "
        f"{load_at_start} at start, {_load()} at end"
    )
    failed = [name for name, r in results.items() if not r.passed]
    if failed:
        raise SystemExit(f"fault soak FAILED on {', '.join(failed)}")


def print_report(results: dict[str, Tally], plan: Plan) -> None:
    """Print the table of the stores' figures, then what each store's problems were."""
    columns = [
        "store",
        "sections",
        "accepted",
        "faults",
        "overlaps",
        "lost incr.",
        "fence viol.",
        "refused: paused/ttl/data/unexplained",
        "grants lost w/ data",
        "foreign exc.",
        "longest unobtainable",
    ]
    rows = []
    for name, r in results.items():
        refusals = r.refusals
        lost = refusals["lost with the store's data"]
        rows.append(
            [
                name,
                f"{r.sections:,}",
                f"{r.accepted:,}",
                str(sum(r.faults.values())),
                str(r.overlaps),
                str(r.lost_increments),
                str(r.fence_violations),
                f"{refusals['paused']}/{refusals['outlived ttl']}/{lost}/{refusals['unexplained']}",
                str(r.grants_lost),
                str(sum(r.foreign.values())),
                f"{r.longest_unobtainable:.2f} s",
            ]
        )
    print("\n## Fault soak")
    print("| " + " | ".join(columns) + " |")
    print("|" + "|".join("---" for _ in columns) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()
    for name, r in results.items():
        faults = ", ".join(f"{kind} {n}" for kind, n in sorted(r.faults.items()))
        print(
            f"{name}: faults: {faults or 'none'}; paused holders {r.paused} "
            f"({r.paused_accepted} wrote, nobody having taken the key); unfinished "
            f"sections (holder killed) {r.unfinished}"
        )
        print(f"  longest unobtainable: {r.longest_unobtainable:.2f} s, {r.longest_context}")
        if r.exceptions:
            print(
                "  occupy exceptions: "
                + ", ".join(f"{kind} {n}" for kind, n in r.exceptions.most_common())
            )
        for text, n in r.foreign.most_common(5):
            print(f"  foreign exception ×{n}: {text}")
        for problem in r.problems:
            print(f"  {problem}")
    print(
        f"\nrule: a store fails on any overlap of accepted fenced writes, lost increment, "
        f"fence violation or unexplained refusal, or when no section ran (ttl {plan.ttl} s)"
    )
