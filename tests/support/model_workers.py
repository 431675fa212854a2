"""Workers the multiprocess tests run in child processes.

A spawned child imports this module before Django is set up, so models are imported
inside the functions only.
"""

from __future__ import annotations

from typing import Any


def seed000_writer(
    alias: str, pk: int, field: str, rounds: int, plain: bool, barrier: Any
) -> list[tuple[str, str]]:
    """Each round: load the book, wait for the other writer to load it too, change
    ``field``, save; then read back what the row holds."""
    from tests.testapp.models import Book

    seen = []
    for r in range(rounds):
        barrier.wait(timeout=60)
        book = Book.objects.using(alias).get(pk=pk)
        barrier.wait(timeout=60)  # both hold the same loaded version now
        setattr(book, field, f"{field}-{r}")
        if plain:
            from django.db import models

            models.Model.save(book)  # Django's own save: the whole row
        else:
            book.save()
        barrier.wait(timeout=60)  # both saved
        fresh = Book.objects.using(alias).get(pk=pk)
        seen.append((fresh.status, fresh.name))
    return seen


def same_field_writer(
    alias: str, pk: int, me: str, private: str, rounds: int, barrier: Any
) -> list[tuple[str, tuple[str, str, str]]]:
    """Each round: load, wait, change ``name`` and a field only this writer writes."""
    from occupy import VersionConflict
    from tests.testapp.models import Book

    outcomes = []
    for r in range(rounds):
        barrier.wait(timeout=60)
        book = Book.objects.using(alias).get(pk=pk)
        barrier.wait(timeout=60)
        book.name = f"{me}-{r}"
        setattr(book, private, f"{me}-{r}")
        try:
            book.save()
            outcome = "won"
        except VersionConflict as e:
            assert e.model is Book and e.pk == pk and set(e.fields) >= {"name", private}
            outcome = "conflict"
        barrier.wait(timeout=60)
        fresh = Book.objects.using(alias).get(pk=pk)
        outcomes.append((outcome, (fresh.name, fresh.status, fresh.note)))
    return outcomes


def decrement(alias: str, pk: int, times: int, hold: float) -> list[tuple[float, float]]:
    """Take one from the stock ``times`` times by a slow read-modify-write inside
    ``locked()``; return each critical section's (entered, left) by the monotonic clock,
    which all processes of the machine share."""
    import time

    from tests.testapp.models import Goods

    sections = []
    for _ in range(times):
        with Goods.objects.using(alias).locked(pk=pk) as goods:
            entered = time.monotonic()
            count = goods.count
            time.sleep(hold)
            goods.count = count - 1
            goods.save(update_fields=["count"])
            sections.append((entered, time.monotonic()))
    return sections


def claim_loop(
    alias: str, backend: str, me: str, seconds: float, hold: float
) -> tuple[list[tuple[int, int]], list[tuple[Any, ...]]]:
    """Claim, work on and release tasks for ``seconds``; return the (pk, fence) of every
    claim and the violations seen: another owner's mark on a claimed task, a second
    claim() answering with another task or lease, more than one task held."""
    import time

    import occupy
    from occupy.models.pool import live_claims, occupation_rows
    from tests.testapp.models import Task

    tasks = Task.objects.using(alias)
    claims = live_claims(Task, occupation_rows(backend, "test"))
    log: list[tuple[int, int]] = []
    problems: list[tuple[Any, ...]] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        task = tasks.claim(owner=me, ttl=10, backend=backend)
        if task is None:
            time.sleep(0.005)
            continue
        again = tasks.claim(owner=me, ttl=10, backend=backend)
        if (again.pk, again.lease.token) != (task.pk, task.lease.token):
            problems.append(("claimed again", task.pk, again.pk))
        if tasks.filter(pk=task.pk, worked_by="").update(worked_by=me) != 1:
            problems.append(("overlap", task.pk, tasks.get(pk=task.pk).worked_by))
        held = claims.filter(owner=me).count()
        if held != 1:
            problems.append(("holds", held))
        time.sleep(hold)
        tasks.filter(pk=task.pk, worked_by=me).update(worked_by="")
        occupy.release(task.lease)
        log.append((task.pk, task.lease.fence))
    return log, problems


def abandon(alias: str, backend: str, me: str, ttl: float) -> tuple[int, int]:
    """Claim a task and exit without releasing it (a crashed editor)."""
    import time

    from tests.testapp.models import Task

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        task = Task.objects.using(alias).claim(owner=me, ttl=ttl, backend=backend)
        if task is not None:
            return task.pk, task.lease.fence
        time.sleep(0.005)
    raise AssertionError("no task came free in 10 s")


def claim_as(
    alias: str, backend: str, owner: str, rounds: int, release: bool, barrier: Any
) -> list[tuple[int, str]]:
    """Each round, claim for ``owner`` at the same moment as another process claiming
    for the same owner; return the (pk, token) each claim answered."""
    import occupy
    from tests.testapp.models import Task

    out = []
    for _ in range(rounds):
        barrier.wait(timeout=60)
        task = Task.objects.using(alias).claim(owner=owner, ttl=10, backend=backend)
        out.append((task.pk, task.lease.token))
        barrier.wait(timeout=60)
        if release:
            occupy.release(task.lease)
        barrier.wait(timeout=60)
    return out


def paused_writer(
    alias: str, backend: str, pk: int, ttl: float, acquired: Any, resumed: Any
) -> tuple[str, int, str]:
    """Take the page's lock, change the page, signal ``acquired``, and save with the
    lease once the parent sets ``resumed`` (meanwhile it stops this process past the
    lease's ttl, and another holder writes)."""
    import occupy
    from occupy.models import object_key
    from tests.testapp.models import Page

    page = Page.objects.using(alias).get(pk=pk)
    lease = occupy.acquire(object_key(Page, pk), owner="paused", ttl=ttl, backend=backend)
    page.body = "written by the paused holder"
    acquired.set()
    # Stopped here by SIGSTOP; the save waits for the parent, not for a pause that a
    # parent slow to send the signal would outlast (the lease still live: no fence).
    if not resumed.wait(60):
        return "never resumed", lease.fence, ""
    try:
        page.save(lease=lease)
    except occupy.FencedOut as e:
        return "fenced", lease.fence, str(e)
    return "saved", lease.fence, ""


def lock_many_loop(backend: str, keys: list[str], rounds: int, database: str) -> int:
    """Increment counter "many" by a slow read-modify-write under ``lock_many(keys)``."""
    import time

    import occupy
    from tests.testapp.models import Counter

    for _ in range(rounds):
        with occupy.lock_many(keys, ttl=30, timeout=60, backend=backend):
            counter = Counter.objects.using(database).get(name="many")
            time.sleep(0.002)
            counter.value += 1
            counter.save()
    return rounds


def finish_tasks(alias: str, backend: str, me: str) -> list[int]:
    """Claim open tasks, mark each done and release it, until none is open; return the
    tasks this editor finished."""
    import occupy
    from tests.testapp.models import Task

    pool = Task.objects.using(alias).filter(done=False)
    finished = []
    while (task := pool.claim(owner=me, ttl=30, backend=backend)) is not None:
        assert not task.done, task.pk  # the row as it stands under the lock
        Task.objects.using(alias).filter(pk=task.pk).update(done=True)
        finished.append(task.pk)
        occupy.release(task.lease)
    return finished


def claim_seats(alias: str, backend: str, me: str, count: int) -> list[tuple[str, int]]:
    """Claim ``count`` seats (composite primary keys) one after the other, mark each as
    sold to ``me`` where nobody else has, and return the seats that were already sold
    (an overlap: claim() handed a held seat out twice)."""
    import occupy
    from tests.testapp.models import Seat

    seats = Seat.objects.using(alias)
    overlaps = []
    for _ in range(count):
        seat = seats.filter(sold_to="").claim(owner=me, ttl=30, backend=backend)
        if seat is None:
            break
        if seats.filter(pk=seat.pk, sold_to="").update(sold_to=me) != 1:
            overlaps.append(seat.pk)
        occupy.release(seat.lease)
    return overlaps
