"""Workers and assertions for the multiprocess tests of a lock backend.

Workers run in spawned processes (tests/support/multiproc.py), so they live at module
level and import what they need inside.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from typing import Any, cast

from tests.support import multiproc

__all__ = [
    "assert_exclusive",
    "count_in_either_scope",
    "count_under_lock",
    "count_with_failed_release",
    "database_of",
    "hand_back_and_forth",
    "hold_until_killed",
    "taken_over_after_kill",
    "try_acquire",
]

#: One critical section: when it was entered and left (``time.monotonic()``, which every
#: process of the host shares) and the fence of the lease it ran under.
Span = tuple[float, float, int]


def database_of(alias: str) -> str:
    """Return the database a database backend alias keeps its claims in (else default)."""
    from django.conf import settings

    backends = cast("dict[str, Any]", settings.OCCUPY["BACKENDS"])
    options = backends[alias].get("OPTIONS") or {}
    return str(options.get("DATABASE", "default"))


def hand_back_and_forth(database: str, key: str, seconds: float, poll: float) -> list[float]:
    """Take ``key`` and give it back at once (and ask again at once), for ``seconds``, through a
    database backend on ``database`` whose waiters poll only every ``poll`` seconds;
    return how long each acquire waited."""
    from django.conf import settings
    from django.test import override_settings

    import occupy

    backends = {
        **settings.OCCUPY["BACKENDS"],
        "hand-back": {
            "BACKEND": "occupy.backends.db.DatabaseBackend",
            "OPTIONS": {"DATABASE": database, "POLL_INTERVAL": poll},
        },
    }
    waits = []
    with override_settings(OCCUPY={**settings.OCCUPY, "BACKENDS": backends}):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            asked = time.monotonic()
            lease = occupy.acquire(key, ttl=30, timeout=poll * 3, backend="hand-back")
            waits.append(time.monotonic() - asked)
            occupy.release(lease)
    return waits


def count_under_lock(
    alias: str | None, key: str, rounds: int, hold: float, database: str = "default"
) -> list[Span]:
    """Increment the ``key`` Counter row ``rounds`` times, each a slow read-modify-write
    inside the lock (none when ``alias`` is ``None``); return ``(entered, left, fence)``
    per round (monotonic clock, which every process of the host shares)."""
    import contextlib

    import occupy
    from tests.testapp.models import Counter

    counters = Counter.objects.using(database)
    spans = []
    for _ in range(rounds):
        guard = occupy.lock(key, ttl=30, timeout=120, backend=alias) if alias else None
        with guard or contextlib.nullcontext() as lease:
            entered = time.monotonic()
            counter = counters.get(name=key)
            time.sleep(hold)  # widen the window a lost update would need
            counter.value += 1
            counter.save()
            left = time.monotonic()
        spans.append((entered, left, lease.fence if lease else 0))
    return spans


def count_in_either_scope(using: str, key: str, rounds: int, hold: float, scope: str) -> list[Span]:
    """Increment the ``key`` Counter row ``rounds`` times under ``key``, each a slow
    read-modify-write: under a lease (``scope="lease"``: the fence is the lease's), or
    inside a transaction that holds the key (``"transaction"``: fence 0, none). A span
    ends before the lock can go: before the release, before the transaction's commit."""
    from django.db import transaction

    import occupy
    from tests.testapp.models import Counter

    database = database_of(using)
    counters = Counter.objects.using(database)
    spans = []
    for _ in range(rounds):
        if scope == "lease":
            with occupy.lock(key, ttl=30, timeout=120, backend=using) as lease:
                entered = time.monotonic()
                counter = counters.get(name=key)
                time.sleep(hold)
                counter.value += 1
                counter.save()
                left = time.monotonic()
            spans.append((entered, left, lease.fence))
            continue
        with transaction.atomic(using=database):
            with occupy.lock(key, scope="transaction", timeout=120, backend=using):
                entered = time.monotonic()
            counter = counters.get(name=key)
            time.sleep(hold)
            counter.value += 1
            counter.save()
            left = time.monotonic()
        spans.append((entered, left, 0))
    return spans


def count_with_failed_release(
    alias: str, key: str, seconds: float, fail_first: bool, enough: int
) -> tuple[list[Span], bool]:
    """Loop over ``key`` as a worker does, incrementing its Counter row under the lock
    (ttl 1 s), until it was granted the key ``enough`` times (distinct fences) or
    ``seconds`` passed; with ``fail_first``, the first release fails as it would when
    the store is restarted. Return the ``(entered, left, fence)`` spans and whether a
    release failed."""
    import occupy
    from occupy.backends import get_backend
    from tests.testapp.models import Counter

    backend = get_backend(alias)
    real_release = backend.release
    failed = False

    def failing_release(lease: occupy.Lease) -> None:
        backend.release = real_release  # type: ignore[method-assign]
        raise occupy.OccupyError("the store restarted", key=lease.key)

    if fail_first:
        backend.release = failing_release  # type: ignore[method-assign]
    spans = []
    deadline = time.monotonic() + seconds
    # Grants, not spans: re-entries of an orphaned claim share its fence, so a worker
    # that re-enters its orphan (and a worker it starves) loops on to the deadline,
    # while a passing run lasts about the orphan's ttl, not ``seconds``.
    while time.monotonic() < deadline and len({fence for *_, fence in spans}) < enough:
        try:
            with occupy.lock(key, ttl=1, timeout=10, backend=alias) as lease:
                entered = time.monotonic()
                counter = Counter.objects.get(name=key)
                time.sleep(0.005)
                counter.value += 1
                counter.save()
                left = time.monotonic()
                spans.append((entered, left, lease.fence))
        except occupy.LockTimeout:
            continue
        except occupy.OccupyError as e:
            assert "restarted" in str(e), e
            failed = True
    return spans, failed


def assert_exclusive(results: list[list[Span]], key: str, database: str = "default") -> None:
    """Assert no two holders overlapped, no increment was lost, and fences rose in the
    order the lock was granted."""
    from tests.testapp.models import Counter

    spans = sorted(span for worker in results for span in worker)
    for (_, left, fence), (entered, _, next_fence) in itertools.pairwise(spans):
        assert entered >= left, f"two holders overlapped: {spans}"
        assert next_fence > fence, f"a fence did not rise in grant order: {spans}"
    assert Counter.objects.using(database).get(name=key).value == len(spans)


def try_acquire(alias: str, key: str, owner: str) -> str:
    """Try ``key`` once without waiting; return ``"acquired"`` or ``"occupied"``."""
    import occupy

    try:
        occupy.release(occupy.acquire(key, owner=owner, timeout=0, backend=alias))
    except occupy.Occupied:
        return "occupied"
    return "acquired"


def hold_until_killed(alias: str, key: str, ttl: float) -> None:
    """Take ``key`` and sleep until the parent kills this process."""
    import occupy

    occupy.acquire(key, owner=f"doomed:{os.getpid()}", ttl=ttl, timeout=10, backend=alias)
    time.sleep(120)


def taken_over_after_kill(alias: str, key: str, ttl: float) -> float:
    """Have a spawned process take ``key``, SIGKILL it, take the key here; return how
    many seconds after the kill the key was granted (it must be within ``ttl`` + 1)."""
    import occupy

    workers = multiproc.start(hold_until_killed, [(alias, key, ttl)])
    proc = workers.procs[0]
    try:
        deadline = time.monotonic() + 60
        while (held := occupy.holder(key, backend=alias)) is None:
            assert proc.is_alive() and time.monotonic() < deadline, "the holder never held"
            time.sleep(0.02)
        assert held.owner == f"doomed:{proc.pid}"
        os.kill(proc.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        proc.join(timeout=10)
        lease = occupy.acquire(key, owner="survivor", ttl=5, timeout=ttl + 1, backend=alias)
        waited = time.monotonic() - killed_at
        occupy.release(lease)
        return waited
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=10)
