"""OccupyStatusAdminMixin: the "being edited" column costs no query per row."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib import admin
from django.test import RequestFactory

import occupy
from occupy.models import object_key
from tests.support.users import StaffUsers, login
from tests.testapp.models import Book, Scroll


def test_the_column_for_100_rows_is_one_query(
    users: StaffUsers, django_assert_num_queries: Any
) -> None:
    books = Book.objects.bulk_create(Book(name=f"b{i:03}") for i in range(100))
    leases = [
        occupy.acquire(
            object_key(Book, b.pk),
            owner=f"admin:user:{users.editor.pk}:tab:0123456789abcdef",
            reentrant=False,
        )
        for b in books[:10]
    ]
    occupy.acquire(object_key(Book, books[10].pk), owner="worker-7")
    model_admin = admin.site._registry[Book]
    request = RequestFactory().get("/admin/testapp/book/")
    request.user = users.editor
    with django_assert_num_queries(1):  # Django's assertNumQueries
        rows = list(model_admin.get_queryset(request).order_by("name"))
        cells = [model_admin.occupy_status(row) for row in rows]
    assert len(rows) == 100
    assert all(cell.startswith("by Editor until ") for cell in cells[:10])
    assert cells[10].startswith("by someone else until ")
    assert set(cells[11:]) == {"—"}
    for lease in leases:
        occupy.release(lease)


def test_the_changelist_shows_the_column_and_filters(users: StaffUsers) -> None:
    held, _free = Book.objects.create(name="held"), Book.objects.create(name="free")
    lease = occupy.acquire(
        object_key(Book, held.pk), owner=f"admin:user:{users.other.pk}:tab:0123456789abcdef"
    )
    client = login(users.editor)
    page = client.get("/admin/testapp/book/").content.decode()
    assert "being edited" in page.lower() and "by Other until" in page
    page = client.get("/admin/testapp/book/?occupied=1").content.decode()
    assert ">held<" in page and ">free<" not in page
    page = client.get("/admin/testapp/book/?occupied=0").content.decode()
    assert ">free<" in page and ">held<" not in page
    occupy.release(lease)


@pytest.mark.parametrize("alias", ["files", "memory"])
def test_the_column_shows_leases_on_any_backend(users: StaffUsers, alias: str) -> None:
    """Outside the database, the column reads the page's holders from the store (the
    check warns that it does, and that the filter is not offered)."""
    from occupy.admin import OccupiedListFilter, OccupyStatusAdminMixin

    class Elsewhere(OccupyStatusAdminMixin, admin.ModelAdmin):
        occupy_backend = alias

    held, _free = Book.objects.create(name="held"), Book.objects.create(name="free")
    lease = occupy.acquire(
        object_key(Book, held.pk),
        backend=alias,
        reentrant=False,
        owner=f"admin:user:{users.other.pk}:tab:0123456789abcdef",
    )
    worker = occupy.acquire(
        object_key(Book, _free.pk), backend=alias, reentrant=False, owner="worker-7"
    )
    model_admin = Elsewhere(Book, admin.AdminSite())
    errors = model_admin.check()
    assert [e.id for e in errors] == ["occupy.W102"] and repr(alias) in errors[0].msg
    request = RequestFactory().get("/admin/testapp/book/")
    request.user = users.editor
    assert OccupiedListFilter not in model_admin.get_list_filter(request)
    changelist = model_admin.get_changelist_instance(request)
    cells = {row.name: model_admin.occupy_status(row) for row in changelist.result_list}
    assert cells["held"].startswith("by Other until "), cells
    assert cells["free"].startswith("by someone else until "), cells
    occupy.release(lease)
    occupy.release(worker)
    changelist = model_admin.get_changelist_instance(request)
    assert {model_admin.occupy_status(row) for row in changelist.result_list} == {"—"}


def test_a_misconfigured_backend_is_left_to_occupys_own_checks() -> None:
    """A typo in the backend's OPTIONS is E006's; the admin adds no E102 that would send
    the user to the admin instead. An alias that is not configured is the admin's E102."""
    from django.test import override_settings

    from occupy.admin import OccupyStatusAdminMixin

    class Status(OccupyStatusAdminMixin, admin.ModelAdmin):
        pass

    class Elsewhere(OccupyStatusAdminMixin, admin.ModelAdmin):
        occupy_backend = "nowhere"

    typo = {
        "BACKENDS": {
            "default": {
                "BACKEND": "occupy.backends.db.DatabaseBackend",
                "OPTIONS": {"POLL_INTERVALL": 0.05},
            }
        }
    }
    with override_settings(OCCUPY=typo):
        assert Status(Book, admin.AdminSite()).check() == []
    assert [e.id for e in Elsewhere(Book, admin.AdminSite()).check()] == ["occupy.E102"]


def test_the_filter_reads_the_columns_backend(users: StaffUsers) -> None:
    """The "being edited" filter asks the backend the column reads, not "default"."""
    from occupy.admin import OccupyStatusAdminMixin
    from occupy.admin.status import OccupiedListFilter

    class OnFiles(OccupyStatusAdminMixin, admin.ModelAdmin):
        occupy_backend = "files"

    request = RequestFactory().get("/admin/testapp/book/", {"occupied": "1"})
    request.user = users.editor
    model_admin = OnFiles(Book, admin.AdminSite())
    listed = OccupiedListFilter(request, {"occupied": ["1"]}, Book, model_admin)
    with pytest.raises(occupy.InvalidBackendError, match="'files'"):
        listed.queryset(request, Book.objects.all())


def test_the_admin_status_column_shows_a_row_under_a_shortened_key(users: StaffUsers) -> None:
    # Two rows whose keys share all of their readable start.
    held = Scroll.objects.create(code="a" * 220 + "1" * 30)
    free = Scroll.objects.create(code="a" * 220 + "2" * 30)
    lease = occupy.acquire(held.occupy_key, owner="worker-7")
    model_admin = admin.site._registry[Scroll]
    request = RequestFactory().get("/admin/testapp/scroll/")
    request.user = users.editor
    cells = {row.pk: model_admin.occupy_status(row) for row in model_admin.get_queryset(request)}
    assert cells[held.pk].startswith("by someone else until ")
    assert cells[free.pk] == "—"
    occupy.release(lease)
