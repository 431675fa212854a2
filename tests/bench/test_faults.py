"""The fault soak's own logic (``python -m bench faults``): the ledger's fenced steps, and
the verdict drawn from its record. Each test builds the interleaving a broken lock or
fence would produce, through the real ledger, and checks the tally counts it."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.faults.analysis import Fault, Tally, fence_violations, longest_gap, overlaps, tally
from bench.faults.ledger import Ledger, Read
from bench.faults.soak import REPO, Plan, Soak, Store

KEY = "k"


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    ledger = Ledger.create(tmp_path / "ledger.sqlite3", [KEY, "other"])
    yield ledger
    ledger.close()


def read(
    ledger: Ledger, fence: int, *, worker: int = 0, t: float = 0.0, after_seq: int | None = None
) -> Read:
    return ledger.read(
        KEY,
        fence,
        worker=worker,
        t_call=t,
        t_grant=t,
        after_seq=ledger.now() if after_seq is None else after_seq,
    )


def write(ledger: Ledger, r: Read, fence: int, *, t: float = 0.0, paused: bool = False) -> bool:
    return ledger.write(r, KEY, fence, t_write=t, paused=paused)[0]


def verdict(ledger: Ledger, faults: list[Fault] | None = None, ttl: float = 10.0) -> Tally:
    return tally(
        ledger.sections(),
        ledger.records(),
        faults or [],
        ttl=ttl,
        started=0.0,
        ended=100.0,
        outcomes=ledger.outcomes(),
    )


def test_sections_one_after_another_pass(ledger: Ledger) -> None:
    for fence in (10, 20, 30):
        assert write(ledger, read(ledger, fence), fence)
    t = verdict(ledger)
    assert (t.sections, t.accepted, t.refused) == (3, 3, 0)
    assert ledger.records()[KEY] == (3, 3)
    assert t.passed


def test_a_stale_holder_is_refused_and_nothing_is_lost(ledger: Ledger) -> None:
    """The holder paused past its ttl: a newer grant read with a higher fence, so the
    old write is refused, whichever writes first."""
    old = read(ledger, 10, t=1.0)
    new = read(ledger, 20, t=2.0)
    assert not write(ledger, old, 10, t=5.0, paused=True)
    assert write(ledger, new, 20, t=3.0)
    late = read(ledger, 15)  # a fence below one already recorded
    assert not late.ok
    t = verdict(ledger, ttl=1.0)
    assert ledger.records()[KEY] == (1, 1)
    assert (t.overlaps, t.lost_increments) == (0, 0)
    assert t.refusals["paused"] == 1
    assert t.paused == 1


def test_a_fence_granted_twice_is_caught(ledger: Ledger) -> None:
    """Two holders with the same fence both pass the fenced steps: the counter loses
    one increment, their spans overlap, and the duplicate fence is a violation."""
    a = read(ledger, 10, worker=1)
    b = read(ledger, 10, worker=2)
    assert a.ok and b.ok
    assert write(ledger, a, 10) and write(ledger, b, 10)
    t = verdict(ledger)
    assert ledger.records()[KEY] == (1, 2)
    assert t.lost_increments == 1
    assert t.overlaps == 1
    assert t.fence_violations >= 1
    assert not t.passed
    assert any("granted twice" in p for p in t.problems)


def test_a_fence_that_went_down_is_a_violation(ledger: Ledger) -> None:
    """A grant requested after a higher fence was recorded, with a lower fence."""
    assert write(ledger, read(ledger, 50, worker=1), 50)
    low = read(ledger, 40, worker=2)  # requested after the first section was recorded
    assert not low.ok
    found = fence_violations(ledger.sections())
    assert [s.fence for _why, s in found] == [40]
    t = verdict(ledger)
    assert t.fence_violations == 1
    assert not t.passed


def test_a_lower_fence_requested_before_the_higher_was_recorded_is_no_violation(
    ledger: Ledger,
) -> None:
    """Grants that raced (the later fence recorded first) break no promise."""
    requested = ledger.now()
    assert write(ledger, read(ledger, 50, worker=1), 50)
    assert not read(ledger, 40, worker=2, t=0.0, after_seq=requested).ok
    assert fence_violations(ledger.sections()) == []


def test_a_refusal_without_a_reason_fails_the_store(ledger: Ledger) -> None:
    """Two holders at once, neither paused nor past its ttl, no data lost: the fence
    caught it, and the store fails."""
    a = read(ledger, 10, worker=1, t=1.0)
    b = read(ledger, 20, worker=2, t=1.1)
    assert write(ledger, b, 20, t=1.2)
    assert not write(ledger, a, 10, t=1.3)
    t = verdict(ledger, ttl=5.0)
    assert t.refusals["unexplained"] == 1
    assert (t.overlaps, t.lost_increments, t.fence_violations) == (0, 0, 0)
    assert not t.passed


def test_refusals_with_a_reason_pass(ledger: Ledger) -> None:
    """A grant held across a restart that lost the store's data, and a section that
    outlived its ttl, are refused and counted, not failed."""
    a = read(ledger, 10, worker=1, t=1.0)
    b = read(ledger, 20, worker=2, t=3.0)
    assert write(ledger, b, 20, t=3.1)
    assert not write(ledger, a, 10, t=3.2)
    c = read(ledger, 30, worker=3, t=10.0)
    d = read(ledger, 40, worker=4, t=11.0)
    assert write(ledger, d, 40, t=11.1)
    assert not write(ledger, c, 30, t=16.0)
    restart = Fault("restart", started=2.0, ended=2.5, loses_data=True)
    t = verdict(ledger, [restart], ttl=5.0)
    assert t.refusals["lost with the store's data"] == 1
    assert t.refusals["outlived ttl"] == 1
    assert t.grants_lost == 1
    assert t.passed


def test_overlaps_are_judged_on_the_ledger_order(ledger: Ledger) -> None:
    a = read(ledger, 10)
    assert write(ledger, a, 10)
    b = read(ledger, 20)
    assert write(ledger, b, 20)
    assert overlaps(ledger.sections()) == []


def test_longest_gap_counts_from_the_first_grant_to_the_end(ledger: Ledger) -> None:
    for fence, t in ((10, 5.0), (20, 6.0), (30, 9.5)):
        write(ledger, read(ledger, fence, t=t), fence, t=t)
    assert longest_gap(ledger.sections(), ended=10.0) == (3.5, KEY, 6.0)


def test_a_killed_holder_leaves_an_unfinished_section(ledger: Ledger) -> None:
    read(ledger, 10)
    assert write(ledger, read(ledger, 20), 20)
    t = verdict(ledger)
    assert (t.unfinished, t.accepted) == (1, 1)
    assert t.passed


def test_foreign_exceptions_are_counted_apart(ledger: Ledger) -> None:
    ledger.add_outcomes(
        1, {("acquire: LockTimeout", ""): 3, ("foreign", "acquire: builtins.OverflowError: x"): 1}
    )
    ledger.add_outcomes(2, {("acquire: LockTimeout", ""): 2})
    t = verdict(ledger)
    assert t.exceptions["acquire: LockTimeout"] == 5
    assert t.foreign == {"acquire: builtins.OverflowError: x": 1}


def test_a_store_where_nothing_ran_fails(ledger: Ledger) -> None:
    t = verdict(ledger)
    assert t.sections == 0
    assert not t.passed
    assert t.problems[0].startswith("no section ran")


@pytest.mark.slow
@pytest.mark.multiprocess
def test_the_soak_fails_a_lock_that_does_not_lock(tmp_path: Path) -> None:
    """Worker processes on a backend whose locks live in each process's memory (so
    every process holds every key at once, with fences of its own): the soak's verdict
    must be a failure. Its fences repeat in every process, so fence violations are
    certain; the holders at once show as accepted writes that overlap or as writes the
    fence refused for no reason, in a share that depends on how the processes are
    scheduled (one that runs ahead has the higher fences, and the others' writes are
    all refused)."""
    memory = {"memory": {"BACKEND": "occupy.testing.MemoryBackend"}}
    env = {
        **os.environ,
        "OCCUPY_FAULTS_DIR": str(tmp_path),
        "OCCUPY_FAULTS_EXTRA_BACKENDS": json.dumps(memory),
        "DJANGO_SETTINGS_MODULE": "bench.faults.settings",
        "PYTHONPATH": str(REPO),
    }
    plan = Plan(seconds=3, interval=1000, workers=3, keys=1, hold=0.02, max_sections=300)
    t = Soak(Store("memory", None), None, tmp_path, env, plan, seed=0).run()
    assert t.sections > 0
    assert t.overlaps + t.refusals["unexplained"] > 0
    assert t.fence_violations > 0
    assert not t.passed
