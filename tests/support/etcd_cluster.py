"""Private etcd clusters for the tests, the benchmarks and the failover test.

:class:`EtcdCluster` starts ``n`` members of Debian's ``etcd`` (3.4) on spare ports
(tests/support/ports.py), each with its own data directory, and stops them again; the
failover test kills, pauses (``SIGSTOP``) and restarts members through it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

__all__ = ["ETCD", "EtcdCluster", "etcd_missing"]

#: The etcd server binary (Debian's ``etcd-server``), or ``None`` if it is not installed.
ETCD = shutil.which("etcd")


def etcd_missing() -> str | None:
    """Return why no etcd cluster can be started here, or ``None``."""
    if ETCD is None:
        return "etcd (the etcd binary is not installed: apt-get install etcd-server)"
    try:
        import etcd3gw  # noqa: F401
    except ImportError:
        return "etcd (its client 'etcd3gw' is not installed: pip install 'django-occupy[etcd]')"
    return None


def _die_with_parent() -> None:
    """Have the member killed when the process that started it dies (Linux's
    ``PR_SET_PDEATHSIG``): a test run killed mid-way leaves no member on the ports."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


class EtcdCluster:
    """``size`` etcd members on ``127.0.0.1``: clients on ``base``, ``base + 1``, …,
    peers on ``peer_base``, ``peer_base + 1``, … (default ``base + size``), with the
    extra command-line ``options``. Tuned to elect fast (heartbeat 50 ms, election
    500 ms)."""

    heartbeat_ms = 50
    election_ms = 500

    def __init__(self, size: int, base: int, *options: str, peer_base: int | None = None) -> None:
        self.size = size
        self.base = base
        self.peer_base = base + size if peer_base is None else peer_base
        #: More command-line settings of every member (e.g. ``--auth-token-ttl=2``).
        self.options = options
        self.dir = Path(tempfile.mkdtemp(prefix="occupy-etcd-"))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def client_port(self, i: int) -> int:
        """Return member ``i``'s client port."""
        return self.base + i

    def peer_port(self, i: int) -> int:
        """Return member ``i``'s peer port."""
        return self.peer_base + i

    @property
    def endpoints(self) -> list[str]:
        """Return the members' client URLs."""
        return [f"http://127.0.0.1:{self.client_port(i)}" for i in range(self.size)]

    def start(self) -> EtcdCluster:
        """Start every member and wait until the cluster has a leader."""
        for i in range(self.size):
            self.start_member(i, new=True)
        self.wait_healthy()
        return self

    def start_member(self, i: int, *, new: bool = False) -> None:
        """Start member ``i`` (again: its data directory is kept)."""
        assert ETCD is not None
        cluster = ",".join(f"m{j}=http://127.0.0.1:{self.peer_port(j)}" for j in range(self.size))
        log = open(self.dir / f"m{i}.log", "ab")  # noqa: SIM115 - the member keeps it
        self.procs[i] = subprocess.Popen(
            [
                ETCD,
                f"--name=m{i}",
                f"--data-dir={self.dir / f'm{i}'}",
                f"--listen-client-urls=http://127.0.0.1:{self.client_port(i)}",
                f"--advertise-client-urls=http://127.0.0.1:{self.client_port(i)}",
                f"--listen-peer-urls=http://127.0.0.1:{self.peer_port(i)}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{self.peer_port(i)}",
                f"--initial-cluster={cluster}",
                "--initial-cluster-state=new",
                f"--initial-cluster-token=occupy-{self.base}",
                f"--heartbeat-interval={self.heartbeat_ms}",
                f"--election-timeout={self.election_ms}",
                "--logger=zap",
                "--log-level=error",
                *self.options,
            ],
            stdout=log,
            stderr=log,
            preexec_fn=_die_with_parent,
        )
        log.close()

    def status(self, i: int, timeout: float = 1.0) -> dict[str, object] | None:
        """Return member ``i``'s ``/v3/maintenance/status``, or ``None`` if it does not answer."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.client_port(i)}/v3/maintenance/status",
            data=b"{}",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as reply:
                return json.loads(reply.read())  # type: ignore[no-any-return]
        except OSError:
            return None

    def leader(self, timeout: float = 30.0) -> int:
        """Return the index of the member that leads, waiting for one to be elected."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i in self.procs:
                if not self.running(i):
                    continue
                status = self.status(i) or {}
                header = status.get("header")
                if isinstance(header, dict) and status.get("leader") == header.get("member_id"):
                    return i
            time.sleep(0.05)
        raise RuntimeError(f"no etcd member led within {timeout} s; logs in {self.dir}")

    def running(self, i: int) -> bool:
        """Return whether member ``i``'s process is alive."""
        proc = self.procs.get(i)
        return proc is not None and proc.poll() is None

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Wait until every running member answers and one leads."""
        deadline = time.monotonic() + timeout
        for i in list(self.procs):
            while self.running(i) and self.status(i) is None:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"etcd member m{i} did not answer; logs in {self.dir}")
                time.sleep(0.05)
        self.leader(max(deadline - time.monotonic(), 1.0))

    def kill(self, i: int) -> None:
        """Kill member ``i`` (``SIGKILL``) and reap it."""
        proc = self.procs.get(i)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def pause(self, i: int) -> None:
        """Stop member ``i`` (``SIGSTOP``): alive, silent."""
        self.procs[i].send_signal(signal.SIGSTOP)

    def resume(self, i: int) -> None:
        """Continue member ``i`` (``SIGCONT``)."""
        self.procs[i].send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Kill every member and remove the data directories. Killed, not terminated: the
        data goes with them, and a member stopping gracefully waited up to 10 s for the
        peers that were stopping too."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> EtcdCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
