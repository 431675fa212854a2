"""What a type checker sees of occupy's managers and querysets (``make lint`` runs mypy
on this module; nothing here runs): generic in the model, so ``claim()`` is the
model's type, on the manager and on its querysets, with no manager declared."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from typing_extensions import assert_type

from occupy.models import OccupyManager, OccupyQuerySet
from tests.testapp.models import Book, Goods, GoodsQuerySet, Page, Shelf


def managers_are_typed_by_model() -> None:
    """Every occupy mixin's ``objects`` is an ``OccupyManager`` of its model."""
    assert_type(Shelf.objects, OccupyManager[Shelf])  # OccupiableMixin alone
    assert_type(Book.objects, OccupyManager[Book])  # VersionedMixin + OccupiableMixin
    assert_type(Page.objects, OccupyManager[Page])  # FencedMixin alone


def methods_return_the_model() -> None:
    """``claim()`` returns the model or ``None``, from the manager and its querysets."""
    assert_type(Shelf.objects.claim(), Shelf | None)
    assert_type(Book.objects.filter(pk=1).claim(), Book | None)
    assert_type(Book.objects.free().claim(owner="user:7"), Book | None)
    assert_type(Book.objects.occupied(), OccupyQuerySet[Book])
    assert_type(Book.objects.update_versioned(title="x"), int)
    assert_type(Shelf.objects.locked(pk=1), AbstractContextManager[Any])
    assert_type(Goods.objects.cheap().claim(), Goods | None)  # a queryset of one's own
    assert_type(Goods.objects.cheap(), GoodsQuerySet)
