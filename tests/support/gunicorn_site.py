"""The example project on PostgreSQL under gunicorn with threads, and the server-side
sessions on its database: how many stay open after a run of API requests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing, contextmanager

from tests.support.example_site import PASSWORD, ROOT, USERS, manage
from tests.support.live_server import send

__all__ = ["lease_cycles", "run_gunicorn", "sessions_on"]

HOST = os.environ.get("OCCUPY_TEST_HOST", "127.0.0.1")
#: How long gunicorn may take to answer its first request.
START_WITHIN = 60.0


def _admin_cursor() -> closing:  # type: ignore[type-arg]
    import psycopg

    return closing(psycopg.connect(host=HOST, user="postgres", dbname="postgres", autocommit=True))


def sessions_on(database: str) -> int:
    """Return how many server sessions are connected to ``database`` now."""
    with _admin_cursor() as conn:
        return int(
            conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [database]
            ).fetchone()[0]
        )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


@contextmanager
def run_gunicorn(
    database: str, *, workers: int = 2, threads: int = 4, books: int = 8
) -> Iterator[list[str]]:
    """Create ``database`` (dropped first if left over), migrate the example project
    into it with its users and ``books`` books, and serve it with gunicorn (``gthread``
    workers) until the block ends; yield the books' API URLs. The database is dropped
    after."""
    with _admin_cursor() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database}"')
        conn.execute(f'CREATE DATABASE "{database}"')
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.example.settings",
        "EXAMPLE_DB": "postgresql",
        "EXAMPLE_PG_NAME": database,
        "EXAMPLE_REDIS": "off",
    }
    server = None
    try:
        manage("migrate", "--verbosity", "0", env=env)
        manage(
            "shell",
            "--command",
            USERS + "\nfrom example_project.library.models import "
            f"Book\nfor n in range({books}): Book.objects.create(name=f'sessions {{n}}', "
            "status='a')",
            env=env,
        )
        port = _free_port()
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "--workers",
                str(workers),
                "--threads",
                str(threads),
                "--worker-class",
                "gthread",
                "--bind",
                f"{HOST}:{port}",
                "--log-level",
                "warning",
                "example_project.wsgi:application",
            ],
            cwd=ROOT,
            env=env,
        )
        url = f"http://{HOST}:{port}/api/books/"
        deadline = time.monotonic() + START_WITHIN
        while True:
            try:
                status, _head, raw = send("GET", url)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise AssertionError("gunicorn did not start") from None
                time.sleep(0.2)
        assert status == 200, raw
        yield [f"{url}{book['id']}/" for book in json.loads(raw)]
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        with _admin_cursor() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def lease_cycles(book_urls: list[str], requests: int) -> None:
    """Send ``requests`` API requests, from one client thread per book at once: each
    pair takes the client's book's edit lease and gives it back; fail on any other
    answer."""

    def cycles(book_url: str) -> None:
        for _ in range(requests // 2 // len(book_urls)):
            status, _head, raw = send(
                "POST", f"{book_url}lease/", user="editor", password=PASSWORD, body={"ttl": 30}
            )
            assert status == 201, raw
            token = json.loads(raw)["token"]
            status, _head, raw = send(
                "DELETE", f"{book_url}lease/", user="editor", password=PASSWORD, Occupy_Lease=token
            )
            assert status == 204, raw

    with ThreadPoolExecutor(len(book_urls)) as pool:
        list(pool.map(cycles, book_urls))
