"""A private ``redis-server`` a test starts on a port of its own and stops (or kills)
part-way, with a django-redis cache and an occupy Redis backend on it: a lock store
that goes down while the test runs.

The port is ``OCCUPY_TEST_PRIVATE_REDIS_PORT`` (default 16301), so that checkouts
running side by side can each have their own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["ALIAS", "PrivateRedis", "private_redis", "redis_server_missing"]

#: The occupy backend alias (and cache alias) of the private server.
ALIAS = "private-redis"
PORT = int(os.environ.get("OCCUPY_TEST_PRIVATE_REDIS_PORT", "16301"))


def redis_server_missing() -> str | None:
    """Return why no private Redis server can be started here, or ``None``."""
    import importlib.util

    if shutil.which("redis-server") is None:
        return "redis-server is not on PATH (apt-get install redis-server)"
    if importlib.util.find_spec("django_redis") is None:
        return "django-redis is not installed (pip install 'django-occupy[redis]')"
    return None


class PrivateRedis:
    """A running private ``redis-server``; :meth:`kill` stops it at once."""

    def __init__(self, port: int, directory: str) -> None:
        self.port = port
        self.directory = directory
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the server (again) and wait until it answers."""
        import redis

        self.proc = subprocess.Popen(
            [
                shutil.which("redis-server") or "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.directory,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        probe = redis.Redis(port=self.port, socket_timeout=1)
        try:
            for _ in range(200):
                if self.proc.poll() is not None:
                    raise AssertionError(
                        f"redis-server exited with {self.proc.returncode} "
                        f"on port {self.port} (is the port taken?)"
                    )
                try:
                    probe.ping()
                    return
                except redis.ConnectionError:
                    time.sleep(0.05)
            raise AssertionError(f"redis-server did not start on port {self.port}")
        finally:
            probe.close()

    def kill(self) -> None:
        """Kill the server (SIGKILL, by its PID): the store is down."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None


@contextmanager
def private_redis() -> Iterator[PrivateRedis]:
    """Run a private Redis with the occupy backend ``ALIAS`` on it until the block ends."""
    from django.conf import settings
    from django.test import override_settings

    directory = tempfile.mkdtemp(prefix="occupy-private-redis-")
    server = PrivateRedis(PORT, directory)
    server.start()
    cache: dict[str, Any] = {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": f"redis://127.0.0.1:{PORT}/0",
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
