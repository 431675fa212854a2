"""OccupiableMixin: book.occupy(), book.holder, keys for every kind of primary key."""

from __future__ import annotations

import uuid

import pytest

import occupy
from occupy.models import OccupyManager, object_key
from tests.testapp.models import Book, EBook, Goods, ProxyBook, Shelf, UUIDBook


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
    with pytest.raises(ValueError, match="at most"):
        _ = Shelf(pk="x" * 300).occupy_key


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


def test_the_default_manager_is_an_occupy_manager() -> None:
    for model in (Book, Shelf, Goods, UUIDBook):
        assert isinstance(model.objects, OccupyManager)
        assert model._default_manager is model.objects
