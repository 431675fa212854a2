"""Three real ``celery beat`` processes with occupy's scheduler, a schedule firing every
second, the sending one SIGKILLed part-way: each tick is sent once, one instance sends
at a time, and the next takes over within the lease's ttl.

Sends are recorded by the scheduler itself (tests/support/celery_app.py's
``RecordingMixin``, on PostgreSQL's clock), so a tick sent by two instances shows as two
sends milliseconds apart, whatever a worker would later do with them.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import signal
import time
from pathlib import Path

import pytest
from django.conf import settings

from tests.support import celery_procs as cp

pytest.importorskip("celery")

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

TTL = 2.0
SCHEDULERS = [
    pytest.param("tests.support.celery_app:RecordingScheduler", "redis", id="default-scheduler"),
    pytest.param(
        "tests.support.celery_app:RecordingDatabaseScheduler",
        "db-postgresql",
        id="django-celery-beat",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("django_celery_beat") is None,
            reason="django-celery-beat is not installed (pip install -e '.[test]')",
        ),
    ),
]


@pytest.fixture
def tables(live_db: None, tmp_path: Path):
    cp.create_tables([])
    yield tmp_path
    cp.drop_tables()


def _sends() -> list[tuple]:
    return cp.sql("SELECT started, pid, fence FROM celery_runs ORDER BY started")


@pytest.mark.parametrize(("scheduler", "locks"), SCHEDULERS)
def test_three_beats_one_sender_takeover_within_ttl(scheduler, locks, tables):
    for server in ("redis", "postgresql"):
        if server in settings.SKIPS:
            pytest.skip(settings.SKIPS[server])
    queue = f"{cp.QUEUE_PREFIX}-beat"
    cp.purge(cp.REDIS_URL, queue)
    environ = cp.env(cp.REDIS_URL, queue, locks, TTL)
    beats = [cp.beat_command(scheduler, tables, i) for i in range(3)]
    try:
        with cp.processes(beats, environ, tables):
            cp.wait_for(lambda: len(_sends()) >= 5, 90, "five ticks sent")
            leader = _sends()[-1][1]
            os.kill(leader, signal.SIGKILL)
            killed_at = cp.db_now()
            cp.wait_for(
                lambda: sum(1 for s in _sends() if s[0] > killed_at) >= 5,
                60,
                "five ticks sent after the sender was killed",
            )
            time.sleep(1)
    finally:
        cp.purge(cp.REDIS_URL, queue)
    sends = _sends()
    logs = "\n".join(p.read_text(errors="replace")[-2000:] for p in tables.glob("proc*.log"))
    # One sender at a time: the killed one, then one other, never interleaved.
    senders = [pid for pid, _ in itertools.groupby(s[1] for s in sends)]
    assert len(senders) == 2 and senders[0] == leader, f"senders in turn: {senders}\n{logs}"
    before = [s for s in sends if s[1] == leader]
    after = [s for s in sends if s[1] != leader]
    assert max(s[2] for s in before) < min(s[2] for s in after), "the new sender's fence is lower"
    # Each tick once: sends of the one-second schedule never come close together (a tick
    # sent by two instances would be two sends milliseconds apart).
    gaps = [(b[0] - a[0]).total_seconds() for a, b in itertools.pairwise(sends)]
    assert min(gaps) >= 0.5, f"a tick was sent twice: gaps {gaps}"
    # None lost for longer than the ttl: the takeover gap is at most the ttl, plus the
    # schedule's second and the next tick's second.
    takeover = (after[0][0] - before[-1][0]).total_seconds()
    assert takeover <= TTL + 2, f"no tick sent for {takeover:.2f} s after the kill (ttl {TTL})"
    assert max(gaps) == pytest.approx(takeover)
