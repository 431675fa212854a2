"""The machine line: what every table and plot of a scale run was measured on."""

from __future__ import annotations

import os
import platform
import sqlite3
from contextlib import suppress
from typing import Any, cast

__all__ = ["describe", "load_average"]


def _cpu_model() -> str:
    with suppress(OSError), open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    with suppress(OSError, ValueError), open("/proc/meminfo") as info:
        for line in info:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    return None


def load_average() -> str:
    """Return the 1-minute load average, as text ("n/a" where unknown)."""
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "n/a"


def _servers() -> list[str]:
    """Return each configured store with its version."""
    from django.conf import settings
    from django.db import connections

    found = []
    for alias, label, query in (
        ("postgresql", "PostgreSQL", "SHOW server_version"),
        ("mysql", "MariaDB", "SELECT VERSION()"),
    ):
        if alias in settings.DATABASES:
            with connections[alias].cursor() as cursor:
                cursor.execute(query)
                version = cursor.fetchone()[0].split(" ")[0].split("-")[0]
            found.append(f"{label} {version}")
    found.append(f"SQLite {sqlite3.sqlite_version}")
    if "redis" in settings.CACHES:
        from django_redis import get_redis_connection

        info = get_redis_connection("redis").info("server")
        found.append(f"Redis {info['redis_version']}")
    return found


def _filesystem(path: str) -> str:
    """Return the filesystem type ``path`` is on (Linux), or ``"?"``."""
    best, kind = "", "?"
    with suppress(OSError), open("/proc/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            mount = fields[1]
            if path.startswith(mount.rstrip("/") + "/") and len(mount) > len(best):
                best, kind = mount, fields[2]
    return kind


def describe() -> str:
    """Return one line: cores, CPU, memory, stores and versions, Python and Django."""
    import django
    from django.conf import settings

    memory = _memory_gib()
    parts = [f"{os.cpu_count()} cores ({_cpu_model()})"]
    if memory is not None:
        parts.append(f"{memory:.0f} GiB")
    parts += _servers()
    backends = cast(dict[str, Any], settings.OCCUPY["BACKENDS"])
    files = backends["files"]["LOCATION"]
    parts.append(f"files on {_filesystem(os.path.abspath(files))}")
    parts.append(f"Python {platform.python_version()}, Django {django.get_version()}")
    return ", ".join(parts)
