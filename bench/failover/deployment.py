"""A Redis Sentinel deployment of the failover run's own: a primary, two replicas and
three sentinels (Debian's ``redis-server`` and ``redis-sentinel``) on spare ports
(tests/support/ports.py), in a temporary directory, started and stopped by their PIDs.

It fails its primary over three ways (:meth:`SentinelDeployment.fail_over`): the
sentinels' own ``SENTINEL FAILOVER``, the primary killed (``SIGKILL``, then started
again empty, for Sentinel to make it a replica), and the primary paused (``SIGSTOP``)
past the sentinels' ``down-after`` time until they have named another, then resumed.
Each failover returns once every sentinel names the new primary and it has both
replicas back, online. Nothing here touches a server it did not start.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tests.support.ports import spare_ports

__all__ = [
    "FAILOVERS",
    "SERVICE",
    "SentinelDeployment",
    "deployment_missing",
    "start_redis",
    "stop_process",
]

#: The Sentinel service name.
SERVICE = "occupy-failover"
#: How the primary is failed over, in the order a run cycles through them.
FAILOVERS = ("sentinel-failover", "sigkill", "sigstop")
#: The sentinels' ``down-after-milliseconds`` and ``failover-timeout``.
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 3000
#: The longest wait for a failover or a recovery, in seconds.
SETTLE = 60.0


def deployment_missing() -> str | None:
    """Return why no Sentinel deployment can be started here, or ``None``."""
    for program in ("redis-server", "redis-sentinel"):
        if shutil.which(program) is None:
            return f"{program} is not on PATH (apt-get install redis-server redis-sentinel)"
    return None


def start_redis(port: int, directory: Path, *options: str) -> subprocess.Popen[bytes]:
    """Start ``redis-server`` on ``port`` without persistence (log in ``directory``)
    and wait until it answers; ``options`` are more command-line settings."""
    proc = subprocess.Popen(
        [
            shutil.which("redis-server") or "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--repl-diskless-sync-delay",
            "0",
            "--dir",
            str(directory),
            "--logfile",
            str(directory / f"redis-{port}.log"),
            *options,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait_answer(proc, port)
    return proc


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """Stop a server started here (resumed first, if paused), killed after 10 s."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def _wait_answer(proc: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server on port {port} exited ({proc.returncode})")
        try:
            if _command(port, "PING", timeout=0.5):
                return
        except Exception:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"the server on port {port} did not answer")


def _command(port: int, *args: str, timeout: float = 2.0) -> Any:
    """Run one command on the server (or sentinel) at ``port``, once, within about
    ``timeout`` seconds to connect and as many for the reply; return the reply."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    # No retries: redis-py's default retries a timeout ten times with a backoff, so a
    # probe of a paused server took about 9 s, not ``timeout``, and a watcher asking
    # every node saw a failover tens of seconds after the cluster made it.
    client = redis.Redis(
        port=port,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
    )
    try:
        return client.execute_command(*args)
    finally:
        client.close()


class SentinelDeployment:
    """A primary, two replicas and three sentinels in ``directory`` (see the module
    docstring). Use it as a context manager: it stops everything it started."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        ports = spare_ports(6)
        self.redis_ports, self.sentinel_ports = ports[:3], ports[3:]
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        #: ``(time.time(), new primary's port, sentinel's port)`` of every
        #: ``+switch-master`` a sentinel published.
        self.switches: list[tuple[float, int, int]] = []
        self._listeners: list[Any] = []
        self._stop = threading.Event()

    # --- life ------------------------------------------------------------------------
    def __enter__(self) -> SentinelDeployment:
        try:
            first = self.redis_ports[0]
            self._start_redis(first)
            for port in self.redis_ports[1:]:
                self._start_redis(port, "--replicaof", "127.0.0.1", str(first))
            for port in self.sentinel_ports:
                self._start_sentinel(port, first)
            for port in self.sentinel_ports:
                thread = threading.Thread(target=self._listen, args=(port,), daemon=True)
                thread.start()
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop every server and sentinel started here (resumed first if paused)."""
        self._stop.set()
        for proc in self.processes.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.terminate()
        for proc in self.processes.values():
            stop_process(proc)
        self.processes.clear()

    def _start_redis(self, port: int, *options: str) -> None:
        self.processes[port] = start_redis(port, self.directory, *options)

    def _start_sentinel(self, port: int, primary: int) -> None:
        config = self.directory / f"sentinel-{port}.conf"
        config.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {self.directory}\n"
            f"logfile {self.directory / f'sentinel-{port}.log'}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {primary} 2\n"
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n"
            f"sentinel parallel-syncs {SERVICE} 2\n"
        )
        self.processes[port] = subprocess.Popen(
            [shutil.which("redis-sentinel") or "redis-sentinel", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_answer(self.processes[port], port)

    def _listen(self, port: int) -> None:
        """Record every ``+switch-master`` sentinel ``port`` publishes."""
        import redis

        client = redis.Redis(port=port, socket_timeout=0.5)
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe("+switch-master")
        try:
            while not self._stop.is_set():
                try:
                    message = pubsub.get_message(timeout=0.2)
                except (redis.RedisError, OSError):
                    time.sleep(0.1)
                    continue
                if message:  # "<name> <old ip> <old port> <new ip> <new port>"
                    fields = message["data"].decode().split()
                    self.switches.append((time.time(), int(fields[4]), port))
        finally:
            pubsub.close()
            client.close()

    # --- state -----------------------------------------------------------------------
    @property
    def sentinels(self) -> list[tuple[str, int]]:
        """Return the sentinels' addresses, for django-redis's ``SENTINELS``."""
        return [("127.0.0.1", port) for port in self.sentinel_ports]

    def named_primaries(self) -> set[int]:
        """Return the primary ports the sentinels name now (one when they agree)."""
        named = set()
        for port in self.sentinel_ports:
            with_address = _command(port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
            named.add(int(with_address[1]))
        return named

    def primary(self) -> int:
        """Return the port of the primary every sentinel names (raise if they differ)."""
        named = self.named_primaries()
        assert len(named) == 1, f"the sentinels disagree: {named}"
        return named.pop()

    def wait_healthy(self) -> int:
        """Wait until every sentinel names one primary, it has both other servers as
        replicas online, and the sentinels know both replicas and each other; return
        its port. (On a loaded machine the sentinels sometimes fail the new primary
        over once more at once: the deployment settles wherever they end.)"""
        deadline = time.monotonic() + SETTLE
        last: Any = None
        while time.monotonic() < deadline:
            try:
                named = self.named_primaries()
                last = f"the sentinels name {named}"
                if len(named) == 1:
                    primary = named.pop()
                    last = self._health(primary)
                    if last is True:
                        return primary
            except Exception as e:
                last = e
            time.sleep(0.1)
        raise AssertionError(f"the deployment did not settle: {last!r}")

    def named(self) -> list[tuple[float, int]]:
        """Return when the sentinels named each primary: ``(time.time(), port)``, the
        first announcement of each change."""
        found: list[tuple[float, int]] = []
        for at, port, _sentinel in sorted(self.switches):
            if not found or found[-1][1] != port:
                found.append((at, port))
        return found

    def _health(self, primary: int) -> Any:
        if self.named_primaries() != {primary}:
            return f"the sentinels name {self.named_primaries()}"
        info = _command(primary, "INFO", "replication")
        if info.get("role") != "master":
            return f"{primary} is {info.get('role')}"
        online = [
            v for k, v in info.items() if k.startswith("slave") and v.get("state") == "online"
        ]
        if len(online) < 2:
            return f"{primary} has {len(online)} replicas online"
        for port in self.sentinel_ports:
            state = _command(port, "SENTINEL", "MASTER", SERVICE)
            if not isinstance(state, dict):  # a flat list of names and values
                state = dict(zip(state[::2], state[1::2], strict=True))
            if int(state[b"num-slaves"]) < 2 or int(state[b"num-other-sentinels"]) < 2:
                return f"sentinel {port} knows too little: {state}"
            if b"failover_in_progress" in state[b"flags"] or state[b"flags"] != b"master":
                return f"sentinel {port}: {state[b'flags']!r}"
        return True

    # --- failovers ---------------------------------------------------------------------
    def fail_over(self, how: str) -> tuple[int, int, float]:
        """Fail the primary over ``how`` (one of :data:`FAILOVERS`); return, once the
        deployment is healthy again, the old and the new primary's ports and the time
        (``time.time()``) the first sentinel named another."""
        old = self.primary()
        seen = len(self.switches)
        proc = self.processes[old]
        if how == "sentinel-failover":
            self._sentinel_failover()
        elif how == "sigkill":
            proc.kill()
            proc.wait(timeout=10)
        elif how == "sigstop":
            os.kill(proc.pid, signal.SIGSTOP)
        else:
            raise ValueError(f"unknown failover {how!r}; known: {FAILOVERS}")
        try:
            named_at = self._wait_switch(seen, old)
        finally:
            if how == "sigstop":
                os.kill(proc.pid, signal.SIGCONT)
        if how == "sigkill":
            self._start_redis(old)  # empty, as a primary of its own until Sentinel says
        return old, self.wait_healthy(), named_at

    def _sentinel_failover(self) -> None:
        deadline = time.monotonic() + SETTLE
        while True:
            try:
                _command(self.sentinel_ports[0], "SENTINEL", "FAILOVER", SERVICE)
                return
            except Exception as e:  # NOGOODSLAVE or INPROG, a moment after a failover
                if time.monotonic() > deadline:
                    raise AssertionError(f"SENTINEL FAILOVER kept failing: {e!r}") from e
                time.sleep(0.2)

    def _wait_switch(self, seen: int, old: int) -> float:
        deadline = time.monotonic() + SETTLE
        while time.monotonic() < deadline:
            for at, new, _sentinel in self.switches[seen:]:
                if new != old:
                    return at
            time.sleep(0.02)
        raise AssertionError(f"no sentinel named a primary other than {old}")
