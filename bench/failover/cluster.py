"""A Redis Cluster of the run's own: three primaries and three replicas (Debian's
``redis-server``, joined by ``redis-cli --cluster create``) on spare ports of
``OCCUPY_TEST_PORTS`` (each node's bus port, 10,000 above, free too), in a temporary
directory, stopped by their PIDs. Nothing here touches a server it did not start."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.failover.deployment import _command, start_redis, stop_process
from tests.support.ports import spare_ports

__all__ = ["CLUSTER_FAILOVERS", "ClusterDeployment", "cluster_missing"]

#: How a primary is failed over: a replica's ``CLUSTER FAILOVER``, the primary killed
#: (then started again on its node file, to rejoin as a replica), the primary paused
#: past ``cluster-node-timeout`` until its replica took over, then resumed.
CLUSTER_FAILOVERS = ("cluster-failover", "sigkill", "sigstop")
NODE_TIMEOUT_MS = 2000


def cluster_missing() -> str | None:
    """Return why no Redis Cluster can be started here, or ``None``."""
    for program in ("redis-server", "redis-cli"):
        if shutil.which(program) is None:
            return f"{program} is not on PATH (apt-get install redis-server redis-tools)"
    return None


class ClusterDeployment:
    """Three primaries and three replicas in ``directory``; a context manager that
    stops every node it started."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.ports = spare_ports(6, cluster=True)
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        #: The Redis keys whose primaries are watched, and ``(time.time(), key, port)``
        #: every time the cluster named another primary for one (see :meth:`watch`).
        self.watched: list[str] = []
        self.switches: list[tuple[float, str, int]] = []
        self._stop = threading.Event()

    def __enter__(self) -> ClusterDeployment:
        try:
            for port in self.ports:
                self._start_node(port)
            subprocess.run(
                [
                    shutil.which("redis-cli") or "redis-cli",
                    "--cluster",
                    "create",
                    *(f"127.0.0.1:{port}" for port in self.ports),
                    "--cluster-replicas",
                    "1",
                    "--cluster-yes",
                ],
                check=True,
                capture_output=True,
                timeout=60,
            )
            self.wait_ok()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start_node(self, port: int) -> None:
        self.processes[port] = start_redis(
            port,
            self.directory,
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            str(self.directory / f"nodes-{port}.conf"),
            "--cluster-node-timeout",
            str(NODE_TIMEOUT_MS),
        )

    def stop(self) -> None:
        """Stop every node started here."""
        self._stop.set()
        for proc in self.processes.values():
            stop_process(proc)
        self.processes.clear()

    def wait_ok(self) -> None:
        """Wait until every node reports ``cluster_state:ok`` and knows all six, and
        every primary has a replica whose link is up (:meth:`_paired`)."""
        deadline = time.monotonic() + 60
        last: Any = None
        while time.monotonic() < deadline:
            try:
                states = [_command(port, "CLUSTER", "INFO") for port in self.ports]
                last = states
                if all(b"cluster_state:ok" in s and b"cluster_known_nodes:6" in s for s in states):
                    if self._paired():
                        return
                    last = "a primary has no replica, or a replica's link is down"
            except Exception as e:
                last = e
            time.sleep(0.1)
        raise AssertionError(f"the cluster did not come up: {last!r}")

    def _paired(self) -> bool:
        nodes = _command(self.ports[0], "CLUSTER", "NODES").decode().splitlines()
        healthy = [n.split() for n in nodes if "fail" not in n.split()[2]]
        primaries = {n[0] for n in healthy if "master" in n[2] and len(n) > 8}
        served = Counter(n[3] for n in healthy if "slave" in n[2] and n[3] in primaries)
        # Every primary has its replica (a restarted node may first join another one,
        # until Redis moves a replica to the orphaned primary), and every replica's link
        # is up: a replica that never synced refuses to take over (its data is too old).
        if len(primaries) != 3 or not all(served[p] >= 1 for p in primaries):
            return False
        for port in self.ports:
            info = _command(port, "INFO", "replication")
            if info.get("role") == "slave" and info.get("master_link_status") != "up":
                return False
        return True

    def owner(self, key: str) -> int:
        """Return the port of the primary that serves ``key``'s slot (see :meth:`owners`)."""
        return self.owners([key])[key]

    def owners(self, keys: list[str]) -> dict[str, int]:
        """Return the port of the primary that serves each of ``keys``' slots: of the
        nodes that answer and claim it, the one with the highest config epoch (a primary
        that was paused still claims its slots, with its old epoch, until it hears of the
        new)."""
        found = self._served(keys)
        unserved = sorted(key for key in keys if key not in found)
        if unserved:
            raise AssertionError(f"no node serves the slot of {unserved}")
        return found

    def _served(self, keys: list[str]) -> dict[str, int]:
        """Return :meth:`owners` of the keys whose slot some node serves. Each node is
        asked once for all the keys, and one that does not answer costs half a second:
        a round of the watcher stays under a second while a primary is paused."""
        from redis.crc import key_slot

        slots = {key: key_slot(key.encode()) for key in keys}
        claims: dict[str, list[tuple[int, int]]] = {key: [] for key in keys}
        for port in self.ports:
            try:
                lines = _command(port, "CLUSTER", "NODES", timeout=0.5).decode().splitlines()
            except Exception:
                continue
            for line in lines:
                fields = line.split()
                if "master" not in fields[2] or "fail" in fields[2]:
                    continue
                claimant = (int(fields[6]), int(fields[1].split("@")[0].rsplit(":", 1)[1]))
                for part in fields[8:]:
                    if part.startswith("["):
                        continue  # a slot being migrated
                    start, _, end = part.partition("-")
                    for key, slot in slots.items():
                        if int(start) <= slot <= int(end or start):
                            claims[key].append(claimant)
        return {key: max(found)[1] for key, found in claims.items() if found}

    def watch(self, keys: list[str]) -> None:
        """Record (in :attr:`switches`) every change of the primary serving ``keys``."""
        self.watched = list(keys)
        owners = self.owners(keys)
        self.switches.extend((0.0, key, port) for key, port in owners.items())

        def poll() -> None:
            while not self._stop.is_set():
                # A slot is unserved between its primary's failure and the election:
                # the other keys' primaries are still recorded.
                with contextlib.suppress(Exception):  # a node's reply cut short
                    found = self._served(keys)
                    at = time.time()
                    for key, port in found.items():
                        if port != owners[key]:
                            owners[key] = port
                            self.switches.append((at, key, port))
                time.sleep(0.02)

        threading.Thread(target=poll, daemon=True).start()

    def named(self) -> dict[str, list[tuple[float, int]]]:
        """Return, per watched key, when the cluster named each primary for it."""
        found: dict[str, list[tuple[float, int]]] = {key: [] for key in self.watched}
        for at, key, port in sorted(self.switches):
            found[key].append((at, port))
        return found

    def fail_over(self, how: str, key: str) -> tuple[int, int, float]:
        """Fail over ``how`` (one of :data:`CLUSTER_FAILOVERS`) the primary serving
        ``key``; return, once the cluster is whole again, the old and new primary's
        ports and when the cluster first named the new one."""
        old = self.owner(key)
        seen = len(self.switches)
        proc = self.processes[old]
        if how == "cluster-failover":
            replica = next(
                int(line.split()[1].split("@")[0].rsplit(":", 1)[1])
                for line in _command(old, "CLUSTER", "NODES").decode().splitlines()
                if "slave" in line.split()[2] and line.split()[3] in _myself(old)
            )
            _command(replica, "CLUSTER", "FAILOVER")
        elif how == "sigkill":
            proc.kill()
            proc.wait(timeout=10)
        elif how == "sigstop":
            os.kill(proc.pid, signal.SIGSTOP)
        else:
            raise ValueError(f"unknown failover {how!r}; known: {CLUSTER_FAILOVERS}")
        try:
            deadline = time.monotonic() + 60
            while not [s for s in self.switches[seen:] if s[1] == key]:
                if time.monotonic() > deadline:
                    raise AssertionError(f"the cluster never replaced {old}")
                time.sleep(0.02)
            at, _key, new = next(s for s in self.switches[seen:] if s[1] == key)
        finally:
            if how == "sigstop":
                os.kill(proc.pid, signal.SIGCONT)
        if how == "sigkill":
            self._start_node(old)  # its node file makes it rejoin, as a replica
        self.wait_ok()
        return old, new, at

    def client(self) -> Any:
        """Return a redis-py ``RedisCluster`` client of this cluster."""
        from redis.cluster import RedisCluster

        return RedisCluster(
            host="127.0.0.1", port=self.ports[0], socket_timeout=5, socket_connect_timeout=2
        )

    def flush(self) -> None:
        """Delete every key on every primary (this cluster is the run's own)."""
        for port in self.ports:
            with contextlib.suppress(Exception):  # a replica refuses writes (READONLY)
                _command(port, "FLUSHALL")


def _myself(port: int) -> str:
    for line in _command(port, "CLUSTER", "NODES").decode().splitlines():
        if "myself" in line.split()[2]:
            return line.split()[0]
    raise AssertionError(f"{port} does not know itself")


def _cluster_client_class() -> type:
    from django_redis.client import DefaultClient

    class ClusterClient(DefaultClient):  # type: ignore[misc]
        """A django-redis client whose raw client is a redis-py ``RedisCluster`` (what
        ``get_redis_connection`` returns, so what occupy's Redis backend locks on);
        ``LOCATION`` is any node's URL."""

        def connect(self, index: int = 0) -> Any:
            from redis.cluster import RedisCluster

            return RedisCluster.from_url(
                self._server[index], socket_timeout=5, socket_connect_timeout=2
            )

    return ClusterClient


#: For ``CACHES[alias]["OPTIONS"]["CLIENT_CLASS"]``: django-redis ships no cluster
#: client (imported lazily: django-redis is an optional dependency).
def __getattr__(name: str) -> Any:
    if name == "ClusterClient":
        return _cluster_client_class()
    raise AttributeError(name)
