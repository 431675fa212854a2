"""Each lock store of a scale run: fill it with live claims, clear it, weigh it.

A store is named for the table (``PostgreSQL``, ``Redis``, …) and runs occupy through
its backend alias from :mod:`bench.scale.settings`. Filling writes claims the way the
backend itself writes them, in bulk: one ``INSERT … SELECT`` per 100,000 rows on the
databases (:func:`tests.support.bulk_claims.insert_claims`), the backend's own acquire script in
pipelines on Redis, claim files in the backend's format. Every claim lives two hours
and sits on a key of its own (``scale-live-<n>:<i>``), so a probe never meets one.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from typing import Any, cast

from occupy.leases import new_token

__all__ = [
    "DatabaseStore",
    "FileStore",
    "RedisCacheStore",
    "RedisStore",
    "Store",
    "available_stores",
    "cpu_seconds",
    "process_ids",
    "remove_trash",
    "shrink_sqlite",
]

#: Claims written per statement or pipeline while filling.
CHUNK = 100_000
PIPELINE = 5_000
LIVE_MS = 2 * 3600 * 1000


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """Return the CPU time (user + system) of process ``pid`` (or its thread ``tid``)."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    with open(path) as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_ids(name: str) -> list[int]:
    """Return the ids of this host's processes whose command name is ``name``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as comm:
                    if comm.read().strip() == name:
                        found.append(int(entry))
            except OSError:
                continue
    return found


class Store:
    """A lock store: the occupy backend alias, and how to fill, clear and weigh it."""

    #: The label in tables and plots.
    name = ""
    #: Whether waiters queue (first come, first served) on this store.
    queues = True

    def __init__(self, alias: str) -> None:
        self.alias = alias
        #: Live claims written by :meth:`fill` so far, and their keys' tags with counts.
        self.claims = 0
        self.filled: list[tuple[str, int]] = []

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    def fill(self, count: int) -> None:
        """Add ``count`` live claims on keys of their own."""
        done = 0
        while done < count:
            n = min(CHUNK, count - done)
            tag = f"scale-live-{self.claims + done}"
            self._fill(n, tag)
            self.filled.append((tag, n))
            done += n
        self.claims += count
        self.settle()

    def _fill(self, count: int, tag: str) -> None:
        raise NotImplementedError

    def settle(self) -> None:
        """Bring the store to its steady state after a fill or a probe (statistics)."""

    def clear(self) -> None:
        """Remove every claim of the benchmark from the store."""
        self.claims = 0
        self.filled = []

    def sample_keys(self, n: int) -> list[str]:
        """Return up to ``n`` keys of filled claims, spread over every fill."""
        step = max(self.claims // n, 1)
        found, seen = [], 0
        for tag, count in self.filled:
            found += [f"{tag}:{i}" for i in range((-seen) % step, count, step)]
            seen += count
        return found[:n]

    def footprint(self) -> dict[str, float]:
        """Return what the claims take, in bytes per claim, by part."""
        return {}

    def server_pids(self) -> list[int]:
        """Return the store's server processes on this host (empty: in process)."""
        return []

    def server_cpu(self) -> float | None:
        """Return a clock of the server's CPU seconds spent for this thread's backend
        connection (``None``: the store works inside the client, or cannot say)."""
        return None

    #: What :meth:`server_cpu` counts, for the tables.
    server_cpu_means = "in the client"


class DatabaseStore(Store):
    """The ``occupy_occupation`` table of one database."""

    def __init__(self, alias: str, database: str, name: str) -> None:
        super().__init__(alias)
        self.database = database
        self.name = name

    @property
    def vendor(self) -> str:
        from django.db import connections

        return str(connections[self.database].vendor)

    def execute(self, sql: str, params: list[Any] | None = None) -> list[Any]:
        """Run ``sql`` on the benchmark's own connection; return its rows."""
        from django.db import connections

        with connections[self.database].cursor() as cursor:
            cursor.execute(sql, params or [])
            return list(cursor.fetchall()) if cursor.description else []

    def _fill(self, count: int, tag: str) -> None:
        from tests.support.bulk_claims import insert_claims

        insert_claims(self.database, count, tag=tag, expired=False)

    def settle(self) -> None:
        """Vacuum and analyze (autovacuum may be off, as on the bench servers)."""
        if self.vendor == "postgresql":
            self.execute("VACUUM ANALYZE occupy_occupation")
        elif self.vendor == "mysql":
            self.execute("ANALYZE TABLE occupy_occupation")
        else:
            self.execute("ANALYZE occupy_occupation")

    def clear(self) -> None:
        """Empty the table (the benchmark's own database)."""
        if self.vendor == "sqlite":
            self.execute("DELETE FROM occupy_occupation")
        else:
            self.execute("TRUNCATE TABLE occupy_occupation")
        self.settle()
        super().clear()

    def rows(self) -> int:
        """Return how many claims the table holds."""
        return int(self.execute("SELECT COUNT(*) FROM occupy_occupation")[0][0])

    def footprint(self) -> dict[str, float]:
        """Return the table's and its indexes' bytes per row."""
        rows = max(self.rows(), 1)
        if self.vendor == "postgresql":
            table, indexes = self.execute(
                "SELECT pg_table_size('occupy_occupation'), pg_indexes_size('occupy_occupation')"
            )[0]
        elif self.vendor == "mysql":
            table, indexes = self.execute(
                "SELECT data_length, index_length FROM information_schema.tables "
                "WHERE table_schema = DATABASE() AND table_name = 'occupy_occupation'"
            )[0]
        else:
            sizes = dict(
                self.execute(
                    "SELECT s.name, SUM(s.pgsize) FROM dbstat s JOIN sqlite_master m "
                    "ON m.name = s.name WHERE m.tbl_name = 'occupy_occupation' GROUP BY s.name"
                )
            )
            table = sizes.pop("occupy_occupation", 0)
            indexes = sum(sizes.values())
        return {
            "table": int(table) / rows,
            "indexes": int(indexes) / rows,
            "total": (int(table) + int(indexes)) / rows,
        }

    def server_pids(self) -> list[int]:
        if self.vendor == "mysql":
            return process_ids("mariadbd") or process_ids("mysqld")
        return []  # PostgreSQL: each connection's own process (pg_backend_pid)

    @property
    def server_cpu_means(self) -> str:  # type: ignore[override]
        return {
            "postgresql": "the connection's server process",
            "mysql": "the whole server (others' work too)",
        }.get(self.vendor, "in the client")

    def server_cpu(self) -> float | None:
        if self.vendor == "postgresql":
            from occupy.backends import get_backend

            backend: Any = get_backend(self.alias)
            pid = backend.store.execute("SELECT pg_backend_pid()", [])[1][0][0]
            return cpu_seconds(int(pid))
        if self.vendor == "mysql":
            return sum(cpu_seconds(pid) for pid in self.server_pids())
        return None


class RedisStore(Store):
    """The Redis backend's keys: a holder string and a fence counter per key."""

    name = "Redis"

    def __init__(self, alias: str = "redis") -> None:
        super().__init__(alias)
        #: Bytes of ``used_memory`` each fill added (the server is shared: approximate).
        self.memory_added = 0

    @property
    def backend(self) -> Any:
        from occupy.backends import get_backend

        return get_backend(self.alias)

    @property
    def link(self) -> Any:
        """Return the link the backend's Redis lock protocol runs on (the Redis
        backend's, or a Redis cache's under the cache backend)."""
        return self.backend.link

    @property
    def client(self) -> Any:
        return self.link.client

    def prefix(self) -> str:
        """Return what every key of the store starts with."""
        return str(self.link.prefix)

    def used_memory(self) -> int:
        """Return the server's ``used_memory``."""
        return int(self.client.info("memory")["used_memory"])

    def _sha(self) -> str:
        import occupy

        # The public API loads the script into the server's cache (EVALSHA, else EVAL).
        occupy.release(occupy.acquire("scale:load", ttl=5, timeout=0, backend=self.alias))
        return str(self.link.scripts.acquire.sha)

    def _fill(self, count: int, tag: str) -> None:
        before = self.used_memory()
        sha, keys = self._sha(), self.link.keys
        pipe = self.client.pipeline(transaction=False)
        for i in range(count):
            key = f"{tag}:{i}"
            pipe.execute_command(
                "EVALSHA", sha, 1, keys(key).lock, new_token(), f"bulk\0{key}", LIVE_MS
            )
            if len(pipe) >= PIPELINE:
                pipe.execute()
        pipe.execute()
        self.memory_added += self.used_memory() - before

    def _names(self, pattern: str) -> Iterator[bytes]:
        yield from self.client.scan_iter(match=pattern, count=10_000)

    def clear(self) -> None:
        """Unlink every key under the store's prefix."""
        batch: list[bytes] = []
        for name in self._names(_glob_escape(self.prefix()) + "*"):
            batch.append(name)
            if len(batch) >= PIPELINE:
                self.client.unlink(*batch)
                batch = []
        if batch:
            self.client.unlink(*batch)
        self.memory_added = 0
        super().clear()

    def footprint(self) -> dict[str, float]:
        """Return ``MEMORY USAGE`` per claim (its keys, sampled), and the growth of the
        server's ``used_memory`` per claim (dictionaries included; others' keys too)."""
        sample = self.sample_keys(200)
        usage = sum(
            int(self.client.memory_usage(name, samples=0) or 0)
            for key in sample
            for name in self.names_of(key)
        )
        return {
            "keys": usage / max(len(sample), 1),
            "used_memory": self.memory_added / self.claims if self.claims else float("nan"),
        }

    def names_of(self, key: str) -> list[str]:
        """Return the Redis names of a held key's claim: its holder and its fence."""
        rkeys = self.link.keys(key)
        return [rkeys.lock, rkeys.fence]

    def server_pids(self) -> list[int]:
        return [int(self.client.info("server")["process_id"])]

    server_cpu_means = "EVALSHA time, whole server (others' scripts too)"

    def server_cpu(self) -> float | None:
        """Return the server's time in ``EVALSHA`` so far (``INFO commandstats``)."""
        stats = self.client.info("commandstats").get("cmdstat_evalsha", {})
        return float(stats.get("usec", 0)) / 1e6


class RedisCacheStore(RedisStore):
    """The cache backend on a django-redis cache: the same lock protocol and keys as the
    Redis backend's, under the cache's key prefix."""

    name = "cache (django-redis)"

    def __init__(self, alias: str = "cache") -> None:
        super().__init__(alias)


class FileStore(Store):
    """The file backend's directory: one claim file per held key in ``using/``."""

    name = "files"

    def __init__(self, alias: str = "files") -> None:
        super().__init__(alias)

    @property
    def root(self) -> str:
        from occupy.backends import get_backend

        backend: Any = get_backend(self.alias)
        return str(backend.root)

    def _fill(self, count: int, tag: str) -> None:
        from occupy.backends.claims import Entry, digest, now_us
        from occupy.backends.file.records import dump_claim as dump

        using = f"{self.root}/using"
        os.makedirs(using, exist_ok=True)
        now = now_us()
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        for i in range(count):
            key = f"{tag}:{i}"
            fd = os.open(f"{using}/{digest(key)}", flags, 0o644)
            try:
                os.write(
                    fd, dump(Entry(new_token(), "bulk", now + i, 1, now + LIVE_MS * 1000, now, key))
                )
            finally:
                os.close(fd)

    def clear(self) -> None:
        """Move the whole directory (the benchmark's own) aside, to be deleted by
        :func:`remove_trash` once nothing is measured any more: deleting a million
        files keeps the filesystem busy for minutes after the last unlink."""
        if os.path.exists(self.root):
            os.replace(self.root, f"{self.root}.trash-{os.getpid()}-{time.monotonic_ns()}")
        super().clear()

    def footprint(self) -> dict[str, float]:
        """Return the disk blocks per claim file, and the ``using/`` directory's size
        per claim."""
        using = f"{self.root}/using"
        blocks, seen = 0, 0
        with os.scandir(using) as entries:
            for entry in entries:
                blocks += entry.stat().st_blocks * 512
                seen += 1
                if seen >= 200:
                    break
        claims = max(self.claims, 1)
        directory = os.stat(using).st_size / claims
        per_file = blocks / max(seen, 1)
        return {"file": per_file, "directory": directory, "total": per_file + directory}


def shrink_sqlite() -> None:
    """Give the SQLite files' free pages back to the filesystem (a million claims
    leave hundreds of megabytes behind once deleted)."""
    from django.db import connections

    for alias in connections:
        if connections[alias].vendor == "sqlite":
            with connections[alias].cursor() as cursor:
                cursor.execute("VACUUM")


def remove_trash() -> None:
    """Delete the directories :meth:`FileStore.clear` moved aside."""
    from django.conf import settings

    backends = cast(dict[str, Any], settings.OCCUPY["BACKENDS"])
    for params in backends.values():
        location = params.get("LOCATION")
        if not location:
            continue
        parent, name = os.path.split(os.path.abspath(location))
        if not os.path.isdir(parent):
            continue
        for entry in os.listdir(parent):
            if entry.startswith(f"{name}.trash-"):
                shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def available_stores(names: list[str] | None = None, slot: int | None = None) -> list[Store]:
    """Return the stores configured here (those whose servers answer), in table order,
    or only those named (by label or alias).

    With ``slot``, the databases and the file backend are the slot's own (see
    :mod:`bench.scale.settings`); Redis and the cache have no slots and are left out.
    """
    from django.conf import settings

    backends = cast(dict[str, Any], settings.OCCUPY["BACKENDS"])
    tail = "" if slot is None else f"-{slot}"
    stores: list[Store] = []
    for database, name in (
        ("postgresql", "PostgreSQL"),
        ("mysql", "MariaDB"),
        ("sqlite", "SQLite"),
    ):
        if f"db-{database}{tail}" in backends:
            stores.append(DatabaseStore(f"db-{database}{tail}", f"{database}{tail}", name))
    if "redis" in backends and slot is None:
        stores.append(RedisStore())
    stores.append(FileStore(f"files{tail}"))
    if "cache" in backends and slot is None:
        stores.append(RedisCacheStore())
    if names:
        wanted = {n.lower() for n in names}
        stores = [
            s
            for s in stores
            if s.name.lower().split(" ")[0] in wanted
            or s.alias.lower().removesuffix(tail) in wanted
        ]
    return stores
