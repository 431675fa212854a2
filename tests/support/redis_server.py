"""A Redis server of a test's own: started on a spare port without persistence, stopped
(and started again) by its PID, for the tests that take a store away from the code."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

__all__ = ["REDIS_SERVER", "RedisServer", "spare_port"]

REDIS_SERVER = shutil.which("redis-server")


def spare_port() -> int:
    """Return a free port: the first free one of ``OCCUPY_TEST_PORTS`` (``"low-high"``,
    for helpers sharing a machine), else one the system picks."""
    ports = os.environ.get("OCCUPY_TEST_PORTS")
    if ports:
        low, high = (int(part) for part in ports.split("-"))
        for port in range(low, high + 1):
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
        raise AssertionError(f"no free port in OCCUPY_TEST_PORTS={ports}")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """``redis-server`` on ``port`` in ``directory``, without persistence: :meth:`start`
    waits (bounded) until it answers, :meth:`stop` ends it by its PID."""

    def __init__(self, port: int, directory: Path) -> None:
        self.port = port
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Return the ``redis://`` URL of its database 0."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server and wait until it answers a PING (at most 10 s)."""
        assert REDIS_SERVER is not None, "redis-server is not on PATH"
        self.process = subprocess.Popen(
            [
                REDIS_SERVER,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(200):
            if self.process.poll() is not None:
                raise AssertionError(
                    f"redis-server exited with {self.process.returncode} on port {self.port}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise AssertionError(f"redis-server did not answer on port {self.port}")

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s) and wait for it."""
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None
