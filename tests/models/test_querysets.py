"""Queryset methods: locked() (seed 002's stock decrement), occupied() and free(), and
how their mixins combine."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import NotSupportedError, connections, models, transaction
from django.test import override_settings

import occupy
from occupy.backends.base import BaseBackend
from occupy.models import (
    OccupiableQuerySetMixin,
    OccupyManager,
    OccupyQuerySet,
    OccupyQuerySetMixin,
    RowLockQuerySetMixin,
    VersionedQuerySetMixin,
)
from tests.support import model_workers, multiproc
from tests.support.aliases import BACKEND_OF
from tests.testapp.models import Book, EBook, Goods, ProxyBook, Shelf, UUIDBook


# --- locked() ------------------------------------------------------------------------
@pytest.mark.multiprocess
def test_locked_decrements_lose_nothing(database: str) -> None:
    """Four processes take one from the stock 15 times each, by a slow read-modify-
    write inside locked(): none is lost and no two critical sections overlap."""
    goods = Goods.objects.using(database).create(name="g", count=100)
    results = multiproc.run(
        model_workers.decrement, [(database, goods.pk, 15, 0.002)] * 4, timeout=120
    )
    assert Goods.objects.using(database).get(pk=goods.pk).count == 100 - 4 * 15
    sections = sorted(s for result in results for s in result)
    overlaps = [(a, b) for a, b in itertools.pairwise(sections) if b[0] < a[1]]
    assert overlaps == []


def test_locked_commits_at_the_end_and_rolls_back_on_error(database: str) -> None:
    goods = Goods.objects.using(database).create(name="g", count=3)
    with Goods.objects.using(database).locked(pk=goods.pk) as locked:
        assert connections[database].in_atomic_block
        assert locked == goods and locked.count == 3
        locked.count -= 1
        locked.save(update_fields=["count"])
    assert not connections[database].in_atomic_block
    with pytest.raises(RuntimeError), Goods.objects.using(database).locked(pk=goods.pk) as locked:
        locked.count = 0
        locked.save()
        raise RuntimeError("boom")
    assert Goods.objects.using(database).get(pk=goods.pk).count == 2
    with pytest.raises(Goods.DoesNotExist), Goods.objects.using(database).locked(pk=0):
        pass


@contextmanager
def held_elsewhere(database: str, pk: int) -> Iterator[None]:
    """Hold the row lock (SQLite: the write lock) of goods ``pk`` from another thread."""
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with Goods.objects.using(database).locked(pk=pk):
                taken.set()
                done.wait(30)
        finally:
            connections.close_all()

    thread = threading.Thread(target=hold)
    thread.start()
    assert taken.wait(30)
    try:
        yield
    finally:
        done.set()
        thread.join()


def test_locked_nowait_raises_occupied(database: str) -> None:
    goods = Goods.objects.using(database).create(name="g", count=3)
    with held_elsewhere(database, goods.pk):
        started = time.monotonic()
        with (
            pytest.raises(occupy.Occupied) as info,
            Goods.objects.using(database).locked(pk=goods.pk, nowait=True),
        ):
            pass
        assert time.monotonic() - started < 2
        assert info.value.key == f"testapp.goods:{goods.pk}"
    with Goods.objects.using(database).locked(pk=goods.pk, nowait=True) as locked:
        assert locked.count == 3


def test_locked_skip_locked_takes_the_first_row_nobody_holds(database: str) -> None:
    first = Goods.objects.using(database).create(name="a", count=1)
    second = Goods.objects.using(database).create(name="b", count=1)
    goods = Goods.objects.using(database)
    if database == "sqlite":  # one write lock for the database: nothing is ever skipped
        with goods.locked(skip_locked=True) as locked:
            assert locked == first
        return
    with held_elsewhere(database, first.pk):
        with goods.locked(skip_locked=True) as locked:
            assert locked == second
        with goods.filter(pk=first.pk).locked(skip_locked=True) as locked:
            assert locked is None


def test_locked_refuses_what_it_cannot_do(database: str) -> None:
    goods = Goods.objects.using(database).create(name="g", count=1)
    with (
        pytest.raises(ValueError, match="not both"),
        Goods.objects.locked(pk=goods.pk, nowait=True, skip_locked=True),
    ):
        pass
    if database == "mysql":  # MariaDB has no FOR UPDATE OF
        with (
            pytest.raises(NotSupportedError, match="OF"),
            Goods.objects.using(database).locked(pk=goods.pk, of=("self",)),
        ):
            pass
    else:
        with Goods.objects.using(database).locked(pk=goods.pk, of=("self",)) as locked:
            assert locked == goods


def test_locked_on_sqlite_inside_a_stale_transaction_says_why(tables: None) -> None:
    if "sqlite" not in connections:
        pytest.skip("no SQLite database")
    goods = Goods.objects.using("sqlite").create(name="g", count=1)
    writer = threading.Thread(
        target=lambda: (
            Goods.objects.using("sqlite").filter(pk=goods.pk).update(count=5),
            connections.close_all(),
        )
    )
    with (
        pytest.raises(transaction.TransactionManagementError, match="surrounding"),
        transaction.atomic(using="sqlite"),
    ):
        Goods.objects.using("sqlite").get(pk=goods.pk)  # this transaction has read
        writer.start()
        writer.join()  # another connection wrote since
        with Goods.objects.using("sqlite").locked(pk=goods.pk):
            pass


def test_the_mixins_go_into_your_own_querysets(tables: None) -> None:
    class MyQuerySet(RowLockQuerySetMixin, models.QuerySet):
        def cheap(self):
            return self.filter(count__lt=5)

    goods = Goods.objects.create(name="g", count=3)
    queryset = MyQuerySet(model=Goods)
    with queryset.cheap().locked(pk=goods.pk) as locked:
        assert locked == goods
    with Goods.objects.cheap().locked(pk=goods.pk) as locked:  # Goods' own queryset
        assert locked == goods
    assert list(Goods.objects.cheap().free()) == [goods]
    for concern in (RowLockQuerySetMixin, VersionedQuerySetMixin, OccupiableQuerySetMixin):
        assert issubclass(OccupyQuerySetMixin, concern)
    assert issubclass(OccupyQuerySet, OccupyQuerySetMixin)
    assert all(
        hasattr(OccupyManager, name)
        for name in ("locked", "update_versioned", "occupied", "free", "claim")
    )


# --- occupied() and free() ------------------------------------------------------------
@pytest.mark.parametrize(
    "model, make",
    [
        (Book, lambda n: {"name": n}),
        (UUIDBook, lambda n: {"name": n}),
        (Shelf, lambda n: {"code": f"shelf:{n}"}),
    ],
    ids=["int-pk", "uuid-pk", "str-pk"],
)
def test_occupied_and_free(database: str, model: type, make) -> None:
    backend = BACKEND_OF[database]
    rows = [model.objects.using(database).create(**make(str(n))) for n in range(3)]
    objects = model.objects.using(database)
    free_later = objects.free(backend=backend)  # evaluated when used, not when built
    with rows[1].occupy(owner="alice", backend=backend):
        assert list(objects.occupied(backend=backend)) == [rows[1]]
        assert set(objects.free(backend=backend)) == {rows[0], rows[2]}
        assert set(free_later) == {rows[0], rows[2]}
        assert list(objects.filter(pk=rows[0].pk).occupied(backend=backend)) == []
    assert list(objects.occupied(backend=backend)) == []
    assert set(objects.free(backend=backend)) == set(rows)


def test_an_expired_claim_counts_as_free(database: str) -> None:
    backend = BACKEND_OF[database]
    shelf = Shelf.objects.using(database).create(code="a")
    occupy.acquire(shelf.occupy_key, owner="gone", ttl=0.3, backend=backend)
    assert list(Shelf.objects.using(database).occupied(backend=backend)) == [shelf]
    time.sleep(0.45)
    assert list(Shelf.objects.using(database).occupied(backend=backend)) == []
    assert list(Shelf.objects.using(database).free(backend=backend)) == [shelf]


def test_proxies_and_children_see_the_root_models_claims(tables: None) -> None:
    ebook = EBook.objects.create(name="e")
    book = Book.objects.create(name="b")
    with Book.objects.get(pk=ebook.pk).occupy(owner="alice"):
        assert list(EBook.objects.occupied()) == [ebook]
        assert list(ProxyBook.objects.occupied()) == [ProxyBook.objects.get(pk=ebook.pk)]
        assert list(Book.objects.free()) == [book]


def test_claims_in_another_database_are_read_first(tables: None) -> None:
    aliases = [a for a in ("sqlite", "postgresql", "mysql") if a in connections]
    if len(aliases) < 2:
        pytest.skip("needs two databases")
    rows_db, claims_db = aliases[0], aliases[1]
    shelf = Shelf.objects.using(rows_db).create(code=str(uuid.uuid4()))
    Shelf.objects.using(rows_db).create(code="other")
    with occupy.lock(shelf.occupy_key, backend=BACKEND_OF[claims_db]):
        occupied = Shelf.objects.using(rows_db).occupied(backend=BACKEND_OF[claims_db])
        assert list(occupied) == [shelf]


class NoRowsBackend(BaseBackend):
    """A backend that keeps no Occupation rows."""


def test_other_backends_are_refused_clearly(tables: None) -> None:
    backends = {
        "default": {"BACKEND": "occupy.backends.db.DatabaseBackend"},
        "other": {"BACKEND": "tests.models.test_querysets.NoRowsBackend"},
    }
    with override_settings(OCCUPY={"BACKENDS": backends}):
        for call in (Shelf.objects.occupied, Shelf.objects.free, Shelf.objects.claim):
            with pytest.raises(
                occupy.InvalidBackendError, match=r"'other' \(NoRowsBackend\) keeps them elsewhere"
            ):
                call(backend="other")
