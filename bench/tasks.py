"""Tasks that must not run twice: occupy.celery against celery-once and celery-singleton.

``python -m bench tasks``: for each contender, with Celery's default (early) acks and
with late acks (``task_acks_late`` + ``task_reject_on_worker_lost``), on one prefork worker
(3 processes) with Redis as broker and the runs recorded in PostgreSQL:

1. **burst**: 4 processes enqueue each of 3 keys 5 times at once (60 enqueues) while
   nothing of those keys runs; ``duplicates`` counts the runs beyond one per key
   (``overlaps``: pairs of runs of a key that overlapped in time);
2. **kill**: for each key, one task is enqueued and its pool process SIGKILLed one second
   into its 3-second body; then the key is enqueued again every 0.25 s. ``stuck`` is the
   seconds from the kill until a run of the key started again (capped at
   :data:`CAP`), ``lost`` the killed tasks that never ran to their end.

3. **redelivered while running**: one 8-second task with late acks and a Redis
   visibility timeout of 4 s, so the broker hands the running task out again to the
   worker's free processes; ``runs`` counts its runs within :data:`WINDOW` seconds,
   ``overlaps`` the pairs of runs that ran at once.

occupy's lease ttl is :data:`TTL`. The peers run with their defaults: celery-once's lock
lives an hour, celery-singleton's until the task ends (no expiry). The peers are
bench-only installs (``pip install celery-once celery-singleton``).
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import signal
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from bench.common import setup_django

TTL = 3.0
CAP = 20.0
#: How long the redelivery round watches.
WINDOW = 25.0
KEYS = ["k1", "k2", "k3"]
RESULTS = Path(__file__).resolve().parent / "results" / "tasks.txt"


def _clear_peer_locks(url: str) -> None:
    """Free every contender's locks of the bench's keys (a purged queue leaves claims)."""
    import redis

    import occupy
    from occupy.taskcore import once_key

    for key in KEYS:
        for name in (f"bench:{key}", once_key("bench.occupy", f"bench:{key}")):
            occupy.release(occupy.takeover(name, owner="bench", ttl=1, backend="redis"))

    client = redis.Redis.from_url(url)
    for pattern in ("qo_*", "SINGLETONLOCK_*"):
        for name in client.scan_iter(match=pattern):
            client.delete(name)


def _run(contender: str, acks: str) -> dict[str, Any]:
    from tests.support import celery_procs as cp

    queue = f"{cp.QUEUE_PREFIX}-bench-tasks"
    url = cp.REDIS_URL
    environ = cp.env(url, queue, "redis", TTL, OCCUPY_BENCH_ACKS=acks, OCCUPY_TEST_CELERY_BODY="3")
    cp.purge(url, queue)
    _clear_peer_locks(url)
    cp.create_tables([])
    worker = [*cp.worker_command(f"bench-{contender}", queue, 3)]
    worker[worker.index("tests.support.celery_app")] = "bench.celery_app"
    out: dict[str, Any] = {"contender": contender, "acks": acks}
    with TemporaryDirectory() as logs, cp.processes([worker], environ, Path(logs)):
        # 1. burst
        import subprocess
        import sys

        # The four send together, 8 s from now (they start one after another).
        at = {"OCCUPY_TEST_CELERY_AT": str(time.time() + 8)}
        senders = [
            subprocess.Popen(
                [sys.executable, "-m", "bench.celery_app", contender, "5", *KEYS],
                env={**environ, **at},
                cwd=cp.ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for _ in range(4)
        ]
        for proc in senders:
            proc.communicate(timeout=120)
        cp.wait_for(lambda: len(cp.sql("SELECT 1 FROM celery_runs")) >= len(KEYS), 60, "runs")
        cp.wait_for(
            lambda: not cp.sql("SELECT 1 FROM celery_runs WHERE ended IS NULL"), 120, "ends"
        )
        time.sleep(1)
        runs = cp.sql("SELECT key, started, ended FROM celery_runs")
        out["duplicates"] = len(runs) - len(KEYS)
        out["overlaps"] = sum(
            1
            for a, b in itertools.combinations(runs, 2)
            if a[0] == b[0] and a[1] < (b[2] or a[1]) and b[1] < (a[2] or b[1])
        )
        # 2. kill
        os.environ.update({k: v for k, v in environ.items() if k.startswith("OCCUPY_")})
        from bench import celery_app as bapp

        stuck, killed = [], []
        for key in KEYS:
            before = cp.db_now()
            bapp.send(contender, key)

            def started(key: str = key, before: Any = before) -> list[tuple[Any, ...]]:
                return cp.sql(
                    "SELECT id, task_id, pid FROM celery_runs WHERE key = %s AND started > %s",
                    [key, before],
                )

            cp.wait_for(lambda: bool(started()), 60, f"a run of {key}")
            time.sleep(1)
            _row, task_id, pid = started()[0]
            os.kill(pid, signal.SIGKILL)
            killed_at, t0 = cp.db_now(), time.monotonic()
            killed.append(task_id)
            while time.monotonic() - t0 < CAP:
                if cp.sql(
                    "SELECT 1 FROM celery_runs WHERE key = %s AND started > %s", [key, killed_at]
                ):
                    break
                bapp.send(contender, key)
                time.sleep(0.25)
            stuck.append(time.monotonic() - t0)
        cp.wait_for(
            lambda: (
                not cp.sql(
                    "SELECT 1 FROM celery_runs WHERE ended IS NULL "
                    "AND started > now() - interval '10 s'"
                )
            ),
            60,
            "the last runs to end",
        )
        ended = {r[0] for r in cp.sql("SELECT task_id FROM celery_runs WHERE ended IS NOT NULL")}
        out["lost"] = sum(1 for t in killed if t not in ended)
        out["stuck"] = stuck
    cp.purge(url, queue)
    _clear_peer_locks(url)
    cp.drop_tables()
    return out


def _redelivery(contender: str) -> dict[str, Any]:
    """One task of 8 s, with a 4 s visibility timeout (late acks) and worker processes
    free for its copies: count its runs and the pairs of them that overlapped within
    :data:`WINDOW` seconds."""
    import subprocess
    import sys

    from tests.support import celery_procs as cp

    queue = f"{cp.QUEUE_PREFIX}-bench-tasks"
    url = cp.REDIS_URL
    environ = cp.env(
        url,
        queue,
        "redis",
        TTL,
        OCCUPY_BENCH_ACKS="late",
        OCCUPY_BENCH_VISIBILITY="4",
        OCCUPY_TEST_CELERY_BODY="8",
    )
    cp.purge(url, queue)
    _clear_peer_locks(url)
    cp.create_tables([])
    worker = [*cp.worker_command(f"bench-{contender}", queue, 3)]
    worker[worker.index("tests.support.celery_app")] = "bench.celery_app"
    with TemporaryDirectory() as logs, cp.processes([worker], environ, Path(logs)):
        sender = subprocess.Popen(
            [sys.executable, "-m", "bench.celery_app", contender, "1", KEYS[0]],
            env=environ,
            cwd=cp.ROOT,
            stdout=subprocess.DEVNULL,
        )
        sender.wait(timeout=120)
        time.sleep(WINDOW)
        runs = cp.sql("SELECT key, started, coalesce(ended, clock_timestamp()) FROM celery_runs")
    cp.purge(url, queue)
    _clear_peer_locks(url)
    cp.drop_tables()
    return {
        "runs": len(runs),
        "overlaps": sum(
            1
            for a, b in itertools.combinations(runs, 2)
            if a[0] == b[0] and a[1] < b[2] and b[1] < a[2]
        ),
    }


def _row(r: dict[str, Any]) -> str:
    stuck = ", ".join(f">{CAP:.0f}" if s >= CAP else f"{s:.1f}" for s in r["stuck"])
    return (
        f"{r['contender']:<17} {r['acks']:<6} {r['duplicates']:>10} {r['overlaps']:>8} "
        f"{r['lost']:>5}   {stuck}"
    )


def main() -> None:
    """Run the task storm for each contender and acks setting; print and save the table."""
    if importlib.util.find_spec("celery") is None:
        print("Task storm: skipped (celery is not installed: pip install -e '.[celery]')")
        return
    setup_django("postgresql")

    contenders = ["occupy", "celery-once", "celery-singleton"]
    missing = [c for c in contenders[1:] if c.replace("-", "_") not in _installed()]
    header = (
        f"Task storm: 1 prefork worker x 3 processes, Redis broker, runs of 3 s; occupy ttl "
        f"{TTL:.0f} s; stuck capped at {CAP:.0f} s\n"
        f"{'contender':<17} {'acks':<6} {'duplicates':>10} {'overlaps':>8} {'lost':>5}   "
        "stuck after a kill (s, per key)"
    )
    print(header)
    lines = [header]
    for acks in ("early", "late"):
        for contender in contenders:
            if contender in missing:
                continue
            line = _row(_run(contender, acks))
            print(line, flush=True)
            lines.append(line)
    header = (
        f"\nRedelivered while running: 1 task of 8 s, 3 worker processes, late acks, Redis "
        f"visibility timeout 4 s, for {WINDOW:.0f} s\n{'contender':<17} {'runs':>5} {'overlaps':>8}"
    )
    print(header)
    lines.append(header)
    for contender in contenders:
        if contender in missing:
            continue
        r = _redelivery(contender)
        lines.append(f"{contender:<17} {r['runs']:>5} {r['overlaps']:>8}")
        print(lines[-1], flush=True)
    for contender in missing:
        lines.append(f"{contender}: skipped (not installed: pip install {contender})")
        print(lines[-1])
    RESULTS.write_text("\n".join(lines) + "\n")


def _installed() -> set[str]:
    return {n for n in ("celery_once", "celery_singleton") if importlib.util.find_spec(n)}
