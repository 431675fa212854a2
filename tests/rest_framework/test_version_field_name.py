"""The DRF mixins on a model whose version field is ``revision``
(``version_field_name``) and whose ``version`` is a field of its own: the ETag,
``If-Match``, the body's version and the 409 all read ``revision``."""

from __future__ import annotations

import pytest

from tests.testapp.models import Manual

pytestmark = pytest.mark.usefixtures("users")


def _url(manual: Manual) -> str:
    return f"/api/manuals/{manual.pk}/"


def test_the_etag_and_the_body_carry_the_named_field(users, client_for):
    manual = Manual.objects.create(title="Guide", version="2.0")
    response = client_for(users.editor).get(_url(manual))
    assert response.status_code == 200 and response["ETag"] == '"1"'
    assert response.json() == {"id": manual.pk, "title": "Guide", "version": "2.0", "revision": 1}


def test_if_match_guards_the_named_field_and_a_stale_one_is_412(users, client_for):
    manual = Manual.objects.create(title="Guide", version="2.0")
    api = client_for(users.editor)
    ok = api.patch(_url(manual), {"version": "2.1"}, format="json", HTTP_IF_MATCH='"1"')
    assert ok.status_code == 200, ok.content
    assert ok["ETag"] == '"2"' and ok.json()["revision"] == 2 and ok.json()["version"] == "2.1"
    stale = api.patch(_url(manual), {"title": "x"}, format="json", HTTP_IF_MATCH='"1"')
    assert stale.status_code == 412 and stale["ETag"] == '"2"'
    assert stale.json()["current_version"] == 2
    assert Manual.objects.values_list("title", "version", "revision").get() == ("Guide", "2.1", 2)


def test_the_body_names_the_version_by_the_field_and_a_stale_one_is_409(users, client_for):
    manual = Manual.objects.create(title="Guide")
    Manual.objects.filter(pk=manual.pk).update_versioned(title="Handbook")  # revision 2
    api = client_for(users.editor)
    stale = api.patch(_url(manual), {"title": "x", "revision": 1}, format="json")
    assert stale.status_code == 409 and stale["ETag"] == '"2"'
    assert stale.json()["code"] == "version_conflict"
    ok = api.patch(_url(manual), {"title": "x", "revision": 2}, format="json")
    assert ok.status_code == 200 and ok["ETag"] == '"3"'
    # ``version`` in the body is the manual's own field, never taken for a precondition.
    none = api.patch(_url(manual), {"version": "9"}, format="json")
    assert none.status_code == 428
    assert none.json()["accepted"] == ["If-Match", "revision"]


def test_create_starts_at_revision_one_whatever_the_body_says(users, client_for):
    response = client_for(users.editor).post(
        "/api/manuals/", {"title": "Guide", "version": "1.0", "revision": 7}, format="json"
    )
    assert response.status_code == 201, response.content
    assert response.json()["revision"] == 1 and response.json()["version"] == "1.0"
    assert Manual.objects.values_list("revision", flat=True).get() == 1
