"""A deleted row's edit lease ends with it (``occupy.models.deletion``), however the
row is deleted; other holders, a rolled-back delete and a store that is down are left
alone, and the delete never fails for it."""

from __future__ import annotations

import logging

import pytest
from django.db import transaction

import occupy
from tests.testapp.models import Book, Document

pytestmark = pytest.mark.usefixtures("users")


def _url(book: Book, suffix: str = "") -> str:
    return f"/api/books/{book.pk}/{suffix}"


def test_deleting_a_row_ends_its_edit_lease(users, client_for):
    book = Book.objects.create(name="Dune")
    api = client_for(users.editor)
    token = api.post(_url(book, "lease/"), {}, format="json").json()["token"]
    Book.objects.filter(pk=book.pk).delete()  # outside the API
    assert occupy.holder(book.occupy_key) is None
    again = Book.objects.create(pk=book.pk, name="Dune, again")
    assert client_for(users.other).post(_url(again, "lease/"), {}, format="json").status_code == 201
    renew = api.patch(_url(again, "lease/"), {}, format="json", HTTP_OCCUPY_LEASE=token)
    assert renew.status_code == 409 and renew.json()["code"] == "lease_lost"


def test_a_delete_leaves_other_holders_and_a_rolled_back_delete_leaves_the_lease(users):
    doc = Document.objects.create(body="x")
    key = doc.occupy_key
    code_lock = occupy.acquire(key, owner="report-job", ttl=30)
    doc.delete()
    assert occupy.holder(key).fence == code_lock.fence  # not an edit lease
    occupy.release(code_lock)
    book = Book.objects.create(name="Dune")
    lease = occupy.acquire(book.occupy_key, owner=f"user:{users.editor.pk}", ttl=30)
    with pytest.raises(RuntimeError), transaction.atomic():
        Book.objects.get(pk=book.pk).delete()
        raise RuntimeError("rolled back")
    assert occupy.holder(book.occupy_key).fence == lease.fence
    occupy.release(lease)


def test_a_delete_with_the_store_down_deletes_and_logs(users, monkeypatch, caplog):
    from occupy.backends import get_backend

    book = Book.objects.create(name="Dune")
    lease = occupy.acquire(book.occupy_key, owner=f"user:{users.editor.pk}", ttl=30)

    def down(*args, **kwargs):
        raise occupy.StoreUnavailable("the lock store is down (test)", key="k", backend="default")

    monkeypatch.setattr(get_backend("default"), "holder", down)
    with caplog.at_level(logging.WARNING, logger="occupy.models"):
        book.delete()
    assert not Book.objects.exists()
    assert "was not ended (StoreUnavailable" in caplog.text
    monkeypatch.undo()
    occupy.release(lease)


def test_models_without_occupy_mixins_keep_fast_deletes():
    from django.db.models.signals import post_delete

    from tests.testapp.models import Counter

    assert post_delete.has_listeners(Book) and post_delete.has_listeners(Document)
    assert not post_delete.has_listeners(Counter)
