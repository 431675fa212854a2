"""Contended increments over real HTTP: several client processes, one object, gunicorn.
Run: ``python -m bench http_contended`` (``make bench`` runs it last).

The site is the benchmark's routes (:mod:`bench.http_api`: one viewset per candidate on
the test app's ``Book``) served by gunicorn with ``WORKERS`` sync workers on PostgreSQL.
Each client process, signed in by HTTP Basic, repeats for a fixed time: ``GET`` the
object, ``PATCH`` its counter (``note``) to the value read plus one, with ``If-Match``
set to the ``GET``'s ETag where the route gives one; on 412 it reads again and retries
at once, on 423 it sleeps the ``Retry-After`` the answer gives (uncapped, but never past
the end of the run) and retries. An increment counts when its ``PATCH`` is answered 200.

Per candidate and number of clients:

- ``incr/s``: successful increments per second (goodput);
- ``lost``: successful increments minus how far the counter moved: an increment
  answered 200 whose write another one overwrote (plain DRF saves what it read);
- ``p50``/``p99``: time from an increment's first ``GET`` to its 200, retries included;
- ``412``/``423``: the refusals the clients retried; ``slept``: the share of the
  clients' time spent asleep on ``Retry-After``; ``other``: any other answer (a 5xx
  or a refused connection), which should never happen.

Candidates: plain DRF, ``ConditionalMixin``, ``OccupyViewMixin`` with its leases on
Redis and on the database backend (PostgreSQL), nobody holding an edit lease
(targets: 0 × 423, goodput ≥ ``ConditionalMixin``'s, p99 ≤ 1 s at 8 clients); then
``OccupyViewMixin`` again with one more client, an editor, that holds the object's edit
lease ``EDITOR_HOLD`` s out of every ``EDITOR_HOLD + EDITOR_FREE`` s (a lease of
``EDITOR_TTL`` s, released when done) and increments under it with its token; then
*queued editors* on ``OccupyViewMixin`` (Redis, database): each client takes the edit
lease with ``Prefer: wait`` (waiting in the key's queue in the server), then ``GET``,
``PATCH`` under the lease with ``If-Match``, and releases it; its latency runs from the
lease request to the ``PATCH``'s 200 (targets: 0 × 412, 0 × 423, 0 lost, goodput ≥ 2×
``ConditionalMixin``'s, p99 ≤ 1.5× p50). A waiting lease request holds its worker, and
the holder needs a worker for its ``GET``, ``PATCH`` and release: with 8 clients on 4
sync workers every worker would wait and nobody could finish, so the queued rows are
served by the same 4 workers with ``QUEUED_THREADS`` threads each (gunicorn's
``gthread`` worker), which docs/howto/drf.md asks of a deployment with queued editors.

``BENCH_HTTP_SECONDS`` sets the length of a cell (default 20 s). Every process this
starts (gunicorn, the clients) is stopped by its PID; the rows, users and Redis keys it
made are deleted afterwards.
"""

from __future__ import annotations

import base64
import http.client
import json
import math
import multiprocessing
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SECONDS = float(os.environ.get("BENCH_HTTP_SECONDS", "20"))
CLIENTS = (4, 8)
WORKERS = 4
PASSWORD = "bench-http-pass"
#: The editor of the lease rows: holds a lease of EDITOR_TTL s for EDITOR_HOLD s, then
#: leaves the object free for EDITOR_FREE s.
EDITOR_TTL = 2
EDITOR_HOLD = 1.5
EDITOR_FREE = 1.5
#: The load average when the run began and ended.
LOAD: list[float] = []
#: Bounds on anything that waits: a request, the server's start, a client's end.
REQUEST_TIMEOUT = 60
START_TIMEOUT = 60


@dataclass
class Candidate:
    """One row of the table: a route of :mod:`bench.http_api` and whether an editor
    holds the edit lease part of the time."""

    route: str
    name: str
    editor: bool = False
    #: Its clients queue for the edit lease (``Prefer: wait``) instead of retrying,
    #: on workers of ``QUEUED_THREADS`` threads.
    queued: bool = False

    @property
    def threads(self) -> int:
        """Return the threads of each gunicorn worker serving this candidate."""
        return QUEUED_THREADS if self.queued else 1


CANDIDATES = [
    Candidate("plain", "plain DRF ModelViewSet"),
    Candidate("conditional", "ConditionalMixin"),
    Candidate("redis", "OccupyViewMixin, Redis"),
    Candidate("database", "OccupyViewMixin, database (PostgreSQL)"),
    Candidate("redis", "OccupyViewMixin, Redis, + an editor", editor=True),
    Candidate("database", "OccupyViewMixin, database, + an editor", editor=True),
    Candidate("redis", "OccupyViewMixin, Redis, queued editors", queued=True),
    Candidate("database", "OccupyViewMixin, database, queued editors", queued=True),
]
#: The longest wait a queued editor asks for (``Prefer: wait``; the server caps it by
#: ``LEASE_WAIT_MAX``), and the ttl of its lease.
QUEUED_WAIT = 10
QUEUED_TTL = 10
#: Threads per worker for the queued rows. A gthread worker accepts connections while
#: its threads are busy and queues them, so the kernel may hand every client to one
#: worker: with 4 threads a worker, 8 clients stalled until their waits were spent
#: (0.8 increments/s). Each worker has a thread for every client and one more.
QUEUED_THREADS = max(CLIENTS) + 1


# --- in the client processes: HTTP only ---------------------------------------------
@dataclass
class Tally:
    """What one client process saw."""

    ok: int = 0
    latencies: list[float] = field(default_factory=list)
    answers: Counter[int] = field(default_factory=Counter)
    slept: float = 0.0
    elapsed: float = 0.0
    #: How long each request took (any answer), seconds.
    requests: list[float] = field(default_factory=list)
    retry_after: Counter[str] = field(default_factory=Counter)


def _timed(
    tally: Tally,
    port: int,
    method: str,
    path: str,
    auth: str,
    body: dict | None = None,
    **headers: str,
) -> tuple[int, Any, Any]:
    """Send one request (:func:`_request`), adding its time to ``tally``."""
    began = time.perf_counter()
    try:
        return _request(port, method, path, auth, body, **headers)
    finally:
        tally.requests.append(time.perf_counter() - began)


def _request(
    port: int, method: str, path: str, auth: str, body: dict | None = None, **headers: str
) -> tuple[int, Any, Any]:
    """Send one request on a new connection (gunicorn's sync workers close each one);
    return the status, the headers and the JSON body (0 and ``None`` s if the
    connection failed)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT)
    data = None if body is None else json.dumps(body).encode()
    sent = {"Authorization": auth, "Accept": "application/json", **headers}
    if data is not None:
        sent["Content-Type"] = "application/json"
    try:
        connection.request(method, path, body=data, headers=sent)
        response = connection.getresponse()
        raw = response.read()
    except OSError:
        return 0, None, None
    finally:
        connection.close()
    try:
        parsed = json.loads(raw) if raw else None
    except ValueError:
        parsed = None
    return response.status, response.headers, parsed


def _sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.time()))


def _retry_after(head: Any, tally: Tally) -> float:
    """Return the seconds a 423 asks to wait (1 when it does not say: counted)."""
    value = head.get("Retry-After") if head is not None else None
    tally.retry_after[str(value)] += 1
    try:
        return max(0.0, float(int(value)))
    except (TypeError, ValueError):
        return 1.0


def _increment(
    port: int, path: str, auth: str, deadline: float, tally: Tally, **headers: str
) -> bool:
    """GET, then PATCH the counter plus one until a PATCH is 200 or the run ends;
    return whether the increment succeeded."""
    began = time.perf_counter()
    while time.time() < deadline:
        status, head, body = _timed(tally, port, "GET", path, auth)
        if status != 200:
            tally.answers[status] += 1
            time.sleep(0.01)
            continue
        etag = head.get("ETag")
        conditional = {"If-Match": etag} if etag else {}
        status, head, _ = _timed(
            tally,
            port,
            "PATCH",
            path,
            auth,
            {"note": str(int(body["note"] or 0) + 1)},
            **conditional,
            **headers,
        )
        if status == 200:
            tally.ok += 1
            tally.latencies.append(time.perf_counter() - began)
            return True
        tally.answers[status] += 1
        if status == 423:
            wait = min(_retry_after(head, tally), max(0.0, deadline - time.time()))
            time.sleep(wait)
            tally.slept += wait
        elif status != 412:
            time.sleep(0.01)  # not a contract answer: do not spin on it
    return False


def _queued_increment(port: int, path: str, auth: str, deadline: float, tally: Tally) -> bool:
    """Take the edit lease waiting in the key's queue (``Prefer: wait``), GET, PATCH
    the counter plus one under the lease, release it; again until a PATCH is 200 or
    the run ends. Return whether the increment succeeded."""
    began = time.perf_counter()
    lease = f"{path}lease/"
    while time.time() < deadline:
        wait = max(1, min(QUEUED_WAIT, math.ceil(deadline - time.time())))
        status, head, body = _timed(
            tally, port, "POST", lease, auth, {"ttl": QUEUED_TTL}, Prefer=f"wait={wait}"
        )
        if status not in (200, 201):
            if status != 423 or time.time() < deadline:  # not the run's end cutting a wait
                tally.answers[status] += 1
            time.sleep(0.01)  # a 423 once the wait is spent: should not happen
            continue
        token = {"Occupy-Lease": body["token"]}
        try:
            status, head, row = _timed(tally, port, "GET", path, auth)
            if status != 200:
                tally.answers[status] += 1
                continue
            status, head, _ = _timed(
                tally,
                port,
                "PATCH",
                path,
                auth,
                {"note": str(int(row["note"] or 0) + 1)},
                **{"If-Match": head.get("ETag", "*")},
                **token,
            )
            if status == 200:
                tally.ok += 1
                tally.latencies.append(time.perf_counter() - began)
                return True
            tally.answers[status] += 1
        finally:
            _timed(tally, port, "DELETE", lease, auth, **token)
    return False


def writer(
    port: int, path: str, auth: str, start: float, deadline: float, out: Any, queued: bool = False
) -> None:
    """A client: increments from ``start`` until ``deadline`` (as a queued editor if
    ``queued``); put its :class:`Tally`."""
    tally = Tally()
    _sleep_until(start)
    began = time.time()
    increment = _queued_increment if queued else _increment
    while time.time() < deadline:
        increment(port, path, auth, deadline, tally)
    tally.elapsed = time.time() - began
    out.put(("writer", tally))


def editor(port: int, path: str, auth: str, start: float, deadline: float, out: Any) -> None:
    """The editor: takes the edit lease, increments under it for ``EDITOR_HOLD`` s,
    releases it, leaves the object free for ``EDITOR_FREE`` s; again until
    ``deadline``. Its increments count in the totals, not in the latencies."""
    tally = Tally()
    _sleep_until(start)
    began = time.time()
    lease = f"{path}lease/"
    while time.time() < deadline:
        _sleep_until(min(deadline, time.time() + EDITOR_FREE))
        if time.time() >= deadline:
            break
        status, _head, body = _request(port, "POST", lease, auth, {"ttl": EDITOR_TTL})
        if status not in (200, 201):
            tally.answers[1000 + status] += 1  # a refused lease, told apart from writes
            if status == 423:
                time.sleep(0.01)
            continue
        token = body["token"]
        until = min(deadline, time.time() + EDITOR_HOLD)
        while time.time() < until:
            _increment(port, path, auth, until, tally, **{"Occupy-Lease": token})
        _request(port, "DELETE", lease, auth, **{"Occupy-Lease": token})
    tally.elapsed = time.time() - began
    out.put(("editor", tally))


# --- in the benchmark's process ------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_gunicorn(threads: int = 1) -> tuple[subprocess.Popen[bytes], int]:
    """Start gunicorn on a free port with the benchmark's settings (sync workers, or
    ``gthread`` workers of ``threads`` threads); return it and the port once it
    answers."""
    port = _free_port()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.http_settings"}
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "--workers",
            str(WORKERS),
            "--threads",
            str(threads),
            "--bind",
            f"127.0.0.1:{port}",
            "--log-level",
            "warning",
            "--timeout",
            "120",
            "--graceful-timeout",
            "5",
            "django.core.wsgi:get_wsgi_application()",
        ],
        cwd=ROOT,
        env=env,
    )
    deadline = time.time() + START_TIMEOUT
    while time.time() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {server.returncode}")
        if _request(port, "GET", "/plain/", "")[0] != 0:
            return server, port
        time.sleep(0.2)
    stop(server)
    raise RuntimeError(f"gunicorn did not answer within {START_TIMEOUT} s")


def stop(process: Any) -> None:
    """Stop a process this benchmark started (a ``Popen`` or a ``multiprocessing``
    process), by its PID: terminate, wait up to 15 s, then kill."""
    popen = isinstance(process, subprocess.Popen)

    def alive() -> bool:
        return process.poll() is None if popen else bool(process.is_alive())

    def wait() -> None:
        if popen:
            with suppress(subprocess.TimeoutExpired):
                process.wait(timeout=15)
        else:
            process.join(timeout=15)

    if not alive():
        return
    process.terminate()
    wait()
    if alive():
        process.kill()
        wait()


@dataclass
class Cell:
    """The outcome of one candidate with a number of clients."""

    candidate: Candidate
    clients: int
    seconds: float
    writers: list[Tally]
    editor: Tally | None
    moved: int

    @property
    def ok(self) -> int:
        """Return the successful increments, the editor's included."""
        return sum(t.ok for t in self.writers) + (self.editor.ok if self.editor else 0)

    @property
    def lost(self) -> int:
        """Return the increments answered 200 that the counter does not show."""
        return self.ok - self.moved

    def count(self, status: int) -> int:
        """Return how many answers of ``status`` the writers got."""
        return sum(t.answers[status] for t in self.writers)

    def others(self) -> Counter[int]:
        """Return the answers that were neither 200, 412 nor 423 (the editor's too)."""
        total: Counter[int] = Counter()
        for tally in [*self.writers, *([self.editor] if self.editor else [])]:
            total.update({k: v for k, v in tally.answers.items() if k not in (412, 423)})
        return total

    def percentile(self, q: float) -> float:
        """Return the ``q`` quantile of the writers' increment latencies, in seconds."""
        latencies = sorted(x for t in self.writers for x in t.latencies)
        if not latencies:
            return math.nan
        return latencies[min(len(latencies) - 1, math.ceil(q * len(latencies)) - 1)]

    def request_ms(self) -> float:
        """Return the median time of one request of the writers, in milliseconds."""
        times = sorted(x for t in self.writers for x in t.requests)
        return times[len(times) // 2] * 1000 if times else math.nan

    def slept(self) -> float:
        """Return the share of the writers' time spent asleep on ``Retry-After``."""
        elapsed = sum(t.elapsed for t in self.writers)
        return sum(t.slept for t in self.writers) / elapsed if elapsed else 0.0


def run_cell(
    port: int, candidate: Candidate, clients: int, book: Any, auth: dict[str, str]
) -> Cell:
    """Run ``clients`` writers (and the editor) against ``book`` for ``SECONDS``."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    path = f"/{candidate.route}/{book.pk}/"
    start = time.time() + 2.0  # spawned interpreters need a moment to start
    deadline = start + SECONDS
    processes = [
        context.Process(
            target=writer,
            args=(port, path, auth["writer"], start, deadline, out, candidate.queued),
        )
        for _ in range(clients)
    ]
    if candidate.editor:
        processes.append(
            context.Process(target=editor, args=(port, path, auth["editor"], start, deadline, out))
        )
    initial = int(type(book).objects.get(pk=book.pk).note or 0)
    for process in processes:
        process.start()
    tallies: list[tuple[str, Tally]] = []
    try:
        give_up = deadline + 2 * REQUEST_TIMEOUT
        while len(tallies) < len(processes) and time.time() < give_up:
            try:
                tallies.append(out.get(timeout=max(0.1, give_up - time.time())))
            except Exception:  # queue.Empty: the bound is reached
                break
    finally:
        for process in processes:
            stop(process)
    if len(tallies) < len(processes):
        raise RuntimeError(
            f"{len(processes) - len(tallies)} client(s) of {candidate.name} did not finish"
        )
    writers = [tally for role, tally in tallies if role == "writer"]
    editor_tally = next((tally for role, tally in tallies if role == "editor"), None)
    moved = int(type(book).objects.get(pk=book.pk).note or 0) - initial
    return Cell(candidate, clients, SECONDS, writers, editor_tally, moved)


def print_cells(cells: list[Cell]) -> None:
    """Print the table, with each goodput's ratio to ``ConditionalMixin``'s."""
    print(
        f"\n## Contended increments over HTTP: gunicorn ({WORKERS} sync workers), "
        f"PostgreSQL, {SECONDS:g} s per cell"
    )
    print(
        f"load average (1 min) before and after: {LOAD[0]:.1f}, {LOAD[-1]:.1f} "
        f"on {os.cpu_count()} CPUs"
    )
    print(
        "target: OccupyViewMixin without an editor: 0 × 423, goodput ≥ ConditionalMixin's, "
        "p99 ≤ 1 s at 8 clients; every occupy row: 0 lost; queued editors: 0 × 412, "
        "0 × 423, goodput ≥ 2× ConditionalMixin's, p99 ≤ 1.5× p50"
    )
    print(f"  (queued editors: {WORKERS} gthread workers of {QUEUED_THREADS} threads)")
    header = (
        f"  {'clients':>7}  {'candidate':<40} {'incr/s':>7} {'× cond':>6} {'lost':>6} "
        f"{'p50 ms':>7} {'p99 ms':>7} {'req ms':>6} {'412':>6} {'423':>5} "
        f"{'slept':>6}  other"
    )
    print(header)
    for clients in CLIENTS:
        reference = next(
            (c for c in cells if c.clients == clients and c.candidate.route == "conditional"), None
        )
        for cell in (c for c in cells if c.clients == clients):
            rate = cell.ok / cell.seconds
            ratio = (
                rate / (reference.ok / reference.seconds)
                if reference and reference.ok
                else math.nan
            )
            others = ", ".join(f"{k}: {v}" for k, v in sorted(cell.others().items())) or "-"
            note = ""
            if cell.editor is not None:
                note = f" (editor: {cell.editor.ok} incr)"
            print(
                f"  {clients:>7}  {cell.candidate.name:<40} {rate:7.1f} {ratio:5.2f}× "
                f"{cell.lost:6d} {cell.percentile(0.5) * 1000:7.0f} "
                f"{cell.percentile(0.99) * 1000:7.0f} {cell.request_ms():6.0f} "
                f"{cell.count(412):6d} "
                f"{cell.count(423):5d} {cell.slept():6.0%}  {others}{note}"
            )
    print(
        "  (lost: increments answered 200 that the counter does not show; "
        "× cond: goodput over ConditionalMixin's at the same number of clients; "
        "req ms: median time of one request, any answer)"
    )
    retry = Counter[str]()
    for cell in cells:
        for tally in cell.writers:
            retry.update(tally.retry_after)
    if retry:
        print(
            "  Retry-After of the 423s: "
            + ", ".join(f"{k} s: {v}" for k, v in sorted(retry.items()))
        )


def run_cells(
    candidates: list[Candidate], auth: dict[str, str], books: list[Any], cells: list[Cell]
) -> None:
    """Run every candidate with each number of clients on a gunicorn of its kind (sync
    workers, or threaded ones for queued editors), each on a row of its own (added to
    ``books``); add the outcomes to ``cells``. The servers are stopped afterwards."""
    from tests.testapp.models import Book

    servers: dict[int, tuple[subprocess.Popen[bytes], int]] = {}
    try:
        for threads in sorted({c.threads for c in candidates}):
            servers[threads] = start_gunicorn(threads)
        for clients in CLIENTS:
            for candidate in candidates:
                book = Book.objects.create(name=f"bench-contended-{candidate.route}", note="0")
                books.append((candidate.route, book))
                port = servers[candidate.threads][1]
                cells.append(run_cell(port, candidate, clients, book, auth))
    finally:
        for server, _port in servers.values():
            stop(server)


def main() -> None:
    """Run every candidate with each number of clients; print the table."""
    import importlib.util

    from django.core.exceptions import ImproperlyConfigured
    from django.db import OperationalError

    from bench.common import setup_django

    if importlib.util.find_spec("gunicorn") is None:
        print(
            "\n## Contended increments over HTTP: skipped (gunicorn is not installed: "
            "pip install -e '.[bench]')"
        )
        return
    try:
        setup_django("postgresql")
    except (ImproperlyConfigured, OperationalError) as e:
        print(
            f"\n## Contended increments over HTTP: skipped (PostgreSQL: {e}; "
            "`make databases` creates the database)"
        )
        return
    from django.conf import settings
    from django.contrib.auth.models import User

    from bench.http import print_machine
    from occupy.backends import get_backend
    from tests.testapp.models import Book

    candidates = list(CANDIDATES)
    if "redis" not in settings.OCCUPY["BACKENDS"]:
        print(f"(the Redis rows are skipped: {settings.SKIPS.get('redis')})")
        candidates = [c for c in candidates if c.route != "redis"]
    print_machine()
    users = {}
    for role in ("writer", "editor"):
        user, _ = User.objects.get_or_create(
            username=f"bench-http-{role}", defaults={"is_superuser": True}
        )
        user.set_password(PASSWORD)
        user.save()
        users[role] = user
    auth = {
        role: "Basic " + base64.b64encode(f"{user.username}:{PASSWORD}".encode()).decode()
        for role, user in users.items()
    }
    books: list[Any] = []
    cells: list[Cell] = []
    LOAD.append(os.getloadavg()[0])
    try:
        run_cells(candidates, auth, books, cells)
    finally:
        Book.objects.filter(pk__in=[book.pk for _, book in books]).delete()
        for user in users.values():
            user.delete()
        if "redis" in settings.OCCUPY["BACKENDS"]:  # fence counters outlive their locks
            from django_redis import get_redis_connection

            backend = get_backend("redis")
            keys = [
                k
                for route, book in books
                if route == "redis"
                for k in backend.keys(book.occupy_key)
            ]
            if keys:
                get_redis_connection("redis").delete(*keys)
    LOAD.append(os.getloadavg()[0])
    print_cells(cells)


if __name__ == "__main__":
    main()
