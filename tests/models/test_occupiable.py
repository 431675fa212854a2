"""OccupiableMixin: book.occupy(), book.holder, keys for every kind of primary key."""

from __future__ import annotations

import uuid

import pytest
from django.db import models
from django.test.utils import isolate_apps

import occupy
from occupy.models import (
    OccupiableManager,
    OccupiableMixin,
    OccupiableQuerySetMixin,
    OccupyManager,
    RowLockQuerySetMixin,
    VersionedManager,
    VersionedMixin,
    VersionedQuerySetMixin,
    object_key,
)
from tests.testapp.models import (
    Book,
    EBook,
    Goods,
    Page,
    ProxyBook,
    Shelf,
    StrictBook,
    Task,
    UUIDBook,
)


def test_keys_name_the_model_and_the_primary_key(tables: None) -> None:
    book = Book.objects.create(name="b")
    uid = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert book.occupy_key == f"testapp.book:{book.pk}"
    assert UUIDBook(pk=uid).occupy_key == f"testapp.uuidbook:{uid}"
    assert Shelf(pk="A:1 b").occupy_key == "testapp.shelf:A:1 b"
    assert object_key(Goods, 3) == "testapp.goods:3"
    # A proxy and a multi-table child are the same row as their root model.
    assert ProxyBook(pk=book.pk).occupy_key == EBook(pk=book.pk).occupy_key == book.occupy_key
    with pytest.raises(ValueError, match="save it"):
        _ = Book(name="unsaved").occupy_key
    # A key that would be too long keeps its start and ends with a digest.
    long_key = Shelf(pk="x" * 300).occupy_key
    assert len(long_key) == 255 and long_key.startswith("testapp.shelf:xxx")


@pytest.mark.parametrize("model, fields", [
    (Book, {"name": "b"}), (UUIDBook, {"name": "u"}), (Shelf, {"code": "s:1"}),
], ids=["int-pk", "uuid-pk", "str-pk"])
def test_occupy_and_holder(tables: None, model: type, fields: dict) -> None:
    row = model.objects.create(**fields)
    assert row.holder is None
    with row.occupy(owner="alice", ttl=30) as lease:
        assert lease.key == row.occupy_key
        assert row.holder[:3] == ("alice", lease.expires_at, lease.fence)
        assert row.holder_on("default").owner == "alice"
        with pytest.raises(occupy.Occupied) as info, row.occupy(owner="bob", timeout=0):
            pass
        assert info.value.holder.owner == "alice"
        with row.occupy(owner="alice", timeout=0) as inner:  # the same owner re-enters
            assert inner.depth == 2
    assert row.holder is None


def test_occupy_works_as_a_decorator_too(tables: None) -> None:
    book = Book.objects.create(name="b")
    seen = []

    @book.occupy(owner="alice")
    def edit() -> None:
        seen.append(book.holder.owner)

    edit()
    assert seen == ["alice"] and book.holder is None


@isolate_apps("tests.testapp")
def test_occupy_backend_names_the_backend_and_backend_overrides_it(tables: None) -> None:
    class OnFiles(OccupiableMixin, models.Model):  # noqa: DJ008 - never shown
        occupy_backend = "files"

        class Meta:
            app_label = "testapp"

    row = OnFiles(pk=1)
    with row.occupy(owner="alice", ttl=30) as lease:
        assert occupy.holder(lease.key, using="files").owner == "alice"
        assert occupy.holder(lease.key, using="default") is None
        assert row.holder.owner == "alice" and row.holder_on("default") is None
    with row.occupy(owner="bob", ttl=30, backend="default") as lease:
        assert occupy.holder(lease.key, using="default").owner == "bob"
        assert row.holder is None and row.holder_on("default").owner == "bob"


def test_using_never_names_the_lock_backend(tables: None) -> None:
    """``using`` means the database on models and querysets, as in Django: passed where
    a method takes the occupy backend, it is refused, never taken for a backend."""
    book = Book.objects.create(name="b")
    with pytest.raises(TypeError, match="using"):
        book.occupy(using="default")
    for call in (Book.objects.occupied, Book.objects.free, Book.objects.claim):
        with pytest.raises(TypeError, match="using"):
            call(using="default")


def test_each_mixin_installs_the_manager_of_what_it_adds() -> None:
    assert type(StrictBook.objects) is VersionedManager  # VersionedMixin only
    assert type(Task.objects) is type(Shelf.objects) is OccupiableManager
    assert type(Page.objects) is models.Manager  # FencedMixin adds no queryset method
    assert not hasattr(StrictBook.objects, "claim") and not hasattr(StrictBook.objects, "locked")
    assert not hasattr(Task.objects, "update_versioned") and not hasattr(Task.objects, "locked")
    for model in (Book, UUIDBook):  # both mixins: the model declares an OccupyManager
        assert isinstance(model.objects, OccupyManager)
        assert model._default_manager is model.objects
    queryset = Goods.objects.all()  # a queryset of its own with two concerns
    assert isinstance(queryset, RowLockQuerySetMixin)
    assert isinstance(queryset, OccupiableQuerySetMixin)
    assert not isinstance(queryset, VersionedQuerySetMixin)


@isolate_apps("tests.testapp")
def test_a_model_combining_mixins_declares_a_manager_with_all_they_add() -> None:
    class Options:
        app_label = "testapp"

    class Both(VersionedMixin, OccupiableMixin, models.Model):  # noqa: DJ008 - never shown
        Meta = Options

    class Reversed(OccupiableMixin, VersionedMixin, models.Model):  # noqa: DJ008 - never shown
        Meta = Options

    class Declared(VersionedMixin, OccupiableMixin, models.Model):  # noqa: DJ008 - never shown
        objects = OccupyManager()
        Meta = Options

    class OwnChoice(VersionedMixin, OccupiableMixin, models.Model):  # noqa: DJ008 - never shown
        objects = models.Manager()
        Meta = Options

    def occupy_errors(model: type[models.Model]) -> list:
        return [e for e in model.check() if e.id.startswith("occupy.")]

    (error,) = occupy_errors(Both)
    assert error.id == "occupy.E201" and error.obj is Both
    assert "occupied(), free() or claim()" in error.msg and "OccupiableMixin" in error.msg
    assert "objects = OccupyManager()" in error.hint
    (error,) = occupy_errors(Reversed)
    assert "update_versioned()" in error.msg and "VersionedMixin" in error.msg
    assert occupy_errors(Declared) == [] and occupy_errors(OwnChoice) == []
