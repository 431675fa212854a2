"""A key held for the app's own transaction against a plain transaction (PostgreSQL).

Each operation is one transaction that increments one counter row (``UPDATE``), as a
guarded write does: plain (``BEGIN``, ``UPDATE``, ``COMMIT``); with
``occupy.lock(key, scope="transaction")`` before the ``UPDATE`` (one query more, no
commit of its own); and with a bare ``pg_advisory_xact_lock`` statement, the floor any
transaction-scoped lock can reach. Rounds alternate (see :mod:`bench.common`); the
queries each candidate sends per transaction are counted once, from Django's log.
Target: occupy ≥ 0.80× the plain transaction, one query and no commit more.
"""

from __future__ import annotations

from collections.abc import Callable

from bench.common import alternate, print_table

DATABASE = "postgresql"
BACKEND = "db-postgresql"
COUNTER = "bench_tx_counter"
OPS = 500
ROUNDS = 11


def _create_counter() -> None:
    from django.db import connections

    with connections[DATABASE].cursor() as cursor:
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {COUNTER} (id int PRIMARY KEY, n bigint)")
        cursor.execute(f"INSERT INTO {COUNTER} VALUES (1, 0) ON CONFLICT DO NOTHING")


def _candidates() -> dict[str, Callable[[int], None]]:
    from django.db import connections, transaction

    import occupy
    from occupy.backends.db.dialects.postgresql import advisory_id

    connection = connections[DATABASE]
    update = f"UPDATE {COUNTER} SET n = n + 1 WHERE id = 1"
    ident = advisory_id("bench:tx")

    def plain(ops: int) -> None:
        for _ in range(ops):
            with transaction.atomic(using=DATABASE), connection.cursor() as cursor:
                cursor.execute(update)

    def bare(ops: int) -> None:
        for _ in range(ops):
            with transaction.atomic(using=DATABASE), connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [ident])
                cursor.execute(update)

    def held(ops: int) -> None:
        for _ in range(ops):
            with transaction.atomic(using=DATABASE):
                with occupy.lock("bench:tx", scope="transaction", backend=BACKEND):
                    pass
                with connection.cursor() as cursor:
                    cursor.execute(update)

    return {
        "plain transaction (UPDATE)": plain,
        "pg_advisory_xact_lock + UPDATE": bare,
        "occupy.lock(scope='transaction') + UPDATE": held,
    }


def _queries(run: Callable[[int], None]) -> list[str]:
    """Return the queries one operation of ``run`` sends, as Django logs them."""
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connections[DATABASE]) as captured:
        run(1)
    return [query["sql"].split(" ", 1)[0] for query in captured.captured_queries]


def transaction_lock() -> None:
    """Print the rates of the three candidates and their queries per transaction."""
    _create_counter()
    candidates = _candidates()
    results = alternate(candidates, ops=OPS, rounds=ROUNDS)
    for result in results:
        result.unit = "transactions/s"
    print_table(
        "A key held for the app's transaction: lock + UPDATE vs a plain transaction",
        results,
        reference="plain transaction (UPDATE)",
        target="occupy ≥ 0.80× plain, one query more, no commit of its own",
    )
    for name, run in candidates.items():
        sent = _queries(run)
        print(f"  {name}: {len(sent)} queries per transaction ({', '.join(sent)})")
