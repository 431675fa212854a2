"""The database backend on PostgreSQL against PostgreSQL's own ways to lock, side by side.

Four figures, each from one run with rounds alternating (see :mod:`bench.common`):

1. **Uncontended** acquire+release in one process: occupy's ``DatabaseBackend`` (through
   ``occupy.acquire``/``occupy.release``) against a plain lock table (``INSERT … ON
   CONFLICT DO NOTHING``, then ``DELETE``) and ``pg_advisory_lock``/``pg_advisory_unlock``.
   Target: at least 0.8× the plain lock table's rate. The plain table runs twice: as
   Django runs statements by default (planned afresh each time), and prepared, as
   occupy's own connections run them (``PREPARE``), so that both ratios can be read.
   Then the CPU each operation costs in this process and in its server process: on a
   shared machine rates swing with the neighbours' load, CPU per operation hardly does.
2. **Contention**: 4 spawned processes take one key for a 1 ms critical section, for a
   fixed time; sections per second, and each wait (from asking to being granted): the
   median, the 99th percentile and the worst. Target: no wait above 100 ms. The plain
   table has no queue, so its waiters poll (every 2 ms); advisory locks block in
   PostgreSQL's lock manager.
3. **A key held for the app's transaction** (``occupy.lock(key, scope="transaction")``)
   + ``UPDATE`` against a plain transaction (see :mod:`bench.db_transaction`).
4. **sweep_locks** on 100,000 expired claims beside 1,000 live ones, on every configured
   database: rows per second against one bare ``DELETE`` of the same rows (the floor),
   and memory: the growth of the process's peak RSS and the ``tracemalloc`` peak.

Every candidate talks to the server the same way: its own Django connection in
autocommit, one statement per round trip, and the same key pattern. The lock tables are
vacuumed before each part (autovacuum may be off on a bench server, and dead rows left by
one part would slow the next).
"""

from __future__ import annotations

import io
import multiprocessing
import os
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from bench.common import Result, alternate, print_table, setup_django
from bench.db_transaction import transaction_lock
from bench.process_memory import reset_peak_rss, status_kib

#: The database alias and occupy backend alias on PostgreSQL (see tests/settings.py).
DATABASE = "postgresql"
BACKEND = "db-postgresql"
PLAIN_TABLE = "bench_plain_lock"

UNCONTENDED_OPS = 500
#: Many short rounds: on a shared machine, the median of many beats a few long ones.
UNCONTENDED_ROUNDS = 11
PROCESSES = 4
CRITICAL_SECTION = 0.001
CONTENDED_SECONDS = 3.0
CONTENDED_ROUNDS = 3
#: How often a plain-table waiter tries again (it has no queue to wait in).
PLAIN_POLL = 0.002
SWEEP_ROWS = 100_000
SWEEP_LIVE = 1_000
SWEEP_ROUNDS = 3


# --- the candidates: take(key) blocks until granted and returns a handle; give(handle) ---
class OccupyLock:
    """occupy's public API on the database backend."""

    name = "occupy db backend"

    def server_pid(self) -> int:
        from occupy.backends import get_backend

        return get_backend(BACKEND).store.execute("SELECT pg_backend_pid()", [])[1][0][0]

    def take(self, key: str) -> Any:
        import occupy

        return occupy.acquire(key, ttl=30, timeout=30, backend=BACKEND)

    def give(self, lease: Any) -> None:
        import occupy

        occupy.release(lease)


class _Raw:
    """A peer with a Django connection of its own, in autocommit like occupy's.

    ``prepared``: bind on the server and prepare statements from their second run, as
    occupy's own connections do (``PREPARE``); else Django's default (neither).
    """

    prepared = False

    def __init__(self) -> None:
        from django.db import connections

        if self.prepared:
            from django.db.utils import load_backend

            config = connections.settings[DATABASE]
            options = {**config["OPTIONS"], "server_side_binding": True, "prepare_threshold": 1}
            self.connection = load_backend(config["ENGINE"]).DatabaseWrapper(
                {**config, "OPTIONS": options}, DATABASE
            )
        else:
            self.connection = connections.create_connection(DATABASE)
        self.owner = f"{os.getpid()}"

    def server_pid(self) -> int:
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return cursor.fetchone()[0]

    def execute(self, sql: str, params: list[Any]) -> int:
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            if cursor.description:
                cursor.fetchall()
            return cursor.rowcount


class PlainTable(_Raw):
    """A lock table with a primary key: insert to take, delete to give, poll to wait."""

    name = "plain lock table"

    def take(self, key: str) -> str:
        while not self.execute(
            f"INSERT INTO {PLAIN_TABLE} (key, owner, expires_at) "
            "VALUES (%s, %s, now() + interval '30 seconds') ON CONFLICT DO NOTHING",
            [key, self.owner],
        ):
            time.sleep(PLAIN_POLL)
        return key

    def give(self, key: str) -> None:
        self.execute(f"DELETE FROM {PLAIN_TABLE} WHERE key = %s AND owner = %s", [key, self.owner])


class PreparedPlainTable(PlainTable):
    """The plain lock table on a connection that prepares its statements."""

    name = "plain lock table, prepared"
    prepared = True


class AdvisoryLock(_Raw):
    """PostgreSQL's session-level advisory lock on the key's 64-bit hash."""

    name = "pg_advisory_lock"

    def take(self, key: str) -> str:
        self.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [key])
        return key

    def give(self, key: str) -> None:
        self.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [key])


CANDIDATES: list[Callable[[], Any]] = [OccupyLock, PlainTable, PreparedPlainTable, AdvisoryLock]


def create_plain_table() -> None:
    """Create the plain lock table (once; it is the bench's own)."""
    from django.db import connections

    with connections[DATABASE].cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {PLAIN_TABLE} (key text PRIMARY KEY, "
            "owner text NOT NULL, expires_at timestamptz NOT NULL)"
        )
        cursor.execute(f"DELETE FROM {PLAIN_TABLE}")


def vacuum() -> None:
    """Vacuum and analyze both lock tables, so each part starts without dead rows.

    Every acquire+release leaves a dead row behind on PostgreSQL; with autovacuum off
    (as on the shared bench server) they pile up, and planning a statement then walks
    the dead index entries: a bench would measure the previous part's debris.
    """
    from django.db import connections

    from occupy.backends.db.dialects import TABLE

    with connections[DATABASE].cursor() as cursor:
        for table in (TABLE, PLAIN_TABLE):
            cursor.execute(f"VACUUM ANALYZE {table}")


# --- 1. uncontended ---------------------------------------------------------------------
def uncontended() -> None:
    """Time acquire+release of fresh keys in this process, candidates alternating."""
    candidates = {}
    locks = []
    for factory in CANDIDATES:
        lock = factory()
        locks.append(lock)

        def run(ops: int, lock: Any = lock) -> None:
            for i in range(ops):
                lock.give(lock.take(f"bench:uncontended:{i}"))

        candidates[lock.name] = run
    results = alternate(candidates, ops=UNCONTENDED_OPS, rounds=UNCONTENDED_ROUNDS)
    for result in results:
        result.unit = "acquire+release/s"
    print_table(
        "Uncontended acquire+release, one process (PostgreSQL)",
        results,
        reference=PlainTable.name,
        target="occupy ≥ 0.80× plain lock table",
    )
    cpu_per_op(candidates, locks)


def _cpu_seconds(pid: int) -> float:
    """Return the CPU time (user + system) process ``pid`` of this host has used."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_per_op(candidates: dict[str, Callable[[int], None]], locks: list[Any]) -> None:
    """Print the CPU time each acquire+release costs here and in its server process,
    candidates alternating as for the rates (needs the server on this host)."""
    try:
        pids = {lock.name: lock.server_pid() for lock in locks}
        for pid in pids.values():
            _cpu_seconds(pid)
    except OSError:
        print("  (CPU per operation: the server is not on this host)")
        return
    client = dict.fromkeys(candidates, 0.0)
    server = dict.fromkeys(candidates, 0.0)
    for _ in range(UNCONTENDED_ROUNDS):
        for name, run in candidates.items():
            server_before, client_before = _cpu_seconds(pids[name]), time.process_time()
            run(UNCONTENDED_OPS)
            client[name] += time.process_time() - client_before
            server[name] += _cpu_seconds(pids[name]) - server_before
    ops = UNCONTENDED_ROUNDS * UNCONTENDED_OPS
    reference = client[PlainTable.name] + server[PlainTable.name]
    width = max(map(len, candidates))
    print(f"  {'CPU per operation'.ljust(width)}    client   server    ratio (inverse of CPU)")
    for name in candidates:
        total = client[name] + server[name]
        here, there = client[name] / ops * 1e6, server[name] / ops * 1e6
        print(
            f"  {name.ljust(width)}  {here:6.0f} µs {there:6.0f} µs"
            f"  {reference / total:5.2f}× plain lock table"
        )


# --- 2. contention ------------------------------------------------------------------------
def _worker(tasks: Any, results: Any, inside: Any, overlaps: Any) -> None:
    """Take one key in turns with the other workers, as long as each task says."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    os.environ.setdefault("OCCUPY_TEST_DB", DATABASE)
    import django

    django.setup()
    locks = {lock.name: lock for lock in (factory() for factory in CANDIDATES)}
    for lock in locks.values():  # connect and prepare before any round is timed
        for i in range(3):
            lock.give(lock.take(f"bench:warm-up:{os.getpid()}:{i}"))
    for name, start_at, stop_at in iter(tasks.get, None):
        lock = locks[name]
        waits = []
        time.sleep(max(0.0, start_at - time.monotonic()))
        while time.monotonic() < stop_at:
            asked = time.perf_counter()
            handle = lock.take("bench:contended")
            waits.append(time.perf_counter() - asked)
            with inside.get_lock():  # a second holder inside would be a violation
                inside.value += 1
                if inside.value > 1:
                    overlaps.value += 1
            time.sleep(CRITICAL_SECTION)
            with inside.get_lock():
                inside.value -= 1
            lock.give(handle)
        results.put((name, waits, time.monotonic() - start_at))


def contention() -> None:
    """Run the candidates in turns on 4 processes; print rates and waits."""
    ctx = multiprocessing.get_context("spawn")
    tasks = [ctx.Queue() for _ in range(PROCESSES)]
    results = ctx.Queue()
    inside, overlaps = ctx.Value("i", 0), ctx.Value("i", 0)
    procs = [
        ctx.Process(target=_worker, args=(queue, results, inside, overlaps)) for queue in tasks
    ]
    for proc in procs:
        proc.start()
    names = [factory.name for factory in CANDIDATES]
    rates: dict[str, list[float]] = {name: [] for name in names}
    waits: dict[str, list[float]] = {name: [] for name in names}
    try:
        for _ in range(CONTENDED_ROUNDS):
            for name in names:
                # Spawned children need a few seconds to start the first time.
                start_at = time.monotonic() + (0.2 if rates[names[0]] else 5.0)
                for queue in tasks:
                    queue.put((name, start_at, start_at + CONTENDED_SECONDS))
                done = [results.get(timeout=120) for _ in procs]
                rates[name].append(
                    sum(len(w) for _, w, _ in done) / max(elapsed for _, _, elapsed in done)
                )
                for _, w, _ in done:
                    waits[name] += w
    finally:
        for queue in tasks:
            queue.put(None)
        for proc in procs:
            proc.join(timeout=30)
    title = (
        f"Contention: {PROCESSES} processes, one key, {CRITICAL_SECTION * 1000:g} ms "
        f"critical section, {CONTENDED_SECONDS:g} s rounds (PostgreSQL)"
    )
    print_table(
        title,
        [Result(name, rates[name], "sections/s") for name in names],
        reference=PlainTable.name,
        target="no wait above 100 ms",
    )
    width = max(map(len, names))
    print(f"  {'waits (ms)'.ljust(width)}      median      p99    worst   (n)")
    for name in names:
        w = sorted(waits[name])
        p99 = statistics.quantiles(w, n=100)[98]
        print(
            f"  {name.ljust(width)}  {statistics.median(w) * 1000:>10.2f} "
            f"{p99 * 1000:>8.1f} {w[-1] * 1000:>8.1f}   ({len(w):,})"
        )
    if overlaps.value:
        print(f"  VIOLATION: two holders were inside the section {overlaps.value} times")


# --- 3. sweep_locks -------------------------------------------------------------------------
def sweep(database: str) -> None:
    """Time ``sweep_locks`` and one bare DELETE on the same rows; report memory."""
    from django.core.management import call_command
    from django.db import connections

    from occupy.backends import get_backend
    from occupy.backends.db.dialects import TABLE
    from tests.support.bulk_claims import count_claims, insert_claims, tokens_of

    backend = f"db-{database}"
    vendor = connections[database].vendor
    dialect = get_backend(backend).store.dialect
    now = dialect.now.replace("%%", "%")
    key = f"{dialect.quote}key{dialect.quote}"
    live = set()
    rss_growth: list[int] = []

    def fill() -> None:
        nonlocal live
        with connections[database].cursor() as cursor:
            cursor.execute(f"DELETE FROM {TABLE} WHERE {key} LIKE %s", ["bench-sweep:%"])
        insert_claims(database, SWEEP_ROWS, tag="bench-sweep", expired=True)
        if not live:
            insert_claims(database, SWEEP_LIVE, tag="bench-live", expired=False)
            live = tokens_of(database, "bench-live")
        if vendor == "postgresql":  # what autovacuum would do: no dead rows, fresh stats
            vacuum()

    def command() -> float:
        fill()
        expired = count_claims(database, expired=True)
        rss = status_kib("VmRSS")
        reset = reset_peak_rss()
        started = time.perf_counter()
        call_command("sweep_locks", backend=[backend], stdout=io.StringIO())
        elapsed = time.perf_counter() - started
        if reset:
            rss_growth.append(status_kib("VmHWM") - rss)
        _check(database, live)
        return expired / elapsed

    def floor() -> float:
        fill()
        expired = count_claims(database, expired=True)
        started = time.perf_counter()
        with connections[database].cursor() as cursor:
            cursor.execute(f"DELETE FROM {TABLE} WHERE expires_at <= {now}")
        return expired / (time.perf_counter() - started)

    rates: dict[str, list[float]] = {"sweep_locks": [], "one DELETE": []}
    for _ in range(SWEEP_ROUNDS):
        rates["sweep_locks"].append(command())
        rates["one DELETE"].append(floor())
    fill()
    tracemalloc.start()
    call_command("sweep_locks", backend=[backend], stdout=io.StringIO())
    traced_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    _check(database, live)
    with connections[database].cursor() as cursor:
        cursor.execute(f"DELETE FROM {TABLE} WHERE owner = 'bulk'")
    if vendor == "postgresql":
        vacuum()
    print_table(
        f"sweep_locks: {SWEEP_ROWS:,} expired claims beside {SWEEP_LIVE:,} live ones, "
        f"batches of 1000 ({vendor})",
        [Result(name, r, "rows/s") for name, r in rates.items()],
        reference="one DELETE",
    )
    growth = f"{max(rss_growth) / 1024:.1f} MiB" if rss_growth else "n/a"
    print(
        f"  memory during sweep_locks: peak RSS growth {growth}, "
        f"tracemalloc peak {traced_peak / 1024:.0f} KiB"
    )


def _check(database: str, live: set[str]) -> None:
    from tests.support.bulk_claims import count_claims, tokens_of

    left = count_claims(database, expired=True)
    kept = tokens_of(database, "bench-live")
    if left or kept != live:
        print(
            f"  VIOLATION on {database}: {left} expired claims left, "
            f"{len(live - kept)} live claims gone"
        )


def main() -> None:
    """Run the three database benchmarks and print their tables."""
    setup_django(DATABASE)
    from django.conf import settings

    create_plain_table()
    vacuum()
    uncontended()
    vacuum()
    contention()
    transaction_lock()
    for database in ("postgresql", "mysql", "sqlite"):
        if f"db-{database}" in settings.OCCUPY["BACKENDS"]:
            sweep(database)


if __name__ == "__main__":
    main()
