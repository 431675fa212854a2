"""One store per object: occupy's admin locks an object in its model's
``occupy_backend``, so that a job holding ``obj.occupy()`` makes the change page
read-only, on every backend the suite binds (the model's store is not ``default``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from occupy.owners import owner_user_pk
from tests.admin.conftest import LeasePages
from tests.support.jobs import JOB, holding
from tests.support.users import StaffUsers, login
from tests.testapp.models import Document


def test_a_job_holding_the_object_makes_its_change_page_read_only(
    users: StaffUsers,
    pages: LeasePages,
    model_store: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """While a job in another process holds ``doc.occupy()`` in the model's store, the
    change page is read-only, naming someone else, a save is refused, and the
    changelist shows the row as being edited; after the job, the page leases the object
    in the same store."""
    monkeypatch.setattr(Document, "occupy_backend", model_store)
    doc = Document.objects.create(body="draft")
    client = login(users.editor)
    with holding(doc, model_store, tmp_path):
        html, page = pages.open(client, pages.url(doc))
        saved = client.post(
            pages.url(doc),
            {"body": "admin", "occupy_version": 1, "_occupy_tab": page["tab"]},
        )
        listed = client.get("/admin/testapp/document/").content.decode()
        assert doc.get_holder().owner == JOB  # the pages above were served while it held
    assert page["state"] == "readonly" and not page["token"], page
    assert "someone else is editing this object" in html
    assert 'name="body"' not in html and 'name="_save"' not in html
    assert saved.status_code == 200  # the form again, saying why: nothing saved
    assert "by someone else until" in listed
    assert Document.objects.get().body == "draft"
    _html, page = pages.open(client, pages.url(doc))
    assert page["state"] == "editing" and page["token"]
    holder = doc.get_holder()
    assert holder is not None and owner_user_pk(holder.owner) == str(users.editor.pk)
