"""A Redis server of a test's own, for the tests that take a store away from the code:
``redis-server`` on a spare port without persistence, started, stopped, killed and
started again by its PID (:class:`RedisServer`), and :func:`private_redis`, such a
server with a django-redis cache and an occupy Redis backend (``ALIAS``) on it.

Its port comes from :mod:`tests.support.ports`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.ports import spare_port

__all__ = [
    "ALIAS",
    "REDIS_SERVER",
    "RedisServer",
    "private_redis",
    "redis_server_missing",
]

REDIS_SERVER = shutil.which("redis-server")
#: The occupy backend alias (and cache alias) of :func:`private_redis`'s server.
ALIAS = "private-redis"


def redis_server_missing() -> str | None:
    """Return why no private Redis server with a django-redis cache can be started
    here, or ``None``."""
    import importlib.util

    if REDIS_SERVER is None:
        return "redis-server is not on PATH (apt-get install redis-server)"
    if importlib.util.find_spec("django_redis") is None:
        return "django-redis is not installed (pip install 'django-occupy[redis]')"
    return None


class RedisServer:
    """``redis-server`` on ``port`` in ``directory``, without persistence, with the
    extra command-line ``options``: :meth:`start` waits (bounded) until it answers,
    :meth:`stop` ends it, :meth:`kill` takes it down at once; it can be started
    again. As a context manager, it runs for the block."""

    def __init__(self, port: int, directory: Path | str, *options: str) -> None:
        self.port = port
        self.directory = Path(directory)
        self.options = options
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Return the ``redis://`` URL of its database 0."""
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        """Return the PID of the running server (to stop and continue it)."""
        assert self.process is not None, "the server is not running"
        return self.process.pid

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
                *self.options,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(200):
            if self.process.poll() is not None:
                code = self.process.returncode
                self.process = None
                raise AssertionError(
                    f"redis-server exited with {code} on port {self.port} "
                    f"(is the port taken?) {' '.join(self.options)}"
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
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)  # a stopped server cannot end
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None

    def kill(self) -> None:
        """Kill the server (SIGKILL, by its PID): the store is down."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@contextmanager
def private_redis() -> Iterator[RedisServer]:
    """Run a private Redis with the cache and the occupy backend ``ALIAS`` on it until
    the block ends."""
    from django.conf import settings
    from django.test import override_settings

    directory = tempfile.mkdtemp(prefix="occupy-private-redis-")
    server = RedisServer(spare_port(), directory)
    server.start()
    cache: dict[str, Any] = {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": server.url,
        # Fail at once when the server is gone, instead of after a long connect.
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 2},
    }
    occupy = dict(settings.OCCUPY)
    occupy["BACKENDS"] = {
        **occupy["BACKENDS"],
        ALIAS: {
            "BACKEND": "occupy.backends.redis.RedisBackend",
            "OPTIONS": {"CACHE": ALIAS, "PREFIX": "occupy:"},
        },
    }
    try:
        with override_settings(CACHES={**settings.CACHES, ALIAS: cache}, OCCUPY=occupy):
            yield server
    finally:
        server.kill()
        shutil.rmtree(directory, ignore_errors=True)
