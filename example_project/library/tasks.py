"""The background task of ``race_demo``'s task storm: a nightly report per book, which
several workers start at once (two schedulers fired it, a message came twice).

Its body is a slow read-modify-write of the book's report count, which two runs at
once for one book lose. ``report`` is a plain task of Django's tasks framework;
``occupied_report`` the same body under ``occupy.django_tasks``: one run per book at a time,
a run that finds its book's report running is skipped (logged), never run beside it.
"""

from __future__ import annotations

import time

from occupy.django_tasks import task

try:  # Django's own tasks framework (6.0 and later), else its backport (django-tasks)
    from django.tasks import task as plain_task
except ImportError:
    from django_tasks import task as plain_task


def _count_report(pk: int) -> bool:
    """Count one report of book ``pk``: read, work a moment, write the count plus one."""
    from example_project.library.models import Book

    book = Book.objects.get(pk=pk)
    time.sleep(0.01)
    Book.objects.filter(pk=pk).update(stock=book.stock + 1)
    return True


@plain_task
def report(pk: int) -> bool:
    """The report as a plain task: runs whenever a worker starts it."""
    return _count_report(pk)


@task(occupy_key="library.report:{pk}", occupy_ttl=30, occupy_on_busy="skip")
def occupied_report(pk: int) -> bool:
    """The report under occupy: one run per book at a time; a busy run is skipped."""
    return _count_report(pk)
