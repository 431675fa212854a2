"""A PgBouncer of a test's own, in front of the suite's PostgreSQL: transaction pooling on
a spare port (:mod:`tests.support.ports`), trust authentication, stopped at the end.

PgBouncer refuses to run as root: started by root, it switches to ``postgres``.
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

from tests.support.ports import spare_port

__all__ = ["PGBOUNCER", "pgbouncer", "pgbouncer_missing"]

PGBOUNCER = shutil.which("pgbouncer") or (
    "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None
)


def pgbouncer_missing() -> str | None:
    """Return why no PgBouncer can be started here, or ``None``."""
    if PGBOUNCER is None:
        return "pgbouncer is not installed (apt-get install pgbouncer)"
    return None


@contextmanager
def pgbouncer(
    *, server_port: int = 5432, pool_size: int = 1, mode: str = "transaction"
) -> Iterator[int]:
    """Run PgBouncer in ``mode`` pooling before the PostgreSQL on ``server_port``, with
    ``pool_size`` server connections per database and user; yield its port."""
    assert PGBOUNCER is not None
    port = spare_port()
    with tempfile.TemporaryDirectory(prefix="occupy-pgbouncer-") as tmp:
        work = Path(tmp)
        (work / "users.txt").write_text('"postgres" ""\n')
        (work / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host=127.0.0.1 port={server_port}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {work / 'users.txt'}\n"
            f"pool_mode = {mode}\ndefault_pool_size = {pool_size}\nmax_client_conn = 50\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
            f"logfile = {work / 'pgbouncer.log'}\n"
        )
        if os.geteuid() == 0:
            shutil.chown(tmp, "postgres")
            for name in ("users.txt", "pgbouncer.ini"):
                shutil.chown(work / name, "postgres")
        command = [PGBOUNCER, str(work / "pgbouncer.ini")]
        if os.geteuid() == 0:
            command[1:1] = ["-u", "postgres"]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            _wait_for(port, process)
            yield port
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_for(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"pgbouncer exited: {process.stderr and process.stderr.read()!r}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"pgbouncer did not listen on port {port}")
