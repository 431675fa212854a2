"""Instructions per request of ``python -m bench http``'s candidates, which do not depend
on the machine's load. Run: ``python -m bench http --instructions`` (``make bench``).

The same routes, rows and PATCHes as :mod:`bench.http` (one client, Django's test
client, PostgreSQL), in two runs of a driver process:

- under ``valgrind --tool=callgrind``: for each candidate, ``WARMUP`` requests
  uncounted, then ``REQUESTS`` counted: collection is on only inside
  ``sys.call_tracing`` (a C function nothing else here calls, with the requests run
  inside it: ``--toggle-collect``) and each candidate's count is dumped when it returns
  (``--dump-after``). Every user-space instruction the process executes in the counted
  requests is counted, client and server side of the test client, Python and C (the
  database driver and libpq included); the kernel's work in system calls (a round
  trip's sends, receives and waits) is not, nor is the database's or Redis's. Before
  each candidate's count the heap is collected and frozen (``gc.freeze``), so that a
  full collection of what the set-up left cannot land in one candidate's count; the
  young generations' collections are counted. ``PYTHONHASHSEED=0`` makes runs repeat
  (within a few tenths of a percent);
- under ``strace`` (when installed), without valgrind: the SQL statements each request
  runs (``execute`` calls on the driver's cursors, on Django's connection and on
  occupy's own) and its round trips to each server (the sends on each socket, between
  markers the driver leaves in the trace).

Figures: instructions per request (``Ir``), the candidate's ratio to plain DRF by
instructions (plain's ``Ir`` over the candidate's, like a rate ratio: higher is
faster), statements and round trips per request. Instructions are not time: a round
trip to a server costs its latency and the kernel's work, which no instruction count
shows, a commit on the server its WAL flush, and a cache miss more than an instruction.
Valgrind runs the process some 50 times slower: a run takes a few minutes.
"""

from __future__ import annotations

import gc
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

REQUESTS = 40
WARMUP = 30
#: Requests per candidate in the strace run (counts are exact: fewer suffice).
COUNTED = 20
MARK = "/nonexistent-bench-http-mark"


def _candidates() -> tuple[dict[str, Callable[[int], None]], Callable[[], None]]:
    """Make the rows (this process's own: another run may share the database) and
    return each route's ``fn(n)`` and what deletes the rows."""
    from django.conf import settings
    from django.contrib.auth.models import User

    from bench.http import patcher, persistent_connections
    from bench.http_api import ROUTES
    from occupy.backends import get_backend
    from tests.testapp.models import Book

    persistent_connections()
    routes = list(ROUTES)
    if "redis" not in settings.OCCUPY["BACKENDS"]:
        routes = [r for r in routes if r not in ("redis", "floor")]
    user = User.objects.create(username=f"bench-http-ir-{os.getpid()}", is_superuser=True)
    books = {
        route: Book.objects.create(name=f"bench-http-ir-{route}", status="a") for route in routes
    }

    def cleanup() -> None:
        Book.objects.filter(pk__in=[b.pk for b in books.values()]).delete()
        user.delete()
        if "redis" in books:  # the key's fence counter outlives its lock
            from django_redis import get_redis_connection

            backend = get_backend("redis")
            get_redis_connection("redis").delete(*backend.keys(books["redis"].occupy_key))

    return {route: patcher(route, books[route].pk, user) for route in routes}, cleanup


def drive(mode: str, out: Path, requests: int, warmup: int) -> None:
    """The driver: ``mode`` ``"ir"`` (under callgrind) or ``"count"`` (under strace);
    writes the candidates in their order (and the counts) to ``out``."""
    from bench.common import setup_django

    setup_django("postgresql")
    from django.test.utils import override_settings

    with override_settings(ROOT_URLCONF="bench.http_api", DEBUG=False):
        candidates, cleanup = _candidates()
        try:
            result: dict[str, Any] = {"order": list(candidates)}
            for route, fn in candidates.items():
                fn(warmup)
                # What the warm-up and set-up left is never scanned again: a full
                # collection of the whole heap would land in one candidate's count.
                gc.collect()
                gc.freeze()
                if mode == "ir":
                    sys.call_tracing(fn, (requests,))
                else:
                    result[route] = _count(route, fn, requests)
                gc.unfreeze()
        finally:
            cleanup()
    out.write_text(json.dumps(result))


def _count(route: str, fn: Callable[[int], None], requests: int) -> dict[str, Any]:
    """Run ``fn(requests)`` counting each cursor's ``execute`` calls, by connection,
    between two markers in the strace output; return the counts and the sockets."""
    import psycopg
    from django.db import connection

    executes: Counter[str] = Counter()
    occupy_fds: set[int] = set()
    app = connection.connection
    original = psycopg.Cursor.execute

    def execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.connection is app:
            executes["app"] += 1
        else:
            executes["occupy"] += 1
            occupy_fds.add(self.connection.fileno())
        return original(self, *args, **kwargs)

    psycopg.Cursor.execute = execute  # type: ignore[method-assign]
    try:
        os.path.exists(f"{MARK}-begin-{route}")
        fn(requests)
        os.path.exists(f"{MARK}-end-{route}")
    finally:
        psycopg.Cursor.execute = original  # type: ignore[method-assign]
    return {
        "executes": dict(executes),
        "app_fd": app.fileno(),
        "occupy_fds": sorted(occupy_fds),
        "sockets": _sockets(),
        "requests": requests,
    }


def _sockets() -> dict[int, int]:
    """Return this process's TCP sockets: file descriptor → the peer's port."""
    inodes: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in list(f)[1:]:
                fields = line.split()
                inodes[fields[9]] = int(fields[2].rsplit(":", 1)[1], 16)
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        match = re.fullmatch(r"socket:\[(\d+)\]", target)
        if match and match[1] in inodes:
            found[int(fd)] = inodes[match[1]]
    return found


def _round_trips(trace: Path, counts: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Return each candidate's sends by connection, from the strace output."""
    sends: dict[str, Counter[int]] = {}
    current: Counter[int] | None = None
    for line in trace.read_text().splitlines():
        mark = re.search(rf'"{MARK}-(begin|end)-(\w+)"', line)
        if mark:
            current = sends.setdefault(mark[2], Counter()) if mark[1] == "begin" else None
            continue
        send = re.match(r"(?:\d+\s+)?(?:sendto|sendmsg|write)\((\d+),", line)
        if send and current is not None:
            current[int(send[1])] += 1
    by_route = {}
    for route in counts["order"]:
        c = counts[route]
        ports = {int(fd): port for fd, port in c["sockets"].items()}
        trips: Counter[str] = Counter()
        for fd, n in sends.get(route, Counter()).items():
            port = ports.get(fd)
            if fd == c["app_fd"]:
                trips["app"] += n
            elif fd in c["occupy_fds"]:
                trips["occupy"] += n
            elif port == 6379:
                trips["redis"] += n
        by_route[route] = dict(trips)
    return by_route


def _totals(dump: Path) -> int:
    for line in dump.read_text().splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise ValueError(f"{dump}: no totals line")


def main(argv: list[str] | None = None) -> None:
    """Run the driver under callgrind and strace and print the table. ``--keep DIR``
    keeps callgrind's dumps in ``DIR`` (for ``callgrind_annotate``)."""
    argv = argv or []
    if not shutil.which("valgrind"):
        print("\n## PATCH through DRF by instructions: skipped (valgrind is not installed)")
        return
    keep = Path(argv[argv.index("--keep") + 1]) if "--keep" in argv else None
    with tempfile.TemporaryDirectory(prefix="bench-http-ir-") as tmp:
        work = keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for old in work.glob("callgrind.out.*"):
            old.unlink()
        driver = [sys.executable, "-m", "bench.http_instructions"]
        # The same string hashes every run: dict and set layouts, so counts, repeat.
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--collect-atstart=no",
                "--toggle-collect=sys_call_tracing",
                "--dump-after=sys_call_tracing",
                f"--log-file={work}/valgrind.log",
                f"--callgrind-out-file={work}/callgrind.out",
                *driver,
                "ir",
                str(work / "ir.json"),
                str(REQUESTS),
                str(WARMUP),
            ],
            check=True,
            env=env,
        )
        order = json.loads((work / "ir.json").read_text())["order"]
        dumps = sorted(work.glob("callgrind.out.*"), key=lambda p: int(p.suffix[1:]))
        if len(dumps) != len(order):
            raise RuntimeError(f"{len(dumps)} callgrind dumps for {len(order)} candidates")
        ir = {route: _totals(dump) / REQUESTS for route, dump in zip(order, dumps, strict=True)}
        counts: dict[str, Any] | None = None
        trips: dict[str, dict[str, int]] | None = None
        if shutil.which("strace"):
            trace = work / "strace.txt"
            subprocess.run(
                [
                    "strace",
                    "-f",
                    "-qq",
                    "-e",
                    "trace=sendto,sendmsg,write,access,newfstatat,stat",
                    "-o",
                    str(trace),
                    *driver,
                    "count",
                    str(work / "count.json"),
                    str(COUNTED),
                    str(WARMUP),
                ],
                check=True,
                env=env,
            )
            counts = json.loads((work / "count.json").read_text())
            trips = _round_trips(trace, counts)
    print_table(ir, counts, trips)


NAMES = {
    "plain": "plain DRF ModelViewSet",
    "floor": "plain DRF + 2 raw Redis round trips",
    "conditional": "ConditionalMixin (If-Match)",
    "txfloor": "ConditionalMixin + a raw transaction lock",
    "redis": "OccupyViewMixin, Redis backend",
    "database": "OccupyViewMixin, database backend",
}


def print_table(
    ir: dict[str, float],
    counts: dict[str, Any] | None,
    trips: dict[str, dict[str, int]] | None,
) -> None:
    """Print instructions, their ratio to plain DRF, statements and round trips."""
    print("\n## PATCH of one field through DRF, PostgreSQL, test client: instructions")
    print(
        f"callgrind, {REQUESTS} requests per candidate after {WARMUP} of warm-up; "
        "× plain = plain's Ir / the candidate's (target: database ≥ 0.95×)"
    )
    header = "  candidate                                   Ir/request  × plain"
    if counts is not None:
        header += "  SQL app+occupy/req  round trips app+occupy+redis/req"
    print(header)
    for route, value in ir.items():
        line = f"  {NAMES[route].ljust(42)} {value:>11,.0f}  {ir['plain'] / value:6.2f}×"
        if counts is not None and trips is not None:
            c = counts[route]
            n = c["requests"]
            ex = c["executes"]
            t = trips[route]
            line += (
                f"  {ex.get('app', 0) / n:5.2f} + {ex.get('occupy', 0) / n:4.2f}"
                f"       {t.get('app', 0) / n:5.2f} + {t.get('occupy', 0) / n:4.2f}"
                f" + {t.get('redis', 0) / n:4.2f}"
            )
        print(line)
    for occupied, floor in (("redis", "floor"), ("database", "txfloor")):
        if occupied in ir and floor in ir:
            print(f"  {NAMES[occupied]} / its floor: {ir[floor] / ir[occupied]:.2f}×")


if __name__ == "__main__":
    drive(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
