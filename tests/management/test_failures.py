"""What an operator sees when a store fails, and how loud ``sweep_locks`` is.

Before, ``list_locks`` and ``sweep_locks`` ended in a traceback when Redis was down,
when occupy's migration was never applied, or with a ``RedisBackend`` on a
``LocMemCache``, and printed nothing of the backends that worked; ``sweep_locks`` printed
a line per backend even at ``-v 0`` and "deleted 0" on stores that expire claims
themselves, and could not list what it removed.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.test import override_settings

import occupy
from occupy.backends import get_backend
from tests.support.aliases import DATABASE_BACKENDS, backend_params, server_skip
from tests.support.bulk_claims import insert_claims

ROOT = Path(__file__).resolve().parents[2]
#: A port in this suite's spare range where no Redis answers.
DEAD_REDIS = "redis://127.0.0.1:16601/0"
DOWN_CACHES = {
    **settings.CACHES,
    "down": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": DEAD_REDIS,
        "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1},
    },
    "local": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
}
needs_django_redis = pytest.mark.skipif(
    "redis" in settings.SKIPS and "django_redis" in settings.SKIPS["redis"],
    reason="django-redis is not installed",
)


def _occupy(tmp_path: Path, **more: dict[str, object]) -> dict[str, object]:
    """A working file backend as ``default``, beside the backends given."""
    return {
        "BACKENDS": {
            "default": {
                "BACKEND": "occupy.backends.file.FileBackend",
                "LOCATION": str(tmp_path / "locks"),
            },
            **more,
        }
    }


def _run(name: str, *args: str, verbosity: int = 1) -> tuple[str, str | None]:
    """Run a command; return what it printed and its CommandError's message, if any."""
    out = io.StringIO()
    try:
        call_command(name, *args, stdout=out, stderr=io.StringIO(), verbosity=verbosity)
    except CommandError as e:
        return out.getvalue(), str(e)
    return out.getvalue(), None


@needs_django_redis
@pytest.mark.parametrize("command", ["list_locks", "sweep_locks"])
def test_redis_down_is_one_line_after_what_the_others_said(tmp_path, command) -> None:
    backends = {
        "down": {"BACKEND": "occupy.backends.redis.RedisBackend", "OPTIONS": {"CACHE": "down"}},
        "files": {
            "BACKEND": "occupy.backends.file.FileBackend",
            "LOCATION": str(tmp_path / "more"),
        },
    }
    with override_settings(CACHES=DOWN_CACHES, OCCUPY=_occupy(tmp_path, **backends)):
        lease = occupy.acquire("book:1", owner="alice", ttl=60)
        try:
            printed, error = _run(command)
        finally:
            occupy.release(lease)
    if command == "list_locks":
        # Redis cannot be read: the command fails after listing the others.
        assert "book:1" in printed and "alice" in printed
        assert error is not None and error.count("\n") == 0
        assert error.startswith("down: could not use cache 'down' (redis://127.0.0.1:16601/0)")
        assert "check that this Redis server answers" in error
    else:
        # Nothing to sweep on Redis, which it need not reach.
        assert error is None
        assert printed.splitlines() == [
            "default: deleted 0 expired claims",
            "down: nothing to sweep (the store drops expired claims itself)",
            "files: deleted 0 expired claims",
        ]


@needs_django_redis
def test_a_redis_backend_on_a_locmem_cache_says_which_cache_to_use(tmp_path) -> None:
    backends = {
        "local": {"BACKEND": "occupy.backends.redis.RedisBackend", "OPTIONS": {"CACHE": "local"}}
    }
    with override_settings(CACHES=DOWN_CACHES, OCCUPY=_occupy(tmp_path, **backends)):
        printed, error = _run("list_locks")
    # Not "No live claims.": the claims of 'local' are unknown.
    assert printed == "No live claims on 'default'.\n"
    assert error is not None and error.startswith(
        "local: occupy backend 'local' needs a django-redis cache"
    )
    assert error.endswith("point OPTIONS['CACHE'] at such a cache.")


@pytest.fixture(params=backend_params(DATABASE_BACKENDS))
def alias(request: pytest.FixtureRequest, live_db: None) -> str:
    """A database backend alias."""
    return request.param


def test_sweep_is_silent_at_verbosity_0(alias: str) -> None:
    insert_claims(get_backend(alias).database, 5, tag="quiet", expired=True)
    aliases = [alias, "files"] + ([] if server_skip("redis") else ["redis"])
    args = [f"--backend={name}" for name in aliases]
    assert _run("sweep_locks", *args, verbosity=0) == ("", None)
    assert _run("sweep_locks", "--dry-run", *args, verbosity=0) == ("", None)


def test_sweep_lists_the_keys_it_removes_at_verbosity_2(alias: str) -> None:
    insert_claims(get_backend(alias).database, 3, tag="listed", expired=True)
    insert_claims(get_backend(alias).database, 2, tag="kept", expired=False)
    printed, error = _run("sweep_locks", "--dry-run", f"--backend={alias}", verbosity=2)
    assert error is None
    lines = printed.splitlines()
    assert sorted(lines[:-1]) == [f"{alias}: would remove listed:{n}" for n in range(1, 4)]
    assert lines[-1] == f"{alias}: would delete 3 expired claims"
    printed, error = _run("sweep_locks", f"--backend={alias}", "--batch-size=2", verbosity=2)
    assert error is None
    lines = printed.splitlines()
    assert sorted(lines[:-1]) == [f"{alias}: removed listed:{n}" for n in range(1, 4)]
    assert lines[-1] == f"{alias}: deleted 3 expired claims"
    assert _run("sweep_locks", f"--backend={alias}", verbosity=2)[0] == (
        f"{alias}: deleted 0 expired claims\n"
    )


def test_the_file_backend_lists_the_keys_it_removes(live_db: None) -> None:
    files = get_backend("files")
    lease = occupy.acquire("file:gone", owner="alice", ttl=0.05, backend="files")
    import time

    time.sleep(0.1)  # the claim expires
    printed, error = _run("sweep_locks", "--backend=files", verbosity=2)
    assert error is None
    assert printed.splitlines() == ["files: removed file:gone", "files: deleted 1 expired claim"]
    assert files.holder("file:gone") is None
    del lease


def test_a_failed_command_exits_1_without_a_traceback(tmp_path) -> None:
    """Run as an operator does: ``manage.py list_locks`` on a database where occupy's
    migration was never applied (a fresh SQLite file), beside a file backend."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.management.unmigrated_settings",
        "OCCUPY_UNMIGRATED_DIR": str(tmp_path),
    }
    for command in ("list_locks", "sweep_locks"):
        done = subprocess.run(
            [sys.executable, "manage.py", command],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 1, (command, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        error = done.stderr.strip()
        assert error.startswith(
            "CommandError: default: occupy backend 'default' could "
            "not work: database 'default' lacks the tables"
        ), error
        assert error.endswith("Run 'python manage.py migrate occupy --database default'."), error
        assert error.count("\n") == 0, error
        expected = (
            "No live claims on 'files'."
            if command == "list_locks"
            else ("files: deleted 0 expired claims")
        )
        assert done.stdout.strip() == expected, done.stdout
