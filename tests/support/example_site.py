"""The example project, running: migrated on a scratch SQLite file, with two users, in a
real HTTP server in a process of its own (its settings are not the suite's)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.live_server import send

__all__ = ["PASSWORD", "Site", "call", "example_env", "manage", "run_site"]

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "example-pass"

#: Users of the running site: ``editor`` may add, change and delete books and tasks;
#: ``reader`` is signed in with no permission at all.
USERS = f"""
from django.contrib.auth.models import Permission, User
editor = User.objects.create_user("editor", password={PASSWORD!r})
editor.user_permissions.set(Permission.objects.filter(content_type__app_label="library"))
User.objects.create_user("reader", password={PASSWORD!r})
"""


@dataclass(frozen=True)
class Site:
    """The running example site: its base URL and the environment it runs with."""

    url: str
    env: dict[str, str]


def example_env(tmp: Path) -> dict[str, str]:
    """Return the environment of an example project on a scratch SQLite file, without
    Redis (the site's leases live in its database)."""
    return {
        **os.environ,
        "EXAMPLE_SQLITE": str(tmp / "library.sqlite3"),
        "EXAMPLE_REDIS": "off",
        "DJANGO_SETTINGS_MODULE": "tests.example.settings",
    }


def manage(*args: str, env: dict[str, str]) -> str:
    """Run ``manage.py`` of the example project; return its output."""
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@contextmanager
def run_site(tmp: Path, **extra_env: str) -> Iterator[Site]:
    """Migrate the example site on a scratch SQLite file in ``tmp`` (with ``extra_env``
    in its environment), add its users and serve it on a free port until the block
    ends."""
    env = {**example_env(tmp), **extra_env}
    manage("migrate", "--verbosity", "0", env=env)
    manage("shell", "--command", USERS, env=env)
    server = subprocess.Popen(
        [sys.executable, "-m", "example_project.library.server"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdin is not None and server.stdout is not None
    try:
        url = server.stdout.readline().strip()
        assert url.startswith("http://"), f"the example server did not start ({url!r})"
        yield Site(url, env)
    finally:
        server.stdin.close()  # the server's signal to stop
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def call(
    method: str,
    url: str,
    user: str | None = None,
    body: dict[str, Any] | None = None,
    **headers: str,
) -> tuple[int, dict[str, str], bytes]:
    """Send one request, as ``user`` by HTTP Basic or anonymously; return the status,
    the headers and the raw body."""
    return send(method, url, user=user, password=PASSWORD, body=body, **headers)
