"""Workers the multiprocess tests run in child processes.

A spawned child imports this module before Django is set up, so models are imported
inside the functions only.
"""

from __future__ import annotations

from typing import Any


def seed000_writer(alias: str, pk: int, field: str, rounds: int, plain: bool,
                    barrier: Any) -> list[tuple[str, str]]:
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


def same_field_writer(alias: str, pk: int, me: str, private: str, rounds: int,
                       barrier: Any) -> list[tuple[str, tuple]]:
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

