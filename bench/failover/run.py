"""The failover run: workers in several processes take locks on a few keys through
django-redis's Sentinel client and make fenced read-modify-writes of PostgreSQL rows
(``FencedMixin``) while the primary is failed over several times; then the tally.

Half the workers open a new connection for every acquire (so they ask the sentinels
each time), half keep theirs (so they stay on a primary until it refuses them): the
window in which a replaced primary still grants cannot hide behind workers that all
move together.

Every worker writes down each grant (key, fence, the Redis server that made it, when it
ran by that server's clock: the lease's expiry less its ttl),
each section it held (from the grant to the end of its write), each accepted write, and
every error. Each accepted write also inserts a row into an audit table in the same
transaction, after its fenced ``UPDATE`` took the row lock, so the audit's order per key
is the order the writes took effect. The tally (:func:`tally`):

- ``lost``: grants lost in a failover: two sections on one key that overlap in time,
  both inside their ttl (a second holder was granted the key while the first held it);
- ``stale_accepted``: accepted writes whose fence is below one already written to the
  row (must be 0: the fence refuses them);
- ``replaced``: grants made by a server after the sentinels (or the cluster) had named
  another primary in its place (must be 0 with ``MIN_REPLICAS``);
- ``not_rising``: grants whose fence is not above every earlier grant's on the key;
- ``longest_gap``: the longest time in which no one was granted any key;
- ``foreign``: errors that are not occupy's (must be 0).
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import random
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.failover.deployment import FAILOVERS, SERVICE, SentinelDeployment

__all__ = ["Options", "Tally", "run_failovers", "tally"]

_ctx = multiprocessing.get_context("spawn")

#: How many keys (``Page`` rows) the workers take, and the audit table (in the
#: PostgreSQL database given).
KEYS = 3
AUDIT = "occupy_failover_audit"
#: How long before it is named a new primary's grant counts as its own, in seconds.
EARLY = 1.0
#: Each lease's ttl and each acquire's timeout, in seconds.
TTL = 10.0
TIMEOUT = 2.0


@dataclass
class Options:
    """What a run is: the database, the backend's replica options, and its workers."""

    database: str
    min_replicas: int = 1
    replicas: int = 0
    failovers: tuple[str, ...] = FAILOVERS
    #: ``"sentinel"`` or ``"cluster"``.
    kind: str = "sentinel"
    workers: int = 4
    #: Seconds of load before the first failover and after each.
    calm: float = 1.5


@dataclass
class Tally:
    """What a run measured (see the module docstring)."""

    failovers: int = 0
    #: How many times the sentinels named a new primary (a failover of the run, or one
    #: more that they started on their own right after it).
    switches: int = 0
    grants: int = 0
    writes: int = 0
    fenced_out: int = 0
    lost: int = 0
    stale_accepted: int = 0
    replaced: int = 0
    not_rising: int = 0
    longest_gap: float = 0.0
    errors: Counter[str] = field(default_factory=Counter)
    foreign: list[str] = field(default_factory=list)
    replaced_examples: list[Any] = field(default_factory=list)
    #: Per failover: grants in the ten seconds after it, by (worker, server port).
    after: list[Counter[tuple[int, int | None]]] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        """Return the figures for a table."""
        return {
            "failovers": self.failovers,
            "switches": self.switches,
            "grants": self.grants,
            "writes": self.writes,
            "fenced out": self.fenced_out,
            "lost": self.lost,
            "stale accepted": self.stale_accepted,
            "from replaced primary": self.replaced,
            "fences not rising": self.not_rising,
            "longest gap (s)": round(self.longest_gap, 2),
            "foreign errors": len(self.foreign),
        }


def _settings(options: Options, where: dict[str, Any]) -> dict[str, Any]:
    """Return the settings of the ``failover`` cache and backend: on the sentinels
    ``where["sentinels"]``, or on the cluster node ``where["cluster"]`` (a port)."""
    from django.conf import settings

    if "cluster" in where:
        cache = {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{where['cluster']}",
            "OPTIONS": {"CLIENT_CLASS": "bench.failover.cluster.ClusterClient"},
        }
    else:
        cache = {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": f"redis://{SERVICE}/0",
            "OPTIONS": {
                "CLIENT_CLASS": "django_redis.client.SentinelClient",
                "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
                "SENTINELS": where["sentinels"],
                "SENTINEL_KWARGS": {"socket_timeout": 1, "socket_connect_timeout": 1},
                "SOCKET_CONNECT_TIMEOUT": 1,
                "SOCKET_TIMEOUT": 2,
            },
        }
    caches = {**settings.CACHES, "failover": cache}
    occupy = dict(getattr(settings, "OCCUPY", {}))
    occupy["BACKENDS"] = {
        **occupy.get("BACKENDS", {}),
        "failover": {
            "BACKEND": "occupy.backends.redis.RedisBackend",
            "OPTIONS": {
                "CACHE": "failover",
                "MIN_REPLICAS": options.min_replicas,
                "REPLICAS": options.replicas,
            },
        },
    }
    return {"CACHES": caches, "OCCUPY": occupy}


def _worker(
    index: int,
    options: Options,
    where: dict[str, Any],
    rows: dict[str, int],
    stop: Any,
    ready: Any,
    results: Any,
) -> None:
    """Take keys in a loop until ``stop`` is set; put what happened on ``results``
    (and ``index`` on ``ready`` after the first grant)."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    import django

    django.setup()
    from django.db import connections
    from django.test import override_settings

    import occupy
    from occupy.backends import get_backend

    connections.settings["postgresql"]["NAME"] = options.database
    override_settings(**_settings(options, where)).enable()
    reconnect = index % 2 == 0
    backend = get_backend("failover")
    served = _note_served()
    client = backend.client
    if "cluster" in where:
        disconnect = client.disconnect_connection_pools
    else:
        disconnect = client.connection_pool.disconnect
    grants: list[Any] = []
    sections: list[Any] = []
    errors: Counter[str] = Counter()
    foreign: list[str] = []
    writes = fenced_out = 0
    owner = f"worker-{index}"
    rng = random.Random(index)
    while not stop.is_set():
        key = rng.choice(sorted(rows))
        if reconnect:
            disconnect()  # the next connection asks the sentinels
        served.port = None
        lease = _acquire(backend, key, owner, errors, foreign)
        if lease is None:
            continue
        granted = time.time()
        if not grants:
            ready.put(index)
        # When the grant ran, by the server's clock (this host's): its expiry less the
        # ttl. The time the reply came back may be a moment after the sentinels named
        # another primary although the grant ran before.
        ran = lease.expires_at.timestamp() - TTL
        grants.append((key, lease.fence, ran, served.port, index))
        outcome = _fenced_write(lease, rows[key], index)
        writes += outcome == "written"
        fenced_out += outcome == "fenced out"
        if outcome not in ("written", "fenced out"):
            foreign.append(outcome)
        sections.append((key, lease.fence, granted, time.time(), index))
        try:
            backend.release(lease)
        except occupy.OccupyError as e:
            errors[f"release: {type(e).__name__}"] += 1
        except Exception as e:
            foreign.append(f"release: {e!r}\n{traceback.format_exc()}")
    results.put(
        {
            "grants": grants,
            "sections": sections,
            "errors": dict(errors),
            "foreign": foreign,
            "writes": writes,
            "fenced_out": fenced_out,
        }
    )


def _acquire(backend: Any, key: str, owner: str, errors: Counter[str], foreign: list[str]) -> Any:
    """Return a lease on ``key``, or ``None`` with the error counted (occupy's) or
    described (any other)."""
    import occupy

    try:
        return backend.acquire(key, owner=owner, ttl=TTL, timeout=TIMEOUT)
    except occupy.OccupyError as e:
        errors[type(e).__name__] += 1
        if isinstance(e, occupy.StoreUnavailable):
            errors[f"  {str(e).partition(': ')[2][:70]}"] += 1
        time.sleep(0.01)
    except Exception as e:
        foreign.append(f"acquire: {e!r}\n{traceback.format_exc()}")
    return None


def _note_served() -> Any:
    """Return a thread-local whose ``port`` is set to the server of every connection
    given back to a pool (redis-py gives it back after each command; a cluster client's
    redirected command, after the last node)."""
    from redis.connection import ConnectionPool

    served = threading.local()
    release = ConnectionPool.release

    def noting_release(pool: Any, connection: Any) -> None:
        served.port = connection.port
        release(pool, connection)

    ConnectionPool.release = noting_release  # type: ignore[method-assign]
    return served


def _fenced_write(lease: Any, pk: int, worker: int) -> str:
    """Increment row ``pk`` under ``lease`` and audit it; return ``"written"``,
    ``"fenced out"`` or a foreign error's description."""
    from django.db import connections, transaction

    import occupy
    from tests.testapp.models import Page

    try:
        with transaction.atomic(using="postgresql"):
            page = Page.objects.using("postgresql").get(pk=pk)
            page.body = str(int(page.body or 0) + 1)
            page.save(lease=lease, using="postgresql")
            with connections["postgresql"].cursor() as cursor:
                cursor.execute(
                    f"INSERT INTO {AUDIT} (key, fence, worker) VALUES (%s, %s, %s)",
                    [lease.key, lease.fence, worker],
                )
    except occupy.FencedOut:
        return "fenced out"
    except Exception as e:
        return f"write: {e!r}\n{traceback.format_exc()}"
    return "written"


def _prepare(database: str) -> dict[str, int]:
    """Create the audit table and one ``Page`` per key; return their primary keys."""
    from django.db import connections

    from tests.testapp.models import Page

    with connections["postgresql"].cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {AUDIT}")
        cursor.execute(
            f"CREATE TABLE {AUDIT} (id bigserial PRIMARY KEY, key text NOT NULL, "
            "fence bigint NOT NULL, worker integer NOT NULL)"
        )
    pages = Page.objects.using("postgresql").bulk_create([Page(body="0") for _ in range(KEYS)])
    return {page.fence_key(): page.pk for page in pages}


def _audit() -> list[tuple[str, int]]:
    from django.db import connections

    with connections["postgresql"].cursor() as cursor:
        cursor.execute(f"SELECT key, fence FROM {AUDIT} ORDER BY id")
        found = [(k, int(f)) for k, f in cursor.fetchall()]
        cursor.execute(f"DROP TABLE {AUDIT}")
    return found


def run_failovers(directory: Path, options: Options) -> tuple[Tally, list[Any]]:
    """Start a Sentinel deployment (or with ``options.kind == "cluster"``, a Redis
    Cluster) in ``directory``, run the workers on it while the primary (of the first
    key, on a cluster) is failed over ``options.failovers``, stop everything; return
    the tally and the failovers (how, old port, new port, when named)."""
    from django.db import connections

    from bench.failover.cluster import ClusterDeployment
    from occupy.backends.redis.keys import redis_keys

    connections["postgresql"].settings_dict["NAME"] = options.database
    rows = _prepare(options.database)
    names = {key: redis_keys("occupy:", key).lock for key in rows}
    done: list[Any] = []
    cluster = options.kind == "cluster"
    deployment: Any = (ClusterDeployment if cluster else SentinelDeployment)(directory)
    with deployment:
        if cluster:
            deployment.watch(sorted(names.values()))
            where: dict[str, Any] = {"cluster": deployment.ports[0]}
        else:
            initial = deployment.primary()
            where = {"sentinels": deployment.sentinels}
        stop = _ctx.Event()
        ready, results = _ctx.Queue(), _ctx.Queue()
        procs = [
            _ctx.Process(
                target=_worker,
                args=(i, options, where, rows, stop, ready, results),
                daemon=True,
            )
            for i in range(options.workers)
        ]
        for proc in procs:
            proc.start()
        try:
            for _ in procs:  # every worker has been granted a key once
                ready.get(timeout=120)
            time.sleep(options.calm)
            # On a cluster, the primary of the first key is the one failed over.
            first = [names[min(names)]] if cluster else []
            for how in options.failovers:
                old, new, named_at = deployment.fail_over(how, *first)
                done.append((how, old, new, named_at))
                time.sleep(options.calm)
        finally:
            stop.set()
            collected = _collect(procs, results)
        if cluster:
            by_name = deployment.named()
            named = {key: by_name[name] for key, name in names.items()}
        else:
            timeline = [(0.0, initial), *deployment.named()]
            named = {key: timeline for key in rows}
    if len(collected) < len(procs):
        raise AssertionError(f"{len(procs) - len(collected)} workers died without a report")
    pages = _final_pages(rows)
    return tally(collected, _audit(), named, done, pages), done


def _collect(procs: list[Any], results: Any) -> list[dict[str, Any]]:
    """Return the reports of the stopped workers (within a minute), then end them."""
    collected: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    while len(collected) < len(procs) and time.monotonic() < deadline:
        try:
            collected.append(results.get(timeout=1))
        except Exception:
            if not any(p.is_alive() for p in procs):
                break
    for proc in procs:
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
    return collected


def _final_pages(rows: dict[str, int]) -> dict[str, tuple[int, int]]:
    from tests.testapp.models import Page

    found = {}
    for key, pk in rows.items():
        page = Page.objects.using("postgresql").get(pk=pk)
        found[key] = (int(page.body), page.fence)
        page.delete()
    return found


def tally(
    reports: list[dict[str, Any]],
    audit: list[tuple[str, int]],
    named: dict[str, list[tuple[float, int]]],
    failovers: list[Any],
    pages: dict[str, tuple[int, int]],
) -> Tally:
    """Return the tally of a run from the workers' ``reports``, the ``audit`` rows in
    the order they took effect, when the sentinels (or the cluster) ``named`` each
    primary of each key (``(time.time(), port)``, from the start), the ``failovers``
    the run made and the rows' final counters and fences."""
    result = Tally(
        failovers=len(failovers), switches=max((len(n) - 1 for n in named.values()), default=0)
    )
    grants = sorted((g for r in reports for g in r["grants"]), key=lambda g: g[2])
    for report in reports:
        result.writes += report["writes"]
        result.fenced_out += report["fenced_out"]
        result.errors.update(report["errors"])
        result.foreign.extend(report["foreign"])
    result.grants = len(grants)
    _count_replaced(result, grants, named)
    for _how, _old, _new, at in failovers:
        result.after.append(Counter((g[4], g[3]) for g in grants if at <= g[2] < at + 10))
    highest: dict[str, int] = {}
    for key, fence, _at, _port, _worker in grants:
        if fence <= highest.get(key, -1):
            result.not_rising += 1
        highest[key] = max(fence, highest.get(key, -1))
    result.lost = _overlapping([s for r in reports for s in r["sections"]])
    written: dict[str, int] = {}
    for key, fence in audit:
        if fence < written.get(key, -1):
            result.stale_accepted += 1
        written[key] = max(fence, written.get(key, -1))
    for key, (counter, fence) in pages.items():
        assert fence == written.get(key, 0), (key, fence, written.get(key))
        del counter  # a lost update shows as an overlap (``lost``) already
    times = [g[2] for g in grants]
    result.longest_gap = max((b - a for a, b in itertools.pairwise(times)), default=0.0)
    return result


def _count_replaced(
    result: Tally, grants: list[Any], named: dict[str, list[tuple[float, int]]]
) -> None:
    """Count the grants made by a replaced primary, with a few examples.

    A grant made by another server than the primary named last is from a replaced
    primary, unless that server is named next, within EARLY seconds (a new primary can
    grant a moment before it is announced, or before the run's watcher sees it;
    primaries come round again, so a later naming says nothing).
    """
    for key, fence, at, port, worker in grants:
        primary = [p for t, p in named[key] if t <= at][-1]
        early = [p for t, p in named[key] if at < t <= at + EARLY][:1]
        if port is not None and port != primary and early != [port]:
            result.replaced += 1
            result.replaced_examples.append((key, fence, at, port, primary, worker))


def _overlapping(sections: list[Any]) -> int:
    """Return how many sections began before another of their key had ended."""
    by_key: dict[str, list[Any]] = {}
    for section in sections:
        by_key.setdefault(section[0], []).append(section)
    lost = 0
    for held in by_key.values():
        held.sort(key=lambda s: s[2])
        end = -1.0
        for _key, _fence, start, stop, _worker in held:
            if start < end:
                lost += 1
            end = max(end, stop)
    return lost
