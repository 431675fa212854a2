"""One store per object: occupy's DRF views lock an object in its model's
``occupy_backend``, so that a job holding ``obj.occupy()`` and the API exclude each
other, on every backend the suite binds (the model's store is not ``default`` here)."""

from __future__ import annotations

import pytest

import occupy
from occupy.owners import parse_owner
from tests.support.jobs import JOB, holding
from tests.testapp.models import Document


def _url(doc: Document, suffix: str = "") -> str:
    return f"/api/documents/{doc.pk}/{suffix}"


def test_a_job_holding_the_object_keeps_api_writes_out_until_it_is_done(
    users, client_for, model_store, monkeypatch, tmp_path
):
    """While a job in another process holds ``doc.occupy()`` in the model's store, a
    write and a lease through the API are refused with 423 (never 200), the holder
    told as someone else with its remaining time; after the job, the write passes."""
    monkeypatch.setattr(Document, "occupy_backend", model_store)
    doc = Document.objects.create(body="draft")
    api = client_for(users.editor)
    with holding(doc, model_store, tmp_path):
        assert doc.get_holder().owner == JOB
        write = api.patch(_url(doc), {"body": "api"}, format="json", HTTP_IF_MATCH='"1"')
        lease = api.post(_url(doc, "lease/"), {"ttl": 60}, format="json")
        seen = api.get(_url(doc, "lease/"))
        assert doc.get_holder().owner == JOB  # the answers above were given while it held
    assert write.status_code == 423, write.content
    assert write.json()["holder"]["owner_display"] == "someone else"
    assert 1 <= int(write["Retry-After"]) <= 180
    assert lease.status_code == 423, lease.content
    assert seen.status_code == 200 and seen.json()["holder"]["owner_display"] == "someone else"
    assert Document.objects.get().body == "draft"
    assert doc.get_holder() is None
    done = api.patch(_url(doc), {"body": "api"}, format="json", HTTP_IF_MATCH='"1"')
    assert done.status_code == 200, done.content
    assert Document.objects.get().body == "api"


def test_an_api_lease_is_held_in_the_models_store(users, client_for, model_store, monkeypatch):
    """A lease taken through the API is what ``doc.get_holder()`` sees, and what keeps a
    job's ``doc.occupy()`` out; released through the API, the job may run."""
    monkeypatch.setattr(Document, "occupy_backend", model_store)
    doc = Document.objects.create(body="draft")
    api = client_for(users.editor)
    taken = api.post(_url(doc, "lease/"), {"ttl": 60}, format="json")
    assert taken.status_code == 201, taken.content
    holder = doc.get_holder()
    assert holder is not None and holder.fence == taken.json()["fence"]
    assert parse_owner(holder.owner).user == str(users.editor.pk)
    with pytest.raises(occupy.Occupied), doc.occupy(owner=JOB, timeout=0):
        pass
    released = api.delete(_url(doc, "lease/"), HTTP_OCCUPY_LEASE=taken.json()["token"])
    assert released.status_code == 204
    assert doc.get_holder() is None
    with doc.occupy(owner=JOB, timeout=0) as lease:
        assert doc.get_holder().owner == lease.owner == JOB
