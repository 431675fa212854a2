"""The races ``race_demo`` replays, each with several OS processes.

A race is a function of a *guard* (how each process protects its read-modify-write)
that returns an :class:`Outcome`. ``ROWS`` pairs races with guards; ``race_demo``
prints one table line per row. To add a technique, write a guard (a context manager
factory taking the book) and append rows.
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

#: How each process guards its read-modify-write of a book: given the book's pk.
Guard = Callable[[int], contextlib.AbstractContextManager[Any]]


@dataclass(frozen=True)
class Outcome:
    """What a race did: operations tried, updates lost, writes refused, time taken."""

    operations: int
    lost: int
    refused: int
    seconds: float


@dataclass(frozen=True)
class Row:
    """One line of the table: a technique (guard) on a race."""

    technique: str
    race: str
    run: Callable[[], Outcome]


def no_guard(pk: int) -> contextlib.AbstractContextManager[Any]:
    """Plain Django: load, change, ``save()``, with nothing around it."""
    return contextlib.nullcontext()


@dataclass(frozen=True)
class OccupyLock:
    """Guard: hold ``occupy.lock`` on the book (backend ``using``) for the whole
    read-modify-write. A picklable callable, since it travels to worker processes."""

    using: str = "default"

    def __call__(self, pk: int) -> contextlib.AbstractContextManager[Any]:
        return occupy.lock(f"library.book:{pk}", ttl=30, timeout=60, using=self.using)


# --- running workers in processes --------------------------------------------------
def _setup(settings_module: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    import django

    django.setup()


def _in_processes(worker: Callable[..., Any], args: list[tuple]) -> list[Any]:
    """Run ``worker(*a)`` for each ``a`` in its own spawned process, all at once."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(len(args), initializer=_setup,
                  initargs=(os.environ["DJANGO_SETTINGS_MODULE"],)) as pool:
        return pool.starmap(worker, args)


@contextlib.contextmanager
def _timed() -> Iterator[list[float]]:
    elapsed: list[float] = []
    started = time.perf_counter()
    yield elapsed
    elapsed.append(time.perf_counter() - started)


# --- seed 000: the student and the admin on Book 1 -----------------------------------
ROLES = {"student": ("status", "free"), "admin": ("name", "name")}


def _student_or_admin(role: str, guard: Guard, pk: int, rounds: int, barrier: Any) -> int:
    """Each round: load the book, think, change this role's field, ``save()``."""
    from example_project.library.models import Book

    field, value = ROLES[role]
    lost = 0
    for _ in range(rounds):
        barrier.wait()
        with guard(pk):
            book = Book.objects.get(pk=pk)
            time.sleep(0.01)  # both load before either saves, as in the seed
            setattr(book, field, value)
            book.save()
        barrier.wait()
        if role == "student":
            book = Book.objects.get(pk=pk)
            lost += (book.status, book.name) != ("free", "name")
            Book.objects.filter(pk=pk).update(status="in use", name="naem")
    return lost


def student_and_admin(guard: Guard, rounds: int = 15) -> Outcome:
    """Seed 000: a student returns Book 1 while an admin renames it, ``rounds`` times."""
    from example_project.library.models import Book

    book = Book.objects.create(name="naem", status="in use")
    barrier = multiprocessing.get_context("spawn").Manager().Barrier(2)
    with _timed() as elapsed:
        lost = _in_processes(_student_or_admin, [(role, guard, book.pk, rounds, barrier)
                                                 for role in ROLES])
    return Outcome(2 * rounds, sum(lost), 0, elapsed[0])


# --- seed 002: a counter several processes increment ---------------------------------
def _borrow(guard: Guard, pk: int, times: int) -> None:
    from example_project.library.models import Book

    for _ in range(times):
        with guard(pk):
            book = Book.objects.get(pk=pk)
            time.sleep(0.002)
            book.borrow_count += 1
            book.save()


def borrow_counter(guard: Guard, processes: int = 4, times: int = 20) -> Outcome:
    """Seed 002: ``processes`` readers each count ``times`` borrowings of one book."""
    from example_project.library.models import Book

    book = Book.objects.create(name="counter", borrow_count=0)
    with _timed() as elapsed:
        _in_processes(_borrow, [(guard, book.pk, times)] * processes)
    book.refresh_from_db()
    return Outcome(processes * times, processes * times - book.borrow_count, 0, elapsed[0])


ROWS = [
    Row("plain Django save()", "student & admin (seed 000)",
        lambda: student_and_admin(no_guard)),
    Row("occupy.lock (database)", "student & admin (seed 000)",
        lambda: student_and_admin(OccupyLock("default"))),
    Row("plain Django save()", "borrow counter (seed 002)",
        lambda: borrow_counter(no_guard)),
    Row("occupy.lock (database)", "borrow counter (seed 002)",
        lambda: borrow_counter(OccupyLock("default"))),
]
