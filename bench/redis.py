"""Redis locks, side by side: ``python -m bench redis``.

1. Uncontended acquire + release on one key, one process: occupy's ``RedisBackend``
   (through ``occupy.acquire`` / ``occupy.release``, fences and re-entry included) against
   redis-py's ``redis.lock.Lock`` and the floor (``SET NX PX`` + ``EVALSHA``
   compare-and-delete on the raw client), on the same server and connection pool.
2. Contended: four processes take one key in a loop with a short critical section;
   sections per second and the worst wait, against python-redis-lock (wakes waiters
   with ``BLPOP``) and redis-py's ``Lock`` (polls every 0.1 s).

Keys live under the test settings' Redis prefix and database (``OCCUPY_TEST_REDIS_DB``)
and are deleted afterwards.
"""

from __future__ import annotations

import multiprocessing
import os
import secrets
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from bench.common import Result, alternate, occupy_cycle, print_table, setup_django

#: The four processes of the contended run, and their critical section (a sleep, like a
#: short write elsewhere).
PROCESSES = 4
HOLD = 0.0005
SECONDS = 2.0
ROUNDS = 3

_ctx = multiprocessing.get_context("spawn")

_COMPARE_AND_DELETE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def _prefix() -> str:
    from django.conf import settings

    return f"{settings.REDIS_PREFIX}bench:"


def _client() -> Any:
    from django_redis import get_redis_connection

    return get_redis_connection("redis")


#: The commands each uncontended candidate sends itself; commands run inside a script
#: are counted by Redis under their own names too, so only these are summed.
_TOP_LEVEL = {
    "occupy RedisBackend": ["evalsha"],
    "redis-py Lock": ["set", "evalsha"],
    "raw floor (SET NX PX + EVALSHA)": ["set", "evalsha"],
}


def server_cost(candidates: dict[str, Any], ops: int = 1000) -> dict[str, float]:
    """Return each candidate's Redis server time per acquire + release, in µs, from the
    server's own ``commandstats`` (steadier than rates: it leaves out the round trip)."""
    client = _client()
    cost = {}
    for name, fn in candidates.items():
        client.config_resetstat()
        fn(ops)
        stats = client.info("commandstats")
        cost[name] = (
            sum(stats.get(f"cmdstat_{command}", {}).get("usec", 0) for command in _TOP_LEVEL[name])
            / ops
        )
    return cost


def uncontended() -> tuple[list[Result], dict[str, float]]:
    """Time acquire + release on a free key for each candidate, rounds alternating;
    return the rates and each candidate's server time per pair."""
    import redis.lock

    client = _client()
    prefix = _prefix()

    lock = redis.lock.Lock(client, f"{prefix}redis-py", timeout=30, blocking=False)

    def redis_py_lock(n: int) -> None:
        for _ in range(n):
            lock.acquire()
            lock.release()

    sha = client.script_load(_COMPARE_AND_DELETE)
    name, token = f"{prefix}floor", secrets.token_hex(16)

    def floor(n: int) -> None:
        set_, evalsha = client.set, client.evalsha
        for _ in range(n):
            set_(name, token, nx=True, px=30000)
            evalsha(sha, 1, name, token)

    occupy_backend = occupy_cycle("uncontended", "redis", ttl=30)
    candidates = {
        "occupy RedisBackend": occupy_backend,
        "redis-py Lock": redis_py_lock,
        "raw floor (SET NX PX + EVALSHA)": floor,
    }
    results = alternate(candidates, ops=1500, rounds=15, warmup=300)
    return results, server_cost(candidates)


# --- contended ---------------------------------------------------------------------------
def _take_and_give(candidate: str) -> tuple[Callable[[], Any], Callable[[Any], None]]:
    """Return how ``candidate`` takes the contended key (raising on a timeout) and gives
    back what taking returned."""
    import redis.lock
    import redis_lock

    import occupy

    if candidate == "occupy":
        return (
            lambda: occupy.acquire("contended", ttl=10, timeout=10, backend="redis"),
            occupy.release,
        )
    client = _client()
    key = f"{_prefix()}contended-{candidate}"
    if candidate == "python-redis-lock":
        lock: Any = redis_lock.Lock(client, key, expire=10)
        acquire = partial(lock.acquire, timeout=10)
    else:
        lock = redis.lock.Lock(client, key, timeout=10, sleep=0.1, blocking_timeout=10)
        acquire = lock.acquire

    def take() -> Any:
        if not acquire():
            raise TimeoutError(key)
        return lock

    return take, lambda held: held.release()


def _section_loop(candidate: str, seconds: float) -> tuple[int, float, float]:
    """Take the key in a loop for ``seconds``; return (sections, worst wait, last exit)."""
    take, give = _take_and_give(candidate)
    sections, worst = 0, 0.0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        asked = time.monotonic()
        held = take()
        worst = max(worst, time.monotonic() - asked)
        time.sleep(HOLD)
        give(held)
        sections += 1
    return sections, worst, time.monotonic()


def _worker(commands: Any, answers: Any, barrier: Any) -> None:
    import django

    django.setup()
    while (command := commands.get()) is not None:
        candidate, seconds = command
        barrier.wait(timeout=60)
        started = time.monotonic()
        sections, worst, ended = _section_loop(candidate, seconds)
        answers.put((started, sections, worst, ended))


def contended() -> tuple[list[Result], dict[str, list[float]]]:
    """Run the candidates in four processes, rounds alternating; return the sections per
    second of each and the worst wait of each round."""
    candidates = ["occupy", "python-redis-lock", "redis-py Lock"]
    barrier = _ctx.Barrier(PROCESSES)
    answers = _ctx.Queue()
    queues = [_ctx.Queue() for _ in range(PROCESSES)]
    procs = [_ctx.Process(target=_worker, args=(q, answers, barrier)) for q in queues]
    for proc in procs:
        proc.start()
    rates: dict[str, list[float]] = {c: [] for c in candidates}
    worst: dict[str, list[float]] = {c: [] for c in candidates}
    try:
        for round_ in range(ROUNDS + 1):  # the first round warms up and is not counted
            for candidate in candidates:
                for q in queues:
                    q.put((candidate, SECONDS if round_ else 0.3))
                got = [answers.get(timeout=120) for _ in procs]
                if round_:
                    began = min(g[0] for g in got)
                    ended = max(g[3] for g in got)
                    rates[candidate].append(sum(g[1] for g in got) / (ended - began))
                    worst[candidate].append(max(g[2] for g in got))
    finally:
        for q in queues:
            q.put(None)
        for proc in procs:
            proc.join(timeout=30)
    results = [Result(f"{c}", rates[c], unit="sections/s") for c in candidates]
    return results, worst


def main() -> None:
    """Run both benchmarks and print their tables."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    setup_django()
    client = _client()
    try:
        results, server = uncontended()
        print_table(
            "Redis: uncontended acquire + release (one process)",
            results,
            reference="redis-py Lock",
            target="≥ 1.0× redis-py Lock and ≥ 0.9× the raw floor",
        )
        ratios = results[0].ratios(results[-1])
        print(
            f"  occupy / raw floor: {results[0].ratio(results[-1]):.2f}× "
            f"({min(ratios):.2f}–{max(ratios):.2f})"
        )
        print(
            "  Redis server time per acquire + release (commandstats): "
            + ", ".join(f"{name} {usec:.1f} µs" for name, usec in server.items())
        )
        results, worst = contended()
        print_table(
            f"Redis: {PROCESSES} processes on one key, {HOLD * 1000:g} ms sections",
            results,
            reference="python-redis-lock",
            target="≥ 1.0× python-redis-lock's sections/s, worst wait < 50 ms",
        )
        for name, waits in worst.items():
            print(
                f"  worst wait {name}: median of rounds {statistics.median(waits) * 1000:,.1f}"
                f" ms, highest {max(waits) * 1000:,.1f} ms"
            )
    finally:
        names = list(client.scan_iter(match=f"{_prefix()}*", count=1000))
        from occupy.backends import get_backend

        backend = get_backend("redis")
        for key in ("uncontended", "contended"):
            names += [name for name in backend.keys(key) if client.exists(name)]
        if names:
            client.delete(*names)
