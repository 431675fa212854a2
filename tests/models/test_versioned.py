"""VersionedMixin: seed 000 replayed in several processes, and every edge of save()."""

from __future__ import annotations

import asyncio
import multiprocessing

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, connections, transaction
from django.db.models import F
from django.db.models.signals import post_save, pre_save

import occupy
from occupy.models import VersionedMixin
from tests.support import model_workers, multiproc
from tests.testapp.models import Book, EBook, ProxyBook, StrictBook, UUIDBook

ROUNDS = 8


# --- seed 000 in several processes ---------------------------------------------------
@pytest.mark.multiprocess
def test_seed000_student_and_admin_both_succeed(server: str) -> None:
    """The student returns the book (status) while the admin renames it (name), from
    the same loaded row: with VersionedMixin both changes survive, every round."""
    book = Book.objects.using(server).create(name="naem", status="use")
    barrier = multiprocessing.get_context("spawn").Barrier(2)
    results = multiproc.run(
        model_workers.seed000_writer,
        [
            (server, book.pk, "status", ROUNDS, False, barrier),
            (server, book.pk, "name", ROUNDS, False, barrier),
        ],
        timeout=90,
    )
    expected = [(f"status-{r}", f"name-{r}") for r in range(ROUNDS)]
    assert results == [expected, expected]
    assert Book.objects.using(server).get(pk=book.pk).version == 1 + 2 * ROUNDS


@pytest.mark.multiprocess
def test_seed000_plain_save_loses_one_change_every_round(server: str) -> None:
    """The control: the same harness with Django's whole-row save loses a change."""
    book = Book.objects.using(server).create(name="naem", status="use")
    barrier = multiprocessing.get_context("spawn").Barrier(2)
    results = multiproc.run(
        model_workers.seed000_writer,
        [
            (server, book.pk, "status", 3, True, barrier),
            (server, book.pk, "name", 3, True, barrier),
        ],
        timeout=90,
    )
    for r, (status, name) in enumerate(results[0]):
        assert (status == f"status-{r}") != (name == f"name-{r}"), (status, name)


@pytest.mark.multiprocess
def test_two_writers_of_one_field_one_wins_the_other_conflicts(server: str) -> None:
    book = Book.objects.using(server).create(name="naem", status="use", note="")
    barrier = multiprocessing.get_context("spawn").Barrier(2)
    a, b = multiproc.run(
        model_workers.same_field_writer,
        [
            (server, book.pk, "A", "status", ROUNDS, barrier),
            (server, book.pk, "B", "note", ROUNDS, barrier),
        ],
        timeout=90,
    )
    for r, ((a_outcome, row), (b_outcome, row_b)) in enumerate(zip(a, b, strict=True)):
        assert row == row_b
        assert sorted([a_outcome, b_outcome]) == ["conflict", "won"], r
        name, status, note = row
        if a_outcome == "won":  # all of A's write, none of B's
            assert (name, status) == (f"A-{r}", f"A-{r}") and note != f"B-{r}"
        else:
            assert (name, note) == (f"B-{r}", f"B-{r}") and status != f"A-{r}"


# --- single process: the policies ------------------------------------------------------
def test_different_fields_merge_and_the_same_field_conflicts(tables: None) -> None:
    Book.objects.create(name="naem", status="use")
    student, admin, third = (Book.objects.get() for _ in range(3))
    student.status = "free"
    student.save()
    admin.name = "name"
    admin.save()
    assert (student.version, admin.version) == (2, 3)
    book = Book.objects.get()
    assert (book.name, book.status, book.version) == ("name", "free", 3)
    third.name = "other"
    with pytest.raises(occupy.VersionConflict) as info:
        third.save()
    error = info.value
    assert isinstance(error, occupy.ConflictError)
    assert (error.model, error.pk, error.fields) == (Book, book.pk, ("name", "updated_at"))
    assert "name" in str(error) and "'naem'" in str(error) and "'name'" in str(error)
    assert third.version == 1  # nothing changed on the instance either
    assert Book.objects.get().name == "name"


def test_strict_policy_conflicts_on_any_change(tables: None) -> None:
    StrictBook.objects.create(name="naem", status="use")
    student, admin = StrictBook.objects.get(), StrictBook.objects.get()
    student.status = "free"
    student.save()
    admin.name = "name"
    with pytest.raises(occupy.VersionConflict, match="version changed"):
        admin.save()
    assert StrictBook.objects.values_list("name", "status", "version").get() == ("naem", "free", 2)
    admin.refresh_from_db()
    admin.name = "name"
    admin.save()
    assert StrictBook.objects.values_list("name", "status", "version").get() == ("name", "free", 3)


def test_the_policy_can_be_chosen_per_save(tables: None) -> None:
    Book.objects.create(name="naem")
    first, second = Book.objects.get(), Book.objects.get()
    first.status = "free"
    first.save()
    second.name = "name"
    with pytest.raises(occupy.VersionConflict):
        second.save(version_policy="strict")
    second.save(version_policy="fields")
    with pytest.raises(ImproperlyConfigured, match="version_policy"):
        second.save(version_policy="loose")


def test_a_bad_policy_fails_when_the_class_is_defined() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"Loose.*version_policy.*'loose'"):

        class Loose(VersionedMixin):
            version_policy = "loose"

            class Meta:
                abstract = True


def test_an_expected_version_from_a_client_is_checked(tables: None) -> None:
    """The If-Match pattern: an instance built with the version the client saw."""
    book = StrictBook.objects.create(name="naem")
    stale = StrictBook(pk=book.pk, version=1, name="client")
    StrictBook.objects.filter(pk=book.pk).update_versioned(status="free")
    with pytest.raises(occupy.VersionConflict):
        stale.save(update_fields=["name"])
    fresh = StrictBook(pk=book.pk, version=2, name="client")
    fresh.save(update_fields=["name"])
    assert StrictBook.objects.values_list("name", "status", "version").get() == (
        "client",
        "free",
        3,
    )


def test_a_version_the_caller_supplies_is_checked_strictly(database: str) -> None:
    """Under the default "fields" policy too: a version built into the instance or
    assigned after the load is the caller's precondition (the If-Match and form
    pattern), not something save() loaded; a stale one is refused."""
    books = Book.objects.using(database)
    book = books.create(name="a", status="use")
    loaded = books.get(pk=book.pk)
    loaded.name = "b"
    loaded.save()  # version 2
    with pytest.raises(occupy.VersionConflict):  # built by hand with the old version
        Book(pk=book.pk, version=1, name="c").save(using=database, update_fields=["name"])
    late = books.get(pk=book.pk)
    late.version = 1  # the version the client saw, assigned after the load
    late.status = "free"  # another field than the one that moved on
    with pytest.raises(occupy.VersionConflict):
        late.save()
    assert books.values_list("name", "status", "version").get() == ("b", "use", 2)
    current = books.get(pk=book.pk)
    current.version = 2  # the current version: accepted
    current.status = "free"
    current.save()
    Book(pk=book.pk, version=3, name="d").save(using=database, update_fields=["name"])
    assert books.values_list("name", "status", "version").get() == ("d", "free", 4)


def test_delete_is_guarded_by_the_version(database: str) -> None:
    books = Book.objects.using(database)
    book = books.create(name="a")
    stale = books.get(pk=book.pk)
    book.status = "free"
    book.save()  # version 2
    with pytest.raises(occupy.VersionConflict, match="version 1, now 2"):
        stale.delete()
    assert books.filter(pk=book.pk).exists()
    client = books.get(pk=book.pk)
    client.version = 1  # a client's stale If-Match
    with pytest.raises(occupy.VersionConflict):
        client.delete()
    assert books.filter(pk=book.pk).exists()
    assert book.delete() == (1, {"testapp.Book": 1})
    with pytest.raises(occupy.VersionConflict, match="no longer exists"):
        stale.delete()
    gone = books.create(name="b")
    asyncio.run(gone.adelete())
    assert not books.filter(pk=gone.pk).exists()


# --- single process: what is written ---------------------------------------------------
def test_only_changed_fields_are_written_and_signals_say_which(tables: None) -> None:
    seen = []

    def record(sender, update_fields, **kwargs):
        seen.append((kwargs["signal"] is pre_save, update_fields))

    pre_save.connect(record, sender=Book, dispatch_uid="t-pre")
    post_save.connect(record, sender=Book, dispatch_uid="t-post")
    try:
        Book.objects.create(name="naem")
        book = Book.objects.get()
        book.save()  # nothing changed: nothing written, no signals
        book.status = "free"
        book.save()
    finally:
        pre_save.disconnect(dispatch_uid="t-pre", sender=Book)
        post_save.disconnect(dispatch_uid="t-post", sender=Book)
    written = frozenset({"status", "updated_at", "version"})
    assert seen == [(True, None), (False, None), (True, written), (False, written)]


def test_auto_now_moves_with_a_change_and_is_never_compared(tables: None) -> None:
    Book.objects.create(name="naem")
    first, second = Book.objects.get(), Book.objects.get()
    first.status = "free"
    first.save()
    second.name = "name"
    second.save()  # updated_at changed under it, but it is not second's field to guard
    assert second.updated_at > first.updated_at


def test_update_fields_writes_those_fields_only(tables: None) -> None:
    Book.objects.create(name="naem", status="use")
    book = Book.objects.get()
    book.name = "name"
    book.status = "free"
    book.save(update_fields=["name"])
    assert Book.objects.values_list("name", "status", "version").get() == ("name", "use", 2)
    assert book.changed_fields() == ["status"]  # still pending
    book.save()
    assert Book.objects.values_list("status", "version").get() == ("free", 3)
    book.save(update_fields=[])  # Django's no-op
    with pytest.raises(ValueError, match="nope"):
        book.save(update_fields=["nope"])
    with pytest.raises(ValueError, match="primary key"):
        book.save(update_fields=["id"])


def test_in_place_changes_and_expressions_count_as_changes(tables: None) -> None:
    Book.objects.create(name="naem", tags=["a"])
    book = Book.objects.get()
    book.tags.append("b")
    assert book.changed_fields() == ["tags"]
    book.save()
    assert Book.objects.get().tags == ["a", "b"]
    other = Book.objects.get()
    book.note = F("note")  # an expression is written, never compared
    other.note = "x"
    other.save()
    book.save()
    assert Book.objects.get().note == "x"


def test_deferred_fields(tables: None) -> None:
    Book.objects.create(name="naem", status="use")
    book = Book.objects.only("name", "version").get()
    assert book.changed_fields() == []
    book.status = "free"  # assigned without being loaded: written, not compared
    book.name = "name"
    Book.objects.filter().update(status="lost")
    book.save()
    assert Book.objects.values_list("name", "status").get() == ("name", "free")
    lazy = Book.objects.defer("note").get()
    assert lazy.note == ""  # the deferred load is remembered as loaded
    Book.objects.update_versioned(note="changed")
    lazy.note = "mine"
    with pytest.raises(occupy.VersionConflict, match="note"):
        lazy.save(version_policy="fields")
    no_version = StrictBook.objects.create(name="s")
    strict = StrictBook.objects.only("name").get(pk=no_version.pk)
    strict.name = "t"
    with pytest.raises(ValueError, match="without its version"):
        strict.save()


def test_refresh_from_db_resets_what_was_loaded(tables: None) -> None:
    Book.objects.create(name="naem")
    book = Book.objects.get()
    Book.objects.get().save(force_update=True)  # someone bumps the version
    writer = Book.objects.get()
    writer.name = "name"
    writer.save()
    book.name = "mine"
    with pytest.raises(occupy.VersionConflict):
        book.save()
    book.refresh_from_db()
    assert (book.name, book.version, book.changed_fields()) == ("name", 3, [])
    book.name = "mine"
    book.save()
    assert Book.objects.get().name == "mine"
    book.refresh_from_db(fields=["name"])
    assert book.changed_fields() == []
    Book.objects.update_versioned(name="theirs")
    book.refresh_from_db(fields=(name for name in ["name"]))  # any iterable, read once
    assert (book.name, book.changed_fields()) == ("theirs", [])


def test_create_and_new_instances(tables: None) -> None:
    book = Book.objects.create(name="naem")
    assert book.version == 1 and book.changed_fields() == []
    book.status = "free"
    book.save()
    assert book.version == 2
    clash = Book(pk=book.pk, name="overwrite")  # would overwrite the row unguarded
    with pytest.raises(IntegrityError), transaction.atomic():
        clash.save()
    assert Book.objects.get().name == "naem"
    copy = Book.objects.get()
    copy.pk = None
    copy.save()  # pk=None inserts, as in Django
    assert Book.objects.count() == 2


def test_a_deleted_row_conflicts(tables: None) -> None:
    book = Book.objects.create(name="naem")
    Book.objects.all().delete()
    book.name = "name"
    with pytest.raises(occupy.VersionConflict, match="no longer exists"):
        book.save()


def test_unknown_save_options_are_refused(tables: None) -> None:
    book = Book.objects.create(name="naem")
    book.name = "x"
    with pytest.raises(TypeError, match="lease"):
        book.save(lease=None, nonsense=1)
    with pytest.raises(TypeError, match="nonsense"):
        Book(name="y").save(nonsense=1)


def test_a_conflict_inside_a_transaction_leaves_it_usable(tables: None) -> None:
    Book.objects.create(name="naem")
    book = Book.objects.get()
    Book.objects.update_versioned(name="other")
    with transaction.atomic():
        book.name = "name"
        with pytest.raises(occupy.VersionConflict):
            book.save()
        assert Book.objects.get().name == "other"  # the transaction still works


# --- inheritance and keys ---------------------------------------------------------------
def test_multi_table_inheritance(tables: None) -> None:
    EBook.objects.create(name="naem", url="u")
    first, second, third = (EBook.objects.get() for _ in range(3))
    first.url = "u1"  # the child's table
    first.save()
    second.name = "name"  # the parent's table, where the version lives
    second.save()
    assert EBook.objects.values_list("name", "url", "version").get() == ("name", "u1", 3)
    third.url = "u3"
    third.status = "free"
    with pytest.raises(occupy.VersionConflict, match="url"):
        third.save()
    # Nothing partial: the parent's status was not written either.
    assert EBook.objects.values_list("status", "url").get() == ("use", "u1")
    strict = EBook.objects.get()
    Book.objects.update_versioned(note="n")
    strict.url = "u4"
    with pytest.raises(occupy.VersionConflict):
        strict.save(version_policy="strict")
    assert EBook.objects.get().url == "u1"


def test_proxy_models_share_the_row_and_its_version(tables: None) -> None:
    Book.objects.create(name="naem")
    proxy, book = ProxyBook.objects.get(), Book.objects.get()
    proxy.status = "free"
    proxy.save()
    book.status = "lost"
    with pytest.raises(occupy.VersionConflict):
        book.save()
    assert proxy.occupy_key == book.occupy_key == f"testapp.book:{book.pk}"


def test_uuid_primary_keys(tables: None) -> None:
    UUIDBook.objects.create(name="naem")
    first, second = UUIDBook.objects.get(), UUIDBook.objects.get()
    first.name = "name"
    first.save()
    second.name = "other"
    with pytest.raises(occupy.VersionConflict) as info:
        second.save()
    assert info.value.pk == first.pk
    assert UUIDBook.objects.get().version == 2


# --- the bypass and its guarded alternative -------------------------------------------
def test_queryset_update_bypasses_the_version(tables: None) -> None:
    StrictBook.objects.create(name="naem")
    book = StrictBook.objects.get()
    StrictBook.objects.update(name="bulk")  # neither checked nor bumped
    book.status = "free"
    book.save()  # so the strict check cannot see it...
    assert StrictBook.objects.values_list("name", "version").get() == ("bulk", 2)


def test_update_versioned_bumps_so_stale_instances_conflict(tables: None) -> None:
    StrictBook.objects.create(name="a")
    StrictBook.objects.create(name="b")
    stale = StrictBook.objects.get(name="a")
    assert StrictBook.objects.update_versioned(status="free") == 2
    assert list(StrictBook.objects.values_list("version", flat=True)) == [2, 2]
    stale.name = "c"
    with pytest.raises(occupy.VersionConflict):
        stale.save()


def test_update_versioned_with_an_expected_count(tables: None) -> None:
    book = StrictBook.objects.create(name="a")
    assert (
        StrictBook.objects.filter(pk=book.pk, version=1).update_versioned(expected=1, name="b") == 1
    )
    with pytest.raises(occupy.VersionConflict, match="matched 0"):
        StrictBook.objects.filter(pk=book.pk, version=1).update_versioned(expected=1, name="c")
    StrictBook.objects.create(name="d")
    with pytest.raises(occupy.VersionConflict, match="matched 2"):
        StrictBook.objects.update_versioned(expected=1, name="e")
    assert sorted(StrictBook.objects.values_list("name", flat=True)) == ["b", "d"]
    with pytest.raises(ValueError, match="version"):
        StrictBook.objects.update_versioned(version=7)
    with pytest.raises(TypeError, match="VersionedMixin"):
        from occupy.models import OccupyQuerySet
        from tests.testapp.models import Goods

        OccupyQuerySet(model=Goods).update_versioned(count=1)


# --- retry and async ---------------------------------------------------------------------
def test_retry_on_conflict_reloads_and_reapplies(tables: None) -> None:
    book = StrictBook.objects.create(name="a")
    runs = []

    @occupy.retry_on_conflict(attempts=3, backoff=0)
    def rename(pk: int, name: str) -> None:
        loaded = StrictBook.objects.get(pk=pk)
        runs.append(loaded.version)
        if len(runs) == 1:  # someone else writes between our load and our save
            StrictBook.objects.filter(pk=pk).update_versioned(status="free")
        loaded.name = name
        loaded.save()

    rename(book.pk, "b")
    assert runs == [1, 2]
    assert StrictBook.objects.values_list("name", "status", "version").get() == ("b", "free", 3)


def test_async_save(tables: None) -> None:
    async def main() -> None:
        book = await Book.objects.acreate(name="naem")
        book.name = "name"
        await book.asave(version_policy="strict")
        await sync_to_async(connections.close_all)()  # the worker thread's connection

    asyncio.run(main())
    assert Book.objects.values_list("name", "version").get() == ("name", 2)


def test_saving_to_another_database_copies_the_row(tables: None) -> None:
    others = [
        alias
        for alias in connections
        if alias != "default"
        and connections[alias].settings_dict["NAME"] != connections["default"].settings_dict["NAME"]
    ]
    if not others:
        pytest.skip("needs a second test database")
    book = Book.objects.create(name="naem")
    book.save(using=others[0])
    assert Book.objects.using(others[0]).get(pk=book.pk).name == "naem"
