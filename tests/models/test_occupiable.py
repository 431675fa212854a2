"""OccupiableMixin: book.occupy(), book.get_holder(), keys for every kind of primary key."""

from __future__ import annotations

import uuid

import pytest
from django.db import models
from django.test.utils import isolate_apps

import occupy
from occupy.models import (
    FencedMixin,
    OccupiableManager,
    OccupiableMixin,
    OccupiableQuerySetMixin,
    OccupyManager,
    OccupyQuerySetMixin,
    RowLockQuerySetMixin,
    VersionedMixin,
    VersionedQuerySetMixin,
    object_key,
)
from tests.testapp.models import (
    Book,
    Document,
    EBook,
    Goods,
    Label,
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


@pytest.mark.parametrize(
    "model, fields",
    [
        (Book, {"name": "b"}),
        (UUIDBook, {"name": "u"}),
        (Shelf, {"code": "s:1"}),
    ],
    ids=["int-pk", "uuid-pk", "str-pk"],
)
def test_occupy_and_holder(tables: None, model: type, fields: dict) -> None:
    row = model.objects.create(**fields)
    assert row.get_holder() is None
    with row.occupy(owner="alice", ttl=30) as lease:
        assert lease.key == row.occupy_key
        assert row.get_holder()[:3] == ("alice", lease.expires_at, lease.fence)
        assert row.get_holder(backend="default").owner == "alice"
        with pytest.raises(occupy.Occupied) as info, row.occupy(owner="bob", timeout=0):
            pass
        assert info.value.holder.owner == "alice"
        with row.occupy(owner="alice", timeout=0) as inner:  # the same owner re-enters
            assert inner.depth == 2
    assert row.get_holder() is None


def test_occupy_works_as_a_decorator_too(tables: None) -> None:
    book = Book.objects.create(name="b")
    seen = []

    @book.occupy(owner="alice")
    def edit() -> None:
        seen.append(book.get_holder().owner)

    edit()
    assert seen == ["alice"] and book.get_holder() is None


@isolate_apps("tests.testapp")
def test_occupy_backend_names_the_backend_and_backend_overrides_it(tables: None) -> None:
    class OnFiles(OccupiableMixin, models.Model):  # noqa: DJ008 - never shown
        occupy_backend = "files"

        class Meta:
            app_label = "testapp"

    row = OnFiles(pk=1)
    with row.occupy(owner="alice", ttl=30) as lease:
        assert occupy.holder(lease.key, backend="files").owner == "alice"
        assert occupy.holder(lease.key, backend="default") is None
        assert row.get_holder().owner == "alice" and row.get_holder(backend="default") is None
    with row.occupy(owner="bob", ttl=30, backend="default") as lease:
        assert occupy.holder(lease.key, backend="default").owner == "bob"
        assert row.get_holder() is None and row.get_holder(backend="default").owner == "bob"


def test_using_never_names_the_lock_backend(tables: None) -> None:
    """``using`` means the database on models and querysets, as in Django: passed where
    a method takes the occupy backend, it is refused, never taken for a backend."""
    book = Book.objects.create(name="b")
    with pytest.raises(TypeError, match="using"):
        book.occupy(using="default")
    for call in (Book.objects.occupied, Book.objects.free, Book.objects.claim):
        with pytest.raises(TypeError, match="using"):
            call(using="default")


def test_every_mixin_installs_the_one_occupy_manager() -> None:
    """Whichever of the mixins Django's manager inheritance takes ``objects`` from, and
    whatever they are combined with, it is the same manager with every method."""
    for model in (StrictBook, Task, Shelf, Page, Book, UUIDBook, Document, Label):
        assert type(model.objects) is OccupyManager, model
        assert model._default_manager is model.objects
        for method in ("locked", "update_versioned", "occupied", "free", "claim"):
            assert callable(getattr(model.objects, method)), (model, method)
            assert callable(getattr(model.objects.all(), method)), (model, method)
    queryset = Goods.objects.all()  # a queryset of its own with two concerns
    assert isinstance(queryset, RowLockQuerySetMixin)
    assert isinstance(queryset, OccupiableQuerySetMixin)
    assert not isinstance(queryset, VersionedQuerySetMixin)


def test_a_model_with_occupiable_mixin_alone_has_row_locks(tables: None) -> None:
    """Seed 002's row lock on occupy's queryset, with no manager declared."""
    shelf = Shelf.objects.create(name="s")
    with Shelf.objects.locked(pk=shelf.pk) as locked:
        assert locked == shelf
    with Shelf.objects.filter(name="s").locked(pk=shelf.pk) as locked:
        assert locked == shelf


def test_a_method_the_model_cannot_carry_names_the_model_and_what_it_lacks(
    tables: None,
) -> None:
    with pytest.raises(
        TypeError,
        match=r"update_versioned\(\) needs a model with "
        r"VersionedMixin; testapp.Shelf has no version",
    ):
        Shelf.objects.update_versioned(name="x")
    with pytest.raises(TypeError, match=r"testapp\.Task"):
        Task.objects.filter(pk=1).update_versioned(title="x")


@isolate_apps("tests.testapp")
def test_the_mixins_compose_with_no_manager_declared() -> None:
    class Options:
        app_label = "testapp"

    class Both(VersionedMixin, OccupiableMixin, models.Model):  # noqa: DJ008 - never shown
        Meta = Options

    class Reversed(OccupiableMixin, VersionedMixin, models.Model):  # noqa: DJ008 - never shown
        Meta = Options

    class All(FencedMixin, VersionedMixin, OccupiableMixin, models.Model):  # noqa: DJ008
        Meta = Options

    class OwnQuerySet(OccupyQuerySetMixin["Own"], models.QuerySet["Own"]):
        pass

    class Own(VersionedMixin, OccupiableMixin, models.Model):  # noqa: DJ008 - never shown
        objects = OwnQuerySet.as_manager()
        Meta = Options

    for model in (Both, Reversed, All, Own):
        assert [e for e in model.check() if e.id.startswith("occupy.")] == [], model
        assert isinstance(model.objects.all(), OccupyQuerySetMixin)


@isolate_apps("tests.testapp")
def test_a_manager_of_ones_own_that_lacks_what_the_mixins_add_fails_check() -> None:
    class Options:
        app_label = "testapp"

    class Plain(VersionedMixin, OccupiableMixin, models.Model):  # noqa: DJ008 - never shown
        objects = models.Manager()
        Meta = Options

    class Partial(VersionedMixin, OccupiableMixin, models.Model):  # noqa: DJ008 - never shown
        objects = OccupiableManager()
        Meta = Options

    class Base(OccupiableMixin, models.Model):
        objects = OccupiableManager()

        class Meta:
            abstract = True

    class Inherited(Base, VersionedMixin):  # noqa: DJ008 - never shown
        Meta = Options

    class Fenced(FencedMixin, models.Model):  # noqa: DJ008 - FencedMixin adds no method
        objects = models.Manager()
        Meta = Options

    def occupy_errors(model: type[models.Model]) -> list:
        return [e for e in model.check() if e.id.startswith("occupy.")]

    errors = occupy_errors(Plain)
    assert [e.id for e in errors] == ["occupy.E201", "occupy.E201"]
    assert all(e.obj is Plain for e in errors)
    text = " ".join(e.msg for e in errors)
    assert "update_versioned()" in text and "VersionedMixin" in text
    assert "occupied(), free() or claim()" in text and "OccupiableMixin" in text
    assert "Plain.objects is a Manager" in text
    assert "OccupyQuerySetMixin" in errors[0].hint
    for model in (Partial, Inherited):
        (error,) = occupy_errors(model)
        assert "update_versioned()" in error.msg and "OccupiableManager" in error.msg
    assert occupy_errors(Fenced) == []
