"""A Redis Cluster of the run's own: three primaries and three replicas (Debian's
``redis-server``, joined by ``redis-cli --cluster create``) on spare ports of
``OCCUPY_TEST_PORTS`` (each node's bus port, 10,000 above, free too), in a temporary
directory, stopped by their PIDs. Nothing here touches a server it did not start."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.failover.deployment import _command, spare_ports, start_redis, stop_process

__all__ = ["ClusterDeployment", "cluster_missing"]


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

    def __enter__(self) -> ClusterDeployment:
        try:
            for port in self.ports:
                self.processes[port] = start_redis(
                    port,
                    self.directory,
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    str(self.directory / f"nodes-{port}.conf"),
                    "--cluster-node-timeout",
                    "2000",
                )
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

    def stop(self) -> None:
        """Stop every node started here."""
        for proc in self.processes.values():
            stop_process(proc)
        self.processes.clear()

    def wait_ok(self) -> None:
        """Wait until every node reports ``cluster_state:ok`` and knows all six."""
        deadline = time.monotonic() + 60
        last: Any = None
        while time.monotonic() < deadline:
            try:
                states = [_command(port, "CLUSTER", "INFO") for port in self.ports]
                last = states
                if all(b"cluster_state:ok" in s and b"cluster_known_nodes:6" in s for s in states):
                    return
            except Exception as e:
                last = e
            time.sleep(0.1)
        raise AssertionError(f"the cluster did not come up: {last!r}")

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
