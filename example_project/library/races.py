"""The races ``race_demo`` replays, each with several OS processes.

Four stories of writers clobbering each other: a student and an admin edit one book
(one returns it, the other renames it); several readers count the book's borrowings;
several shops sell copies from its stock; editors take articles from a task pool.

A race is a function of a *guard* (how each process protects its read-modify-write)
that returns an :class:`Outcome`. ``ROWS`` pairs races with guards; ``race_demo``
prints one table line per row. To add a technique, write a guard (a context manager
factory taking the book) and append rows. The HTTP rows are in
:mod:`example_project.library.http_races`. Every race deletes the rows it made.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import occupy
from occupy.conf import occupy_settings

#: How each process guards its read-modify-write of a book: given the book's pk.
Guard = Callable[[int], contextlib.AbstractContextManager[Any]]
#: How each process writes the book it changed.
Save = Callable[[Any], None]


@dataclass(frozen=True)
class Outcome:
    """What a race did, counted in updates (one change a client set out to save):

    - ``updates``: the updates the clients tried to make;
    - ``lost``: those another process's save silently overwrote (the database does not
      show them, and nobody was told);
    - ``refused``: those occupy turned away with an error instead (nothing written, the
      client told; after its retries, if it retries);
    - ``seconds`` the race took, and a ``note`` for under the table (``""``: none).
    """

    updates: int
    lost: int
    refused: int
    seconds: float
    note: str = ""


@dataclass(frozen=True)
class Row:
    """One line of the table: a race (its story) and the technique guarding it."""

    race: str
    technique: str
    run: Callable[[], Outcome]


def no_guard(pk: int) -> contextlib.AbstractContextManager[Any]:
    """Plain Django: load, change, ``save()``, with nothing around it."""
    return contextlib.nullcontext()


def whole_row_save(book: Any) -> None:
    """Plain Django's ``save()``: write every column as it was loaded (``Book`` is
    versioned, so this calls ``Model.save`` itself to show what Django does)."""
    from django.db import models

    models.Model.save(book)


def versioned_save(book: Any) -> None:
    """``VersionedMixin.save()``: write the changed fields, guarded by their loaded
    values; ``VersionConflict`` instead of overwriting another writer's change."""
    book.save()


@dataclass(frozen=True)
class OccupyLock:
    """Guard: hold ``occupy.lock`` on the book (on ``backend``) for the whole
    read-modify-write. A picklable callable, since it travels to worker processes."""

    backend: str = "default"

    def __call__(self, pk: int) -> contextlib.AbstractContextManager[Any]:
        return occupy.lock(f"library.book:{pk}", ttl=30, timeout=60, backend=self.backend)


# --- running workers in processes --------------------------------------------------
def _setup(settings_module: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    import django

    django.setup()


def _in_processes(worker: Callable[..., Any], args: list[tuple]) -> list[Any]:
    """Run ``worker(*a)`` for each ``a`` in its own spawned process, all at once."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(
        len(args), initializer=_setup, initargs=(os.environ["DJANGO_SETTINGS_MODULE"],)
    ) as pool:
        return pool.starmap(worker, args)


def _start_barrier(parties: int) -> Any:
    """Return a barrier the workers wait on before they start, so that they race for
    real instead of the first one finishing before the last one has started."""
    return multiprocessing.get_context("spawn").Manager().Barrier(parties)


@contextlib.contextmanager
def _timed() -> Iterator[list[float]]:
    elapsed: list[float] = []
    started = time.perf_counter()
    yield elapsed
    elapsed.append(time.perf_counter() - started)


# --- a student and an admin edit one book ----------------------------------------------
ROLES = {"student": ("status", "free"), "admin": ("name", "name")}


def _student_or_admin(
    role: str, guard: Guard, save: Save, pk: int, rounds: int, barrier: Any
) -> int:
    """Each round: load the book, think, change this role's field, ``save()``."""
    from example_project.library.models import Book

    field, value = ROLES[role]
    lost = 0
    for _ in range(rounds):
        barrier.wait()
        with guard(pk):
            book = Book.objects.get(pk=pk)
            time.sleep(0.01)  # both load before either saves
            setattr(book, field, value)
            save(book)
        barrier.wait()
        if role == "student":
            book = Book.objects.get(pk=pk)
            lost += (book.status, book.name) != ("free", "name")
            Book.objects.filter(pk=pk).update(status="in use", name="naem")
    return lost


def student_and_admin(guard: Guard, save: Save = whole_row_save, rounds: int = 15) -> Outcome:
    """A student returns a book (``status``) while an admin renames it (``name``),
    ``rounds`` times: two updates a round, and a round that ends without both lost one."""
    from example_project.library.models import Book

    book = Book.objects.create(name="naem", status="in use")
    try:
        barrier = multiprocessing.get_context("spawn").Manager().Barrier(2)
        with _timed() as elapsed:
            lost = _in_processes(
                _student_or_admin, [(role, guard, save, book.pk, rounds, barrier) for role in ROLES]
            )
    finally:
        Book.objects.filter(pk=book.pk).delete()  # the scratch row, whatever its version
    return Outcome(2 * rounds, sum(lost), 0, elapsed[0])


# --- the borrow counter: several processes increment one column ------------------------
def _borrow(guard: Guard, save: Save, pk: int, times: int, attempts: int, barrier: Any) -> int:
    """Count ``times`` borrowings by a slow read-modify-write; re-run a conflicting one
    up to ``attempts`` times in all (``retry_on_conflict``); return the refused ones."""
    from example_project.library.models import Book

    @occupy.retry_on_conflict(attempts=attempts, backoff=0.005)
    def borrow() -> None:
        with guard(pk):
            book = Book.objects.get(pk=pk)
            time.sleep(0.002)
            book.borrow_count += 1
            save(book)

    refused = 0
    barrier.wait()
    for _ in range(times):
        try:
            borrow()
        except occupy.VersionConflict:
            refused += 1
    return refused


def borrow_counter(
    guard: Guard,
    save: Save = whole_row_save,
    attempts: int = 1,
    processes: int = 4,
    times: int = 20,
) -> Outcome:
    """``processes`` readers each count ``times`` borrowings of one book."""
    from example_project.library.models import Book

    book = Book.objects.create(name="counter", borrow_count=0)
    try:
        with _timed() as elapsed:
            barrier = _start_barrier(processes)
            refused = sum(
                _in_processes(
                    _borrow, [(guard, save, book.pk, times, attempts, barrier)] * processes
                )
            )
        book.refresh_from_db()
    finally:
        Book.objects.filter(pk=book.pk).delete()  # the scratch row, whatever its version
    expected = processes * times - refused
    return Outcome(processes * times, expected - book.borrow_count, refused, elapsed[0])


# --- the stock decrement: several shops sell copies of one book -------------------------
def _sell(locked: bool, pk: int, times: int, barrier: Any) -> None:
    """Sell ``times`` copies, each by a slow read-modify-write: inside ``locked()``, or
    with plain Django's load and whole-row ``save()``."""
    from example_project.library.models import Book

    barrier.wait()
    for _ in range(times):
        context = Book.objects.locked(pk=pk) if locked else contextlib.nullcontext()
        with context as book:
            book = book or Book.objects.get(pk=pk)
            time.sleep(0.002)
            book.stock -= 1
            book.save() if locked else whole_row_save(book)


def stock_decrement(locked: bool, processes: int = 4, times: int = 20) -> Outcome:
    """``processes`` shops each sell ``times`` copies of one book, with a
    ``select_for_update`` row lock (``Book.objects.locked()``) or without: a sale the
    stock does not show is lost."""
    from example_project.library.models import Book

    book = Book.objects.create(name="stock", stock=processes * times)
    try:
        with _timed() as elapsed:
            _in_processes(_sell, [(locked, book.pk, times, _start_barrier(processes))] * processes)
        book.refresh_from_db()
    finally:
        Book.objects.filter(pk=book.pk).delete()  # the scratch row, whatever its version
    return Outcome(processes * times, book.stock, 0, elapsed[0])


# --- the task pool: editors take articles to edit, one each at a time --------------------
def _edit_tasks(
    claim: bool, category: str, me: str, barrier: Any
) -> list[tuple[int, str, float, float]]:
    """Take the next task, edit it a moment, mark it done; until none is left. Return
    each edit's (task, editor, start, end) by the machine-wide monotonic clock."""
    from example_project.library.models import Task

    pool = Task.objects.filter(category=category, done=False)
    edits = []
    barrier.wait()
    while True:
        task = pool.claim(owner=me, ttl=30) if claim else pool.first()
        if task is None:
            return edits
        started = time.monotonic()
        time.sleep(0.01)
        Task.objects.filter(pk=task.pk).update(done=True)
        edits.append((task.pk, me, started, time.monotonic()))
        if claim:
            occupy.release(task.lease)


def task_pool(claim: bool, editors: int = 4, tasks: int = 24) -> Outcome:
    """``editors`` take tasks from a pool of ``tasks`` until it is empty, by
    ``Task.objects.claim()`` or by taking the first task not done. Each edit is an
    update; one is lost when another editor's edit of the same task, at the same time,
    was saved after it (the later save overwrites the article)."""
    import uuid

    from example_project.library.models import Task

    category = f"race-{uuid.uuid4().hex[:8]}"
    try:
        for n in range(tasks):
            Task.objects.create(title=f"article {n}", category=category)
        barrier = _start_barrier(editors)
        with _timed() as elapsed:
            edits = [
                e
                for result in _in_processes(
                    _edit_tasks, [(claim, category, f"editor {n}", barrier) for n in range(editors)]
                )
                for e in result
            ]
    finally:
        Task.objects.filter(category=category).delete()
    overwritten = [
        a
        for a in edits
        if any(b[0] == a[0] and b[1] != a[1] and b[2] < a[3] and b[3] > a[3] for b in edits)
    ]
    return Outcome(len(edits), len(overwritten), 0, elapsed[0])


# --- the task storm: several workers start one book's report at once -------------------
def _run_reports(occupied: bool, pk: int, times: int, barrier: Any) -> int:
    """Start the report of book ``pk`` ``times`` times, as a worker does (the immediate
    backend runs each task as it is enqueued); return how many runs were skipped."""
    from example_project.library.tasks import occupied_report, report

    chosen = occupied_report if occupied else report
    barrier.wait()
    results = [chosen.enqueue(pk) for _ in range(times)]
    return sum(result.return_value is None for result in results)


def task_storm(occupied: bool, workers: int = 4, times: int = 15) -> Outcome:
    """``workers`` processes each start the report of one book ``times`` times, as a
    plain task of Django's tasks framework or under ``occupy.django_tasks``: a run the report
    count does not show is lost; a run occupy skipped (its book's report was running)
    is refused."""
    from example_project.library.models import Book

    book = Book.objects.create(name="reports", stock=0)
    try:
        with _timed() as elapsed:
            skipped = sum(
                _in_processes(
                    _run_reports, [(occupied, book.pk, times, _start_barrier(workers))] * workers
                )
            )
        book.refresh_from_db()
    finally:
        Book.objects.filter(pk=book.pk).delete()
    runs = workers * times
    note = (
        f"{skipped} runs skipped (and logged) while the book's report ran: one at a time"
        if occupied
        else ""
    )
    return Outcome(runs, runs - skipped - book.stock, skipped, elapsed[0], note)


#: The stories, as the table names them.
BOOK = "student and admin edit one book"
COUNTER = "borrow counter"
STOCK = "stock decrement"
POOL = "task pool"
STORM = "task storm (one report per book)"

#: The other lock backends on the counter, where the settings configure them (the Redis
#: and cache backends only when a Redis server answers).
OTHER_BACKENDS = {"files": "file", "redis": "Redis", "cache": "cache on Redis"}

ROWS = [
    Row(BOOK, "plain Django save()", lambda: student_and_admin(no_guard)),
    Row(BOOK, "occupy.lock (database)", lambda: student_and_admin(OccupyLock("default"))),
    Row(BOOK, "VersionedMixin save()", lambda: student_and_admin(no_guard, versioned_save)),
    Row(COUNTER, "plain Django save()", lambda: borrow_counter(no_guard)),
    Row(COUNTER, "occupy.lock (database)", lambda: borrow_counter(OccupyLock("default"))),
    *[
        Row(
            COUNTER, f"occupy.lock ({label})", lambda alias=alias: borrow_counter(OccupyLock(alias))
        )
        for alias, label in OTHER_BACKENDS.items()
        if alias in occupy_settings.BACKENDS
    ],
    Row(
        COUNTER, "VersionedMixin save(), no retry", lambda: borrow_counter(no_guard, versioned_save)
    ),
    Row(
        COUNTER,
        "VersionedMixin + retry_on_conflict",
        lambda: borrow_counter(no_guard, versioned_save, attempts=25),
    ),
    Row(STOCK, "plain Django save()", lambda: stock_decrement(locked=False)),
    Row(STOCK, "Book.objects.locked()", lambda: stock_decrement(locked=True)),
    Row(POOL, "plain Django: first task not done", lambda: task_pool(claim=False)),
    Row(POOL, "Task.objects.claim()", lambda: task_pool(claim=True)),
    Row(STORM, "plain task (Django's tasks framework)", lambda: task_storm(occupied=False)),
    Row(STORM, "occupy.django_tasks.task(occupy_key)", lambda: task_storm(occupied=True)),
]
