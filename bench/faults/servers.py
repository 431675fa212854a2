"""The fault soak's private servers: PostgreSQL, MariaDB and Redis, each started by this
process in the run's temporary directory on a spare port, and stopped by its PID.

Every server runs in a process group of its own (``start_new_session``), so a Ctrl-C
at the terminal reaches only the coordinator, whose ``finally`` stops them; what a
server does not stop by itself within :data:`STOP_WAIT` seconds is killed with its
group. A restart is a stop and a start on the same data directory: ``graceful`` (the
server's own shutdown) or not (``SIGKILL``, as a crash would), as the fault says.

Nothing here touches the shared servers on the standard ports: the clients are given
the private port every time.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "PG_BIN",
    "STOP_WAIT",
    "MariaDB",
    "PostgreSQL",
    "Redis",
    "Server",
    "describe",
    "run_tool",
]

#: How long a server may take to stop by itself before its group is killed, in seconds.
STOP_WAIT = 30.0
#: How long a server may take to accept connections after it was started, in seconds.
START_WAIT = 60.0


def _postgresql_bin() -> Path:
    """Return the directory of the newest PostgreSQL server installed the Debian way
    (``/usr/lib/postgresql/<version>/bin``), or ``OCCUPY_FAULTS_PG_BIN``."""
    if os.environ.get("OCCUPY_FAULTS_PG_BIN"):
        return Path(os.environ["OCCUPY_FAULTS_PG_BIN"])
    found = [p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/postgres")]
    found.sort(key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    return found[-1] if found else Path("/usr/lib/postgresql/15/bin")


#: Where ``initdb``, ``postgres`` and ``pg_isready`` are.
PG_BIN = _postgresql_bin()
HOST = "127.0.0.1"


def run_tool(
    args: Sequence[str], *, timeout: float = 20, user: str | None = None, check: bool = True
) -> str:
    """Run a client or set-up tool to completion (bounded by ``timeout``); return its
    output, raising with its error output when it fails and ``check`` is set."""
    done = subprocess.run(
        list(args), capture_output=True, text=True, timeout=timeout, user=user, check=False
    )
    if check and done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} failed ({done.returncode}): "
            f"{done.stderr.strip() or done.stdout.strip()}"
        )
    return done.stdout


def _listening(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


class Server:
    """A server process this run started; subclasses say how to start, stop and reach it."""

    #: What the report calls it.
    label = "server"
    #: The signal of the server's own orderly shutdown.
    stop_signal = signal.SIGTERM
    #: Whether a restart keeps what the server held (False: Redis without persistence).
    durable = True
    #: The user the server runs as (PostgreSQL refuses to run as root).
    run_as: str | None = None

    def __init__(self, root: Path, port: int) -> None:
        self.root = root
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None
        self.log = root / f"{self.label}.log"

    # What each server writes.
    def command(self) -> list[str]:
        """Return the command line that runs the server in the foreground."""
        raise NotImplementedError("subclasses of Server must provide a command() method")

    def prepare(self) -> None:
        """Create the server's data directory (once, before the first start)."""

    def ready(self) -> bool:
        """Return whether the server accepts work."""
        return _listening(self.port)

    def after_start(self) -> None:
        """Set up what the stores need once the server first answers (databases)."""

    def kill_connections(self) -> int:
        """Drop every client connection but the caller's; return how many."""
        raise NotImplementedError("subclasses of Server must provide kill_connections()")

    # Life cycle, by PID.
    @property
    def pid(self) -> int | None:
        """Return the server's PID while it runs."""
        return self.process.pid if self.process and self.process.poll() is None else None

    def start(self) -> None:
        """Start the server and wait (bounded) until it accepts work."""
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                start_new_session=True,
                user=self.run_as,
            )
        deadline = time.monotonic() + START_WAIT
        while not self.ready():
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.label} exited with {self.process.returncode} at start; see {self.log}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.label} did not answer in {START_WAIT:.0f} s; see {self.log}"
                )
            time.sleep(0.05)

    def stop(self, *, graceful: bool = True) -> None:
        """Stop the server: its own shutdown, or ``SIGKILL`` to its group; wait for it."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            if graceful:
                os.kill(process.pid, self.stop_signal)
            else:
                os.killpg(process.pid, signal.SIGKILL)
        try:
            process.wait(STOP_WAIT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(STOP_WAIT)
        # Whatever the server left in its group (PostgreSQL's backends after a SIGKILL
        # of the postmaster exit by themselves, but not at once).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)

    def restart(self, *, graceful: bool) -> None:
        """Stop the server (gracefully or as by a crash) and start it again."""
        self.stop(graceful=graceful)
        self.start()


class PostgreSQL(Server):
    """A private PostgreSQL cluster (trust authentication, user ``postgres``,
    database ``occupy``). Its own shutdown is the fast one (``SIGINT``)."""

    label = "postgresql"
    stop_signal = signal.SIGINT

    def __init__(self, root: Path, port: int) -> None:
        super().__init__(root / "postgresql", port)
        self.data = self.root / "data"
        # initdb and postgres refuse to run as root.
        self.run_as = "postgres" if os.geteuid() == 0 else None

    def prepare(self) -> None:
        """Create the cluster with ``initdb`` (no fsync: a crash of the server process,
        unlike one of the machine, loses nothing the kernel was given)."""
        self.root.mkdir(parents=True)
        if self.run_as:
            shutil.chown(self.root, self.run_as)
        run_tool(
            [
                str(PG_BIN / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
            timeout=120,
            user=self.run_as,
        )

    def command(self) -> list[str]:
        """Return the postmaster's command line."""
        return [
            str(PG_BIN / "postgres"),
            "-D",
            str(self.data),
            "-p",
            str(self.port),
            "-c",
            f"listen_addresses={HOST}",
            "-c",
            f"unix_socket_directories={self.root}",
            "-c",
            "fsync=off",
            "-c",
            "max_connections=200",
            "-c",
            "shared_buffers=32MB",
            "-c",
            "log_min_messages=fatal",
        ]

    def ready(self) -> bool:
        """Return whether the server accepts connections (``pg_isready``)."""
        done = subprocess.run(
            [str(PG_BIN / "pg_isready"), "-q", "-h", HOST, "-p", str(self.port)],
            timeout=10,
            check=False,
        )
        return done.returncode == 0

    def after_start(self) -> None:
        """Create the ``occupy`` database."""
        self.psql("CREATE DATABASE occupy", database="postgres")

    def psql(self, sql: str, *, database: str = "occupy") -> str:
        """Run ``sql`` with ``psql``; return its unaligned output."""
        return run_tool(
            [
                "psql",
                "-h",
                HOST,
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-d",
                database,
                "-tAXc",
                sql,
            ]
        )

    def kill_connections(self) -> int:
        """``pg_terminate_backend`` every other session on the ``occupy`` database."""
        out = self.psql(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) "
            "FROM pg_stat_activity WHERE datname = 'occupy' "
            "AND pid <> pg_backend_pid()"
        )
        return int(out.strip() or 0)


class MariaDB(Server):
    """A private MariaDB server (its own data directory, socket and port; no grant
    tables, so root needs no password), database ``occupy``."""

    label = "mariadb"

    def __init__(self, root: Path, port: int) -> None:
        super().__init__(root / "mariadb", port)
        self.data = self.root / "data"
        self.socket = self.root / "mariadb.sock"

    def prepare(self) -> None:
        """Create the data directory with ``mariadb-install-db``."""
        self.root.mkdir(parents=True)
        run_tool(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={self.data}",
                f"--user={getpass.getuser()}",
                "--skip-test-db",
                "--auth-root-authentication-method=normal",
            ],
            timeout=180,
        )

    def command(self) -> list[str]:
        """Return ``mariadbd``'s command line."""
        user = ["--user=root"] if os.geteuid() == 0 else []
        return [
            "mariadbd",
            "--no-defaults",
            *user,
            f"--datadir={self.data}",
            f"--socket={self.socket}",
            f"--port={self.port}",
            f"--bind-address={HOST}",
            f"--pid-file={self.root / 'mariadb.pid'}",
            "--skip-grant-tables",
            "--skip-name-resolve",
            "--innodb-buffer-pool-size=32M",
            "--max-connections=200",
            "--skip-log-bin",
        ]

    def ready(self) -> bool:
        """Return whether the server answers a ping."""
        done = subprocess.run(
            [
                "mariadb-admin",
                "-h",
                HOST,
                f"--port={self.port}",
                "-uroot",
                "--connect-timeout=2",
                "ping",
            ],
            capture_output=True,
            timeout=10,
            check=False,
        )
        return done.returncode == 0

    def after_start(self) -> None:
        """Create the ``occupy`` database."""
        self.sql("CREATE DATABASE IF NOT EXISTS occupy CHARACTER SET utf8mb4")

    def sql(self, sql: str) -> str:
        """Run ``sql`` with the ``mariadb`` client; return its tab-separated output."""
        return run_tool(
            ["mariadb", "-h", HOST, f"--port={self.port}", "-uroot", "-N", "-B", "-e", sql]
        )

    def kill_connections(self) -> int:
        """``KILL`` every other client connection on the ``occupy`` database."""
        ids = self.sql(
            "SELECT id FROM information_schema.processlist "
            "WHERE db = 'occupy' AND id <> CONNECTION_ID()"
        ).split()
        if ids:
            # --force: go on past a connection that ended since the list was read.
            run_tool(
                [
                    "mariadb",
                    "-h",
                    HOST,
                    f"--port={self.port}",
                    "-uroot",
                    "--force",
                    "-e",
                    "".join(f"KILL {int(i)};" for i in ids),
                ],
                check=False,
            )
        return len(ids)


class Redis(Server):
    """A private Redis server, with the append-only file (``appendfsync always``, so a
    killed server loses no acknowledged write) or with no persistence at all (a restart
    loses every key: the documented limit)."""

    def __init__(self, root: Path, port: int, *, appendonly: bool) -> None:
        self.appendonly = appendonly
        self.label = "redis-aof" if appendonly else "redis"
        super().__init__(root / self.label, port)
        self.durable = appendonly

    def prepare(self) -> None:
        """Create the server's directory."""
        self.root.mkdir(parents=True)

    def command(self) -> list[str]:
        """Return ``redis-server``'s command line."""
        persistence = (
            ["--appendonly", "yes", "--appendfsync", "always"]
            if self.appendonly
            else ["--appendonly", "no"]
        )
        return [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            HOST,
            "--save",
            "",
            *persistence,
            "--dir",
            str(self.root),
            "--daemonize",
            "no",
            "--logfile",
            "",
            "--loglevel",
            "warning",
        ]

    def ready(self) -> bool:
        """Return whether the server answers ``PING`` (an AOF being loaded does not)."""
        done = subprocess.run(
            ["redis-cli", "-h", HOST, "-p", str(self.port), "ping"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        return done.stdout.strip() == "PONG"

    def cli(self, *args: str) -> str:
        """Run ``redis-cli`` with ``args``; return its output."""
        return run_tool(["redis-cli", "-h", HOST, "-p", str(self.port), *args])

    def kill_connections(self) -> int:
        """``CLIENT KILL`` every normal client but the caller."""
        out = self.cli("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        return int(out.strip() or 0)


def describe(servers: Sequence[Server]) -> dict[str, Any]:
    """Return the environment variables that tell the workers where the servers are."""
    names = {
        "postgresql": "OCCUPY_FAULTS_PG_PORT",
        "mariadb": "OCCUPY_FAULTS_MARIADB_PORT",
        "redis-aof": "OCCUPY_FAULTS_REDIS_AOF_PORT",
        "redis": "OCCUPY_FAULTS_REDIS_PORT",
    }
    return {names[s.label]: str(s.port) for s in servers}
