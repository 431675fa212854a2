"""4. Footprint: bytes per Redis waiter, and a process holding many renewed leases.

(Bytes per held claim on every store come from part 1's sizes: ``scale-footprint-claims``.)

- **Redis, per waiter**: one key held, then ``n`` waiters queued on it by the
  backend's own queueing script (pipelined); ``MEMORY USAGE`` of the key's queue and
  waiters hash, over ``n``. Waiters elsewhere: one pending row on the databases, one
  pending file on the file backend, nothing on the cache backend (its waiters poll).
- **A process holding 10,000 leases with ``renew=True``**: a fresh spawned process
  takes them, then holds them for a while; its resident memory before and after, its
  threads (one watchdog, not one per lease), and what the watchdog achieves: renewals
  per second against those needed (each lease every third of its ttl), how late they
  come, the watchdog thread's CPU, and how many leases were lost.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from contextlib import suppress
from typing import Any

from bench.scale.report import Report, percentile
from bench.scale.stores import RedisStore, Store, cpu_seconds

__all__ = ["run"]

#: Where the renewed leases are held (those configured here).
RENEW_STORES = ("Redis", "PostgreSQL")


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise LookupError("VmRSS")


def _threads() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise LookupError("Threads")


def hold_renewed(alias: str, leases: int, ttl: float, hold: float) -> dict[str, float]:
    """In a fresh process: take ``leases`` leases with ``renew=True``, hold them for
    ``hold`` seconds, release them; return memory, threads and the watchdog's record."""
    import os

    import django

    django.setup()
    import occupy
    from occupy.backends import get_backend

    backend = get_backend(alias)
    renewals: list[tuple[str, float]] = []
    extend = type(backend).extend

    def recorded(self: Any, lease: Any, ttl: float) -> None:
        renewals.append((lease.key, time.monotonic()))
        extend(self, lease, ttl)

    type(backend).extend = recorded  # type: ignore[method-assign]
    occupy.release(occupy.acquire("scale:renew:warm", ttl=ttl, timeout=0, backend=alias))
    rss_before, threads_before = _rss_kib(), _threads()
    started = time.monotonic()
    taken_at: dict[str, float] = {}
    held = []
    for i in range(leases):
        key = f"scale:renew:{i}"
        held.append(occupy.acquire(key, ttl=ttl, timeout=0, renew=True, backend=alias))
        taken_at[key] = time.monotonic()
    acquired = time.monotonic() - started
    rss_held, threads_held = _rss_kib(), _threads()
    watchdog = next((t for t in threading.enumerate() if t.name == "occupy-watchdog"), None)
    tid = getattr(watchdog, "native_id", None)
    cpu_before = cpu_seconds(os.getpid(), tid) if tid else float("nan")
    window_start = time.monotonic()
    time.sleep(hold)
    window = time.monotonic() - window_start
    cpu = (cpu_seconds(os.getpid(), tid) - cpu_before) if tid else float("nan")
    lost = sum(1 for lease in held if lease.lost)
    # Lateness: how long after it was due (a third of the ttl after the last grant or
    # renewal) each renewal in the window came.
    last = dict(taken_at)
    late: list[float] = []
    in_window = 0
    for key, at in renewals:
        if at >= window_start:
            late.append(at - (last[key] + ttl / 3))
            in_window += 1
        last[key] = at
    for lease in held:
        with suppress(occupy.LeaseLost):
            occupy.release(lease)
    return {
        "leases": leases,
        "ttl": ttl,
        "acquire_s": acquired,
        "rss_before_kib": rss_before,
        "rss_held_kib": rss_held,
        "threads_before": threads_before,
        "threads_held": threads_held,
        "renewals_per_s": in_window / window,
        "needed_per_s": leases / (ttl / 3),
        "late_p50_s": percentile(late, 50),
        "late_max_s": max(late, default=0.0),
        "watchdog_cpu_share": cpu / window,
        "lost": lost,
    }


def redis_per_waiter(store: RedisStore, counts: list[int]) -> list[tuple[int, float]]:
    """Return (waiters, bytes per waiter) for each count, queued behind one held key."""
    import occupy

    link = store.link
    client = store.client
    found = []
    for n in counts:
        key = f"scale:waiters:{n}"
        lease = occupy.acquire(key, ttl=60, timeout=0, backend=store.alias)
        try:
            rkeys = link.keys(key)
            occupy.release(occupy.acquire("scale:load", ttl=5, timeout=1, backend=store.alias))
            sha = _queue_sha(store)
            pipe = client.pipeline(transaction=False)
            for i in range(n):
                pipe.execute_command(
                    "EVALSHA", sha, 1, rkeys.lock, f"{i:032x}", f"bench-waiter-{i}\0{key}", 60_000
                )
            pipe.execute()
            usage = sum(
                int(client.memory_usage(name, samples=0) or 0)
                for name in (rkeys.queue, rkeys.waiters)
            )
            found.append((n, usage / n))
        finally:
            client.delete(rkeys.queue, rkeys.waiters)
            occupy.release(lease)
    return found


def _queue_sha(store: RedisStore) -> str:
    """Return the SHA of the backend's queueing script, loaded into the server."""
    script = store.link.scripts.queue
    store.client.script_load(script.script.script)
    return str(script.sha)


def run(report: Report, stores: list[Store], sizes: Any) -> None:
    """Measure the waiters' and the renewing process's footprint; print and write."""
    redis = next((s for s in stores if type(s) is RedisStore), None)
    if redis is not None:
        redis.clear()
        counts = sorted({8, 100, sizes.redis_waiters})
        per_waiter = redis_per_waiter(redis, counts)
        redis.clear()
        report.table(
            "4b. Redis: bytes per waiter (queue sorted set + waiters hash)",
            ["waiters", "bytes per waiter"],
            per_waiter,
            notes=[
                "databases: a waiter is one pending row (bytes per claim, 4a); "
                "files: one pending file; the cache backend on Redis: as on Redis"
            ],
        )
        report.csv("scale-footprint-waiters", ["waiters", "redis_bytes_per_waiter"], per_waiter)
    ctx = multiprocessing.get_context("spawn")
    rows, csv_rows = [], []
    for store in stores:
        if store.name not in RENEW_STORES:
            continue
        with ctx.Pool(1) as pool:
            got = pool.apply(
                hold_renewed, (store.alias, sizes.leases, sizes.lease_ttl, sizes.hold_seconds)
            )
        store.clear()
        growth = (got["rss_held_kib"] - got["rss_before_kib"]) / 1024
        rows.append(
            [
                store.name,
                sizes.leases,
                f"{got['acquire_s']:.1f} s",
                f"{growth:.1f} MiB",
                f"{(got['rss_held_kib'] - got['rss_before_kib']) * 1024 / sizes.leases:,.0f}",
                f"{got['threads_before']} → {got['threads_held']}",
                f"{got['renewals_per_s']:,.0f} / {got['needed_per_s']:,.0f}",
                f"{got['late_p50_s']:.2f} / {got['late_max_s']:.2f}",
                f"{got['watchdog_cpu_share']:.0%}",
                got["lost"],
            ]
        )
        csv_rows.append(
            [store.name, *(f"{v:.4g}" if isinstance(v, float) else v for v in got.values())]
        )
    if rows:
        report.table(
            f"4c. One process holding {sizes.leases:,} leases with renew=True "
            f"(ttl {sizes.lease_ttl:g} s, held {sizes.hold_seconds:g} s)",
            [
                "store",
                "leases",
                "taken in",
                "RSS growth",
                "bytes/lease",
                "threads",
                "renewals/s done / needed",
                "late s p50 / max",
                "watchdog CPU",
                "lost",
            ],
            rows,
            notes=[
                "each lease is due for renewal every third of its ttl; 'late' is how "
                "long after that a renewal came; watchdog CPU: its thread's share of "
                "one core while the leases were held"
            ],
        )
        report.csv(
            "scale-footprint-renew",
            [
                "store",
                "leases",
                "ttl",
                "acquire_s",
                "rss_before_kib",
                "rss_held_kib",
                "threads_before",
                "threads_held",
                "renewals_per_s",
                "needed_per_s",
                "late_p50_s",
                "late_max_s",
                "watchdog_cpu_share",
                "lost",
            ],
            csv_rows,
        )
