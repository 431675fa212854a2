"""No 500, by construction: every occupy condition that reaches DRF is its row of the
status table, on occupy's views and on plain ones, JSON or the browsable API."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.db.models.signals import pre_save

import occupy
from tests.testapp.models import Book, LongKeyNote

pytestmark = pytest.mark.usefixtures("users")

MIDDLEWARE = "occupy.middleware.OccupyErrorsMiddleware"


@pytest.fixture(params=["middleware", "handler", "problem"])
def error_setup(request, settings):
    """The three ways a project answers occupy's exceptions on plain views: DRF's
    default handler with occupy's middleware, occupy's handler, its problem handler."""
    if request.param == "middleware":
        settings.MIDDLEWARE = [*settings.MIDDLEWARE, MIDDLEWARE]
    else:
        handler = "exception_handler" if request.param == "handler" else "problem_exception_handler"
        settings.REST_FRAMEWORK = {
            **settings.REST_FRAMEWORK,
            "EXCEPTION_HANDLER": f"occupy.rest_framework.handlers.{handler}",
        }
    return request.param


def test_a_plain_model_viewset_answers_a_version_conflict_with_409(users, client_for, error_setup):
    """A plain ModelViewSet on a model that gained VersionedMixin: a PATCH that loses the
    race for the same field is 409 version_conflict with the current ETag, not 500."""
    book = Book.objects.create(name="Dune")

    def sneak_in(sender, instance, **kwargs):
        pre_save.disconnect(sneak_in, sender=Book)
        Book.objects.filter(pk=instance.pk).update_versioned(name="Arrakis")  # version 2

    pre_save.connect(sneak_in, sender=Book)
    try:
        response = client_for(users.editor).patch(
            f"/api/plain-books/{book.pk}/", {"name": "Caladan"}, format="json"
        )
    finally:
        pre_save.disconnect(sneak_in, sender=Book)
    assert response.status_code == 409, response.content
    assert response["ETag"] == '"2"'
    body = response.json()
    assert body["code"] == "version_conflict" and body["current_version"] == 2
    assert Book.objects.values_list("name", "version").get() == ("Arrakis", 2)


def test_a_plain_view_answers_an_unreachable_store_with_503(
    users, client_for, settings, monkeypatch
):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, MIDDLEWARE]
    book = Book.objects.create(name="Dune")

    def down(*args, **kwargs):
        raise occupy.StoreUnavailable("the lock store is down (test)", key="k")

    monkeypatch.setattr(Book, "save", down)
    response = client_for(users.editor).patch(
        f"/api/plain-books/{book.pk}/", {"name": "x"}, format="json"
    )
    assert response.status_code == 503 and response["Retry-After"] == "1"
    assert response.json()["code"] == "store_unavailable"


def test_other_exceptions_are_left_to_django(users, client_for, settings, monkeypatch):
    """The middleware answers occupy's conditions only: a bug stays a bug."""
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, MIDDLEWARE]
    book = Book.objects.create(name="Dune")

    def bug(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(Book, "save", bug)
    with pytest.raises(ZeroDivisionError):
        client_for(users.editor).patch(f"/api/plain-books/{book.pk}/", {"name": "x"}, format="json")


def test_the_browsable_api_works_on_every_lease_endpoint(users, client_for):
    """Accept: text/html on take, look, renew, write, takeover, beacon and release:
    pages, never a 500, and the token of a lease taken there is on its page."""
    doc = Book.objects.create(name="Dune")  # a serializer with required fields
    url = f"/api/books/{doc.pk}/"
    api = client_for(users.editor)
    html = {"HTTP_ACCEPT": "text/html"}
    taken = api.post(url + "lease/", {"ttl": 60}, format="json", **html)
    assert taken.status_code == 201 and taken["Content-Type"].startswith("text/html")
    token = occupy_token = None
    holder = occupy.holder(doc.occupy_key)
    assert holder is not None
    page = taken.content.decode()
    for word in page.replace('"', " ").replace("&quot;", " ").split():
        if len(word) == 32 and all(c in "0123456789abcdef" for c in word):
            token = word
    assert token is not None, "the new lease's token is not on its page"
    occupy_token = {"HTTP_OCCUPY_LEASE": token}
    looked = api.get(url + "lease/", **html)
    assert looked.status_code == 200 and token not in looked.content.decode()
    renewed = api.patch(url + "lease/", {"ttl": 90}, format="json", **html, **occupy_token)
    assert renewed.status_code == 200, renewed.content[:500]
    written = api.patch(
        url, {"name": "final"}, format="json", HTTP_IF_MATCH='"1"', **html, **occupy_token
    )
    assert written.status_code == 200, written.content[:500]
    mine = api.post(url + "lease/takeover/", {"ttl": 60}, format="json", **html)
    assert mine.status_code == 201, mine.content[:500]
    assert api.get(url + "lease/takeover/", **html).status_code == 405
    assert api.get(url + "lease/release/", **html).status_code == 405
    current = occupy.holder(doc.occupy_key)
    released = api.post(url + "lease/release/", {"token": token}, **html)
    assert released.status_code == 409  # the old token: the takeover replaced it
    assert occupy.holder(doc.occupy_key) == current
    assert api.delete(url + "lease/", **html, **occupy_token).status_code == 409
    refused = client_for(users.other).post(url + "lease/", {}, format="json", **html)
    assert refused.status_code == 423 and "Editor" in refused.content.decode()
    assert Book.objects.get().name == "final"


def test_an_if_match_with_a_huge_number_is_400(users, client_for):
    book = Book.objects.create(name="Dune")
    response = client_for(users.editor).patch(
        f"/api/books/{book.pk}/", {"name": "x"}, format="json", HTTP_IF_MATCH=f'"{"9" * 5000}"'
    )
    assert response.status_code == 400, response.content[:300]
    assert response.json()["code"] == "malformed_precondition"
    assert len(response.json()["detail"]) < 300  # the header is not echoed whole
    assert Book.objects.get().name == "Dune"


@pytest.mark.parametrize("version", [True, "1.0", "9" * 5000, 2**40, -1, 0])
def test_a_body_version_that_is_no_version_is_400(users, client_for, version):
    book = Book.objects.create(name="Dune")
    response = client_for(users.editor).patch(
        f"/api/books/{book.pk}/", {"name": "x", "version": version}, format="json"
    )
    assert response.status_code == 400, response.content[:300]
    assert Book.objects.get().name == "Dune"


def test_a_250_character_string_pk_end_to_end(users, client_for):
    """A primary key too long for a plain key: every endpoint answers without a 500.
    Either the key builder fits it (a digest) and everything works, or the object is
    refused as unlockable (400 invalid_key) and nothing is written."""
    slug = "n" * 250
    LongKeyNote.objects.create(slug=slug, text="draft")
    url = f"/api/long-key-notes/{slug}/"
    api = client_for(users.editor)
    assert api.get(url).status_code == 200
    taken = api.post(url + "lease/", {}, format="json")
    if taken.status_code == 400:
        assert taken.json()["code"] == "invalid_key"
        for response in (
            api.get(url + "lease/"),
            api.patch(url, {"text": "x"}, format="json", HTTP_IF_MATCH='"1"'),
            api.post(url + "lease/takeover/", {}, format="json"),
            api.delete(url, HTTP_IF_MATCH='"1"'),
        ):
            assert response.status_code == 400 and response.json()["code"] == "invalid_key"
        assert LongKeyNote.objects.get().text == "draft"
        return
    assert taken.status_code == 201, taken.content
    token = taken.json()["token"]
    assert api.get(url + "lease/").json()["holder"]["owner_display"] == "Editor"
    assert (
        client_for(users.other)
        .patch(url, {"text": "x"}, format="json", HTTP_IF_MATCH='"1"')
        .status_code
        == 423
    )
    written = api.patch(
        url, {"text": "final"}, format="json", HTTP_IF_MATCH='"1"', HTTP_OCCUPY_LEASE=token
    )
    assert written.status_code == 200, written.content
    assert api.delete(url + "lease/", HTTP_OCCUPY_LEASE=token).status_code == 204
    assert api.delete(url, HTTP_IF_MATCH='"2"').status_code == 204
    assert not LongKeyNote.objects.exists()


def test_no_takeover_log_without_a_replaced_holder(users, client_for):
    """Taking over a free object replaces nobody: no log entry, ``replaced`` null."""
    book = Book.objects.create(name="Dune")
    response = client_for(users.editor).post(
        f"/api/books/{book.pk}/lease/takeover/", {}, format="json"
    )
    assert response.status_code == 201 and response.json()["replaced"] is None
    assert not LogEntry.objects.exists()
