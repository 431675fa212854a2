"""etcd against Redis and PostgreSQL, in the same run: ``python -m bench etcd``.

1. Uncontended acquire + release on one key, one thread, through ``occupy.acquire``:
   ``EtcdBackend`` on one etcd member and on three, ``RedisBackend``, and
   ``DatabaseBackend`` on PostgreSQL; rounds alternate, ratios to Redis.
2. Hand-off: one key passed among 2 and among 65 threads of one process (a holder and
   1 or 64 waiters), each holding it for a moment; the hand-off is the time from a
   holder's release to the next grant (consecutive fences), p50 and p99.

The etcd clusters are started here on spare ports (``OCCUPY_TEST_PORTS``, below the
tests' clusters at its top) with their data in a temporary directory (fsync on the local
disk), and stopped afterwards. A skip is printed where etcd or a server is missing.
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time

from bench.common import alternate, occupy_cycle, print_table, setup_django

ROUNDS = 3
OPS = 60
HOLD = 0.001
SECONDS = 3.0


def handoffs(alias: str, key: str, waiters: int) -> list[float]:
    """Return the hand-off times (seconds) of ``waiters + 1`` threads passing ``key``."""
    import occupy

    stop = time.monotonic() + SECONDS
    grants: list[tuple[int, float, float]] = []  # fence, granted, released
    lock = threading.Lock()
    lost: list[int] = []

    def worker() -> None:
        while time.monotonic() < stop:
            lease = occupy.acquire(key, ttl=60, timeout=60, backend=alias)
            granted = time.monotonic()
            time.sleep(HOLD)
            released = time.monotonic()
            try:
                occupy.release(lease)
            except occupy.LeaseLost:
                lost.append(lease.fence)
            with lock:
                grants.append((lease.fence, granted, released))

    threads = [threading.Thread(target=worker) for _ in range(waiters + 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    grants.sort()
    if lost:
        print(f"  ({len(lost)} of {len(grants)} leases were lost before their release on {alias})")
    return [b[1] - a[2] for a, b in itertools.pairwise(grants)]


def _ms(values: list[float], q: float) -> float:
    if len(values) < 2:
        return float("nan")
    return statistics.quantiles(values, n=100)[int(q) - 1] * 1000


def main() -> None:
    """Run both comparisons and print their tables."""
    setup_django()
    from django.conf import settings
    from django.test.utils import override_settings

    from tests.support.etcd_cluster import EtcdCluster, etcd_missing
    from tests.support.ports import top_ports

    why = etcd_missing()
    if why is not None:
        print(f"\n## etcd: skipped, {why}")
        return
    one = EtcdCluster(1, top_ports(2, below=12)).start()
    three = EtcdCluster(3, top_ports(6, below=14)).start()
    etcd = "occupy.backends.etcd.EtcdBackend"
    aliases = {
        "etcd-1": {"BACKEND": etcd, "OPTIONS": {"ENDPOINTS": one.endpoints, "PREFIX": "b/"}},
        "etcd-3": {"BACKEND": etcd, "OPTIONS": {"ENDPOINTS": three.endpoints, "PREFIX": "b/"}},
    }
    names = {"etcd-1": "etcd, 1 member", "etcd-3": "etcd, 3 members"}
    if "redis" not in settings.SKIPS:
        names["redis"] = "Redis"
    if "postgresql" not in settings.SKIPS:
        names["default"] = "PostgreSQL"
    config = {**settings.OCCUPY, "BACKENDS": {**settings.OCCUPY["BACKENDS"], **aliases}}
    try:
        with override_settings(OCCUPY=config):
            results = alternate(
                {name: occupy_cycle("bench:etcd", alias) for alias, name in names.items()},
                ops=OPS,
                rounds=ROUNDS,
                warmup=10,
            )
            print_table(
                "Uncontended acquire + release (occupy.acquire / release), one thread",
                results,
                reference="Redis" if "redis" in names else None,
            )
            print("\n## Hand-off of one key among threads of one process (release to next grant)")
            for waiters in (1, 64):
                for alias, name in names.items():
                    times = handoffs(alias, f"bench:handoff:{waiters}", waiters)
                    print(
                        f"  {waiters:>2} waiter(s)  {name.ljust(16)}  {len(times):>5} hand-offs  "
                        f"p50 {_ms(times, 50):7.2f} ms  p99 {_ms(times, 99):7.2f} ms"
                    )
    finally:
        one.stop()
        three.stop()
