"""A PostgreSQL server of a test's own, for settings that need a restart
(``max_locks_per_transaction``): Debian's ``initdb`` and ``postgres`` in a temporary
directory, on a spare port (:mod:`tests.support.ports`), trust authentication, stopped
at the end. PostgreSQL refuses to run as root: started by root, it runs as ``postgres``.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.ports import spare_port

__all__ = ["postgres_bin", "private_postgres"]


def postgres_bin() -> str | None:
    """Return the directory of Debian's ``initdb`` and ``postgres``, or ``None``."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return os.path.dirname(found[-1]) if found else None


def _as_postgres(command: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@contextmanager
def private_postgres(**config: str) -> Iterator[int]:
    """Run a fresh PostgreSQL server with ``config`` (``-c name=value``); yield its port."""
    bin_dir = postgres_bin()
    assert bin_dir is not None
    port = spare_port()
    tmp = tempfile.mkdtemp(prefix="occupy-postgres-")
    try:
        if os.geteuid() == 0:
            shutil.chown(tmp, "postgres")
        data = os.path.join(tmp, "data")
        subprocess.run(
            _as_postgres([f"{bin_dir}/initdb", "-D", data, "-A", "trust", "-U", "postgres"]),
            check=True,
            stdout=subprocess.DEVNULL,
        )
        settings = {
            "port": str(port),
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": tmp,
            "fsync": "off",
            **config,
        }
        options = [arg for name, value in settings.items() for arg in ("-c", f"{name}={value}")]
        process = subprocess.Popen(
            _as_postgres([f"{bin_dir}/postgres", "-D", data, *options]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 30
            while subprocess.run(
                [f"{bin_dir}/pg_isready", "-q", "-h", "127.0.0.1", "-p", str(port)]
            ).returncode:
                assert process.poll() is None, "the private PostgreSQL server exited"
                assert time.monotonic() < deadline, "the private PostgreSQL did not start"
                time.sleep(0.1)
            yield port
        finally:
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
