"""``manage.py sweep_locks`` and ``manage.py list_locks`` on every database backend.

Claims are inserted in bulk with one raw statement (:mod:`tests.support.bulk_claims`), so
that a sweep meets 100,000 expired claims in a few seconds.
"""

from __future__ import annotations

import io
import re
import threading
import time
import tracemalloc
from datetime import datetime, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import connections

import occupy
from occupy.backends import get_backend
from occupy.backends.claims import digest
from occupy.backends.db import DatabaseBackend
from tests.support.aliases import DATABASE_BACKENDS, backend_params
from tests.support.bulk_claims import count_claims, insert_claims, tokens_of

EXPIRED = 100_000
LIVE = 1_000


@pytest.fixture(params=backend_params(DATABASE_BACKENDS))
def alias(request: pytest.FixtureRequest, live_db: None) -> str:
    """A database backend alias; the test runs once per database."""
    return request.param


def _database(alias: str) -> str:
    backend = get_backend(alias)
    assert isinstance(backend, DatabaseBackend)
    return backend.database


def sweep(*args: str) -> str:
    """Run ``sweep_locks`` with command-line ``args``; return what it printed."""
    out = io.StringIO()
    call_command("sweep_locks", *args, stdout=out)
    return out.getvalue()


@pytest.mark.slow
def test_sweep_removes_every_expired_claim_and_keeps_every_live_one(alias: str) -> None:
    database = _database(alias)
    insert_claims(database, EXPIRED, tag="expired", expired=True)
    insert_claims(database, LIVE, tag="live", expired=False)
    live = tokens_of(database, "live")
    lease = occupy.acquire("book:1", owner="alice", ttl=60, backend=alias)
    assert len(live) == LIVE and count_claims(database, expired=True) == EXPIRED

    tracemalloc.start()
    try:
        output = sweep("--backend", alias)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert output == f"{alias}: deleted {EXPIRED} expired claims\n"
    assert count_claims(database, expired=True) == 0
    assert tokens_of(database, "live") == live
    assert count_claims(database) == LIVE + 1
    assert get_backend(alias).is_held(lease)
    # Flat: loading the rows would take well over 100 bytes each (a tuple, its strings
    # and datetimes); the sweep may use 20 bytes a row at most, 2 MB in all.
    assert peak < EXPIRED * 20, f"the sweep allocated {peak:,} bytes at its peak"
    occupy.release(lease)


def test_dry_run_counts_and_deletes_nothing(alias: str) -> None:
    database = _database(alias)
    insert_claims(database, 2_500, tag="expired", expired=True)
    insert_claims(database, 10, tag="live", expired=False)
    assert sweep("--backend", alias, "--dry-run") == f"{alias}: would delete 2500 expired claims\n"
    assert count_claims(database, expired=True) == 2_500
    assert count_claims(database) == 2_510


@pytest.mark.parametrize(("size", "statements"), [(1000, 4), (500, 6), (5000, 2)])
def test_batch_size_sets_how_many_rows_each_statement_deletes(
    alias: str, size: int, statements: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = _database(alias)
    insert_claims(database, 2_500, tag="expired", expired=True)
    backend = get_backend(alias)
    batches: list[int] = []
    execute = backend.store.execute

    windows = backend.store.dialect.sweep_windows()
    # The statement that deletes claims whose expiry has passed.
    passed = windows[1] if windows else backend.store.dialect.sweep_batches()[0]

    def counting(sql: str, params: list, **kwargs: object) -> tuple[int, list]:
        result = execute(sql, params, **kwargs)
        if sql == passed:
            batches.append(result[0])
        return result

    monkeypatch.setattr(backend.store, "execute", counting)
    assert sweep("--backend", alias, f"--batch-size={size}") == (
        f"{alias}: deleted 2500 expired claims\n"
    )
    if windows:
        # The claims expire a second apart: each window of expiry holds ``size``, the
        # last the rest (then empty windows may reach the time the sweep began); the
        # probe after them, not a batch, ends the sweep.
        whole = [size] * (2_500 // size) + ([2_500 % size] if 2_500 % size else [])
        assert [count for count in batches if count] == whole
        return
    # Full batches, the rest, then the empty batch that ends the sweep.
    assert len(batches) == statements
    assert batches[-1] == 0 and sum(batches) == 2_500
    assert all(count == size for count in batches[: 2_500 // size])


def test_a_sweep_deletes_ten_thousand_claims_a_statement_unless_told(
    alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before, 1,000: a PostgreSQL sweep spent most of its time on the statements'
    # round trips and commits, and ran at a fraction of one bare DELETE's rate.
    database = _database(alias)
    insert_claims(database, 12_000, tag="expired", expired=True)
    backend = get_backend(alias)
    windows = backend.store.dialect.sweep_windows()
    passed = windows[1] if windows else backend.store.dialect.sweep_batches()[0]
    batches: list[int] = []
    execute = backend.store.execute

    def counting(sql: str, params: list, **kwargs: object) -> tuple[int, list]:
        result = execute(sql, params, **kwargs)
        if sql == passed and result[0]:
            batches.append(result[0])
        return result

    monkeypatch.setattr(backend.store, "execute", counting)
    assert sweep("--backend", alias) == f"{alias}: deleted 12000 expired claims\n"
    assert len(batches) == 2 and max(batches) <= 10_000, batches


@pytest.mark.parametrize("size", ["0", "-5", "1000001", "9223372036854775808"])
def test_batch_size_must_be_within_its_one_bound(alias: str, size: str) -> None:
    # Before, 2**63 raised a bare OverflowError on SQLite and was reported as the
    # server's failure on PostgreSQL.
    database = _database(alias)
    insert_claims(database, 10, tag="expired", expired=True)
    with pytest.raises(
        CommandError, match=rf"^--batch-size must be between 1 and 1,000,000, not {size}\.$"
    ):
        sweep("--backend", alias, f"--batch-size={size}")
    assert count_claims(database, expired=True) == 10


def test_the_largest_batch_size_is_accepted(alias: str) -> None:
    database = _database(alias)
    insert_claims(database, 10, tag="expired", expired=True)
    assert (
        sweep("--backend", alias, "--batch-size=1000000") == f"{alias}: deleted 10 expired claims\n"
    )


def test_an_unknown_alias_is_refused_before_anything_is_swept(alias: str) -> None:
    database = _database(alias)
    insert_claims(database, 10, tag="expired", expired=True)
    with pytest.raises(CommandError, match=r"'nowhere'.*configured aliases"):
        sweep("--backend", alias, "--backend", "nowhere")
    assert count_claims(database, expired=True) == 10


def test_a_claim_renewed_while_the_sweep_runs_is_kept(alias: str) -> None:
    """The renewal's transaction is still open when the sweep starts: the sweep sees
    the claim expired, must wait for the renewal, and then must leave the claim alone."""
    database = _database(alias)
    backend = get_backend(alias)
    sql = backend.store.dialect
    insert_claims(database, 2_000, tag="expired", expired=True)
    lease = occupy.acquire("book:1", owner="alice", ttl=1, backend=alias)
    renewal = connections.create_connection(database)
    try:
        renewal.set_autocommit(False)
        with renewal.cursor() as cursor:
            cursor.execute(sql.extend(), [sql.seconds(60), digest("book:1"), lease.token])
            if cursor.description:  # RETURNING: SQLite counts the rows once they are read
                cursor.fetchall()
            assert cursor.rowcount == 1
        # Past the committed expiry: the sweep's own view says the claim has expired.
        time.sleep(max(0.0, (lease.expires_at - _now(alias)).total_seconds()) + 0.2)
        outcome: list[object] = []
        thread = threading.Thread(target=lambda: outcome.append(sweep("--backend", alias)))
        thread.start()
        thread.join(timeout=0.5)
        assert thread.is_alive(), "the sweep did not wait for the renewal"
        renewal.commit()
        thread.join(timeout=30)
    finally:
        renewal.close()
    assert outcome == [f"{alias}: deleted 2000 expired claims\n"]
    assert backend.is_held(lease)
    occupy.release(lease)


def _now(alias: str) -> datetime:
    backend = get_backend(alias)
    rows = backend.store.execute(f"SELECT {backend.store.dialect.now}", [])[1]
    return backend.store.dialect.to_datetime(rows[0][0])


# --- list_locks ---------------------------------------------------------------------------
def list_locks(*args: str) -> list[list[str]]:
    """Run ``list_locks``; return its lines split into columns."""
    out = io.StringIO()
    call_command("list_locks", *args, stdout=out)
    return [re.split(r"\s{2,}", line) for line in out.getvalue().splitlines()]


def test_list_locks_shows_holders_and_waiters_but_never_a_token(alias: str) -> None:
    database = _database(alias)
    insert_claims(database, 3, tag="expired", expired=True)
    lease = occupy.acquire("book:1", owner="alice", ttl=60, backend=alias)
    waiter = get_backend(alias).attempt("book:1", "bob", 60)
    assert waiter.try_acquire() is None
    waiter.enqueue()
    try:
        header, *rows = list_locks("--backend", alias)
        assert header == ["backend", "key", "owner", "state", "since", "expires", "fence"]
        assert [row[:4] for row in rows] == [
            [alias, "book:1", "alice", "using"],
            [alias, "book:1", "bob", "pending"],
        ]
        (_, _, _, _, since, expires, fence), (*_, pending_fence) = rows
        assert fence == str(lease.fence) and pending_fence == "-"
        assert expires == lease.expires_at.isoformat(timespec="seconds")
        started = _now(alias)
        assert abs(started - _parse(since)) < timedelta(seconds=5)
        printed = "\n".join("  ".join(row) for row in rows)
        assert lease.token not in printed and waiter.token not in printed
        assert "expired:" not in printed
    finally:
        waiter.cancel()
        occupy.release(lease)
    assert list_locks("--backend", alias) == [["No live claims."]]


def _parse(value: str) -> datetime:
    return datetime.fromisoformat(value)


def test_list_locks_refuses_an_unknown_alias(live_db: None) -> None:
    with pytest.raises(CommandError, match=r"'nowhere'"):
        list_locks("--backend", "nowhere")


def test_a_quiet_sweep_prints_nothing_though_the_project_has_warnings(
    live_db: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """The cron how-to's ``manage.py sweep_locks -v 0`` mails only failures: the
    project's own check warnings (a W102 of an admin, say) are not printed at every run."""
    from django.core.checks import Warning as CheckWarning
    from django.core.management import execute_from_command_line
    from django.test.utils import override_system_checks

    def warns(**kwargs: object) -> list[CheckWarning]:
        return [CheckWarning("a warning of the project's", id="project.W001")]

    capsys.readouterr()
    with override_system_checks([warns]):
        execute_from_command_line(["manage.py", "sweep_locks", "-v", "0"])
    assert capsys.readouterr() == ("", "")
