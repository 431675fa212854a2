"""Model-side benchmarks: ``python -m bench models``.

1. A ``VersionedMixin`` save (one changed field, guarded) against Django's plain
   ``Model.save()`` of the same instance (every column, unguarded), on PostgreSQL.
   Target: the versioned save at least 0.8× the plain one.
2. ``claim()`` throughput: 4 processes claiming and releasing from a pool of 1,000
   tasks, against the naive way without ``SKIP LOCKED`` (take the first free task,
   try its lock, next one on failure), on PostgreSQL and MariaDB; ``claim()`` with an
   owner named (which serializes the owner's claims with a lock of its own) and with
   the default owner (this thread: nothing to serialize).

Both run on the benchmark databases of ``bench.common.setup_django``; the rows they
make are deleted afterwards.
"""

from __future__ import annotations

import time
from typing import Any

from bench.common import Result, alternate, print_table, setup_django

POOL = 1000
PROCESSES = 4
SECONDS = 2.0
ROUNDS = 3


# --- in the worker processes (nothing from Django at import time) --------------------
def claim_worker(
    database: str, backend: str, title: str, me: str, how: str, seconds: float
) -> tuple[int, float]:
    """Claim and release tasks for ``seconds`` (``how``: ``"claim"``, ``"default"``
    or ``"naive"``); return (claims, elapsed)."""
    import occupy
    from tests.testapp.models import Task

    pool = Task.objects.using(database).filter(title=title, done=False)
    take = {"claim": _claim, "default": _claim_as_default, "naive": _naive_claim}[how]
    count = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        task = take(pool, me, backend)
        if task is not None:
            occupy.release(task.lease)
            count += 1
    return count, time.perf_counter() - started


def _claim(pool: Any, me: str, backend: str) -> Any:
    return pool.claim(owner=me, ttl=30, backend=backend)


def _claim_as_default(pool: Any, me: str, backend: str) -> Any:
    return pool.claim(ttl=30, backend=backend)


def _naive_claim(pool: Any, me: str, backend: str) -> Any:
    """The peer: first free task in order, try its lock, the next one if taken."""
    import occupy

    for task in pool.free(backend=backend).order_by("pk")[:50]:
        try:
            task.lease = occupy.acquire(
                task.occupy_key, owner=me, ttl=30, timeout=0, backend=backend
            )
        except occupy.Occupied:
            continue
        return task
    return None


# --- in the benchmark process ------------------------------------------------------------
def bench_saves() -> None:
    """Time a one-field change saved by VersionedMixin and by Django's Model.save()."""
    from django.db import models

    from tests.testapp.models import Book

    book = Book.objects.create(name="bench", status="a")
    flip = {"a": "b", "b": "a"}

    def plain(ops: int) -> None:
        for _ in range(ops):
            book.status = flip[book.status]
            models.Model.save(book)

    def versioned(policy: str) -> Any:
        def run(ops: int) -> None:
            for _ in range(ops):
                book.status = flip[book.status]
                book.save(version_policy=policy)

        return run

    book.refresh_from_db()
    results = alternate(
        {
            "Model.save() (plain Django)": plain,
            "VersionedMixin.save() fields": versioned("fields"),
            "VersionedMixin.save() strict": versioned("strict"),
        },
        ops=500,
        rounds=5,
    )
    Book.objects.filter(pk=book.pk).delete()
    print_table(
        "One changed field saved, PostgreSQL (versioned / plain)",
        results,
        reference="Model.save() (plain Django)",
        target="versioned ≥ 0.8× plain",
    )


def bench_claims(database: str, backend: str, label: str) -> None:
    """Time claim() and the naive peer with PROCESSES processes over POOL tasks."""
    from tests.support import multiproc
    from tests.testapp.models import Task

    title = f"bench-claim-{time.time_ns()}"
    Task.objects.using(database).bulk_create(Task(title=title) for _ in range(POOL))
    hows = {
        "claim(owner=…)": "claim",
        "claim(), default owner": "default",
        "naive: first free + lock": "naive",
    }
    rates: dict[str, list[float]] = {name: [] for name in hows}
    try:
        for _ in range(ROUNDS):
            for name, how in hows.items():
                results = multiproc.run(
                    claim_worker,
                    [
                        (database, backend, title, f"editor{n}", how, SECONDS)
                        for n in range(PROCESSES)
                    ],
                    timeout=120,
                )
                claims = sum(count for count, _ in results)
                rates[name].append(claims / max(elapsed for _, elapsed in results))
    finally:
        Task.objects.using(database).filter(title=title).delete()
    print_table(
        f"claim() then release, {PROCESSES} processes, pool of {POOL}, {label}",
        [Result(name, r, unit="claims/s") for name, r in rates.items()],
        reference="naive: first free + lock",
    )


def main() -> None:
    """Run the model-side benchmarks."""
    setup_django("postgresql")
    from django.conf import settings

    bench_saves()
    for database, label in (("postgresql", "PostgreSQL"), ("mysql", "MariaDB")):
        if database in settings.SKIPS:
            print(f"\n(skipped claim() on {label}: {settings.SKIPS[database]})")
            continue
        bench_claims(database, f"db-{database}", label)


if __name__ == "__main__":
    main()
