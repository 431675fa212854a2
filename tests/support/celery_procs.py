"""Start and stop real Celery workers and beat processes for the tests, and read what
their tasks recorded (tests/support/celery_app.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connections

ROOT = Path(__file__).resolve().parents[2]
RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672//"
#: The Redis database Celery uses as broker in the tests (apart from the lock tests').
REDIS_BROKER_DB = int(os.environ.get("OCCUPY_TEST_CELERY_REDIS_DB", "8"))
REDIS_URL = f"redis://127.0.0.1:6379/{REDIS_BROKER_DB}"
QUEUE_PREFIX = f"occupy{settings.SUFFIX or '-tests'}"


def env(broker: str, queue: str, locks: str, ttl: float, **extra: str) -> dict[str, str]:
    """Return the environment of a process that loads the test Celery app."""
    names = {alias: connections[alias].settings_dict["NAME"] for alias in connections}
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "OCCUPY_TEST_CELERY_BROKER": broker,
        "OCCUPY_TEST_CELERY_QUEUE": queue,
        "OCCUPY_TEST_CELERY_LOCKS": locks,
        "OCCUPY_TEST_CELERY_TTL": str(ttl),
        "OCCUPY_TEST_CELERY_DBNAMES": json.dumps(names),
        "PYTHONPATH": str(ROOT),
        **extra,
    }


@contextmanager
def processes(
    commands: list[list[str]], environ: dict[str, str], logdir: Path
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Run ``commands`` (each a process group of its own); kill what is left at exit."""
    procs = []
    try:
        for i, command in enumerate(commands):
            log = open(logdir / f"proc{i}.log", "wb")  # noqa: SIM115 - closed with the process
            procs.append(
                subprocess.Popen(
                    command,
                    env=environ,
                    cwd=ROOT,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def worker_command(name: str, queue: str, concurrency: int) -> list[str]:
    """Return the command of a prefork worker on ``queue``."""
    return [
        sys.executable, "-m", "celery", "-A", "tests.support.celery_app", "worker",
        "-P", "prefork", "-c", str(concurrency), "-Q", queue, "-n", f"{name}@%h",
        "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "warning",
    ]  # fmt: skip


def beat_command(scheduler: str, directory: Path, number: int) -> list[str]:
    """Return the command of a ``celery beat`` with ``scheduler``, its files in ``directory``."""
    return [
        sys.executable, "-m", "celery", "-A", "tests.support.celery_app", "beat",
        "-S", scheduler, "-s", str(directory / f"schedule{number}"),
        "--pidfile", str(directory / f"beat{number}.pid"), "-l", "info",
    ]  # fmt: skip


def enqueue(
    environ: dict[str, str], kind: str, rounds: int, keys: list[str], at: float | None = None
) -> subprocess.Popen[bytes]:
    """Start a process that sends tasks (at ``time.time()`` ``at``, if given) and prints
    their ids (see :func:`sent`)."""
    if at is not None:
        environ = {**environ, "OCCUPY_TEST_CELERY_AT": str(at)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.celery_app", kind, str(rounds), *keys],
        env=environ, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def sent(proc: subprocess.Popen[bytes]) -> list[str]:
    """Return the ids an :func:`enqueue` process sent."""
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    return list(json.loads(out.decode().strip().splitlines()[-1]))


def sql(query: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    """Run ``query`` on the PostgreSQL test database; return its rows."""
    with connections["postgresql"].cursor() as cursor:
        cursor.execute(query, params or [])
        return list(cursor.fetchall()) if cursor.description else []


def create_tables(keys: list[str]) -> None:
    """Create the tables the tasks record into, empty, with a resource row per key."""
    drop_tables()
    sql(
        "CREATE TABLE celery_runs (id serial PRIMARY KEY, task_id text, key text, "
        "number int, pid int, fence bigint, started timestamptz, ended timestamptz, "
        "fenced_ok boolean)"
    )
    sql("CREATE TABLE celery_resource (key text PRIMARY KEY, fence bigint, writes int)")
    for key in keys:
        sql("INSERT INTO celery_resource VALUES (%s, 0, 0)", [key])


def drop_tables() -> None:
    """Drop the tables :func:`create_tables` made."""
    sql("DROP TABLE IF EXISTS celery_runs")
    sql("DROP TABLE IF EXISTS celery_resource")


def db_now() -> datetime:
    """Return the PostgreSQL clock's now (the clock the tasks record with)."""
    return sql("SELECT clock_timestamp()")[0][0]


def purge(broker: str, queue: str) -> None:
    """Delete ``queue`` (and on RabbitMQ its exchange) from the broker."""
    from kombu import Connection

    with Connection(broker, connect_timeout=5) as conn:
        channel = conn.default_channel
        with suppress(Exception):
            channel.queue_delete(queue)
        if broker.startswith("amqp"):
            with suppress(Exception):
                channel.exchange_delete(queue)
    if broker.startswith("redis"):
        import redis

        client = redis.Redis.from_url(broker)
        for name in client.scan_iter(match=f"*{queue}*"):
            client.delete(name)
        client.delete("unacked", "unacked_index", "unacked_mutex")


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    """Wait until ``predicate()`` is true, or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)
