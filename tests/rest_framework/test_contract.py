"""The HTTP contract of the DRF mixins, row by row (occupy.http's table)."""

from __future__ import annotations

import threading
import uuid

import pytest
from django.db import connection
from django.db.models.signals import pre_save

import occupy
from occupy.history import get_change_message
from tests.testapp.models import Book, Document, Label, UUIDBook

pytestmark = pytest.mark.usefixtures("users")


def _url(book: Book, suffix: str = "") -> str:
    return f"/api/books/{book.pk}/{suffix}"


# --- conditional requests ------------------------------------------------------------
def test_retrieve_sends_the_etag_and_a_matching_if_none_match_gets_304(users, client_for):
    book = Book.objects.create(name="Dune")
    api = client_for(users.editor)
    response = api.get(_url(book))
    assert response.status_code == 200 and response["ETag"] == '"1"'
    assert response.json()["version"] == 1
    assert api.get(_url(book), HTTP_IF_NONE_MATCH='"1"').status_code == 304
    assert api.get(_url(book), HTTP_IF_NONE_MATCH='W/"1"').status_code == 304
    assert api.get(_url(book), HTTP_IF_NONE_MATCH='"7"').status_code == 200


@pytest.mark.parametrize("method", ["put", "patch", "delete"])
def test_a_write_without_a_precondition_is_428(users, client_for, method):
    book = Book.objects.create(name="Dune")
    response = getattr(client_for(users.editor), method)(_url(book), {"name": "x"}, format="json")
    assert response.status_code == 428
    assert response.json()["code"] == "precondition_required"
    assert response["Cache-Control"] == "no-store"
    assert Book.objects.get().name == "Dune"


@pytest.mark.parametrize("header", ["3", '"3', "W/3", '"1" "2"', 'abc, "1"'])
def test_a_malformed_if_match_is_400_never_ignored(users, client_for, header):
    book = Book.objects.create(name="Dune")
    response = client_for(users.editor).patch(
        _url(book), {"name": "x"}, format="json", HTTP_IF_MATCH=header
    )
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "malformed_precondition"
    assert Book.objects.get().name == "Dune"


@pytest.mark.parametrize("header", ['"1"', 'W/"1"', '"5", "1"', "*"])
def test_matching_if_match_forms_write_and_answer_the_new_etag(users, client_for, header):
    book = Book.objects.create(name="Dune")
    response = client_for(users.editor).patch(
        _url(book), {"name": "Arrakis"}, format="json", HTTP_IF_MATCH=header
    )
    assert response.status_code == 200, response.content
    assert response["ETag"] == '"2"' and response.json()["version"] == 2
    assert Book.objects.get().name == "Arrakis"


def test_a_stale_if_match_is_412_with_the_current_etag(users, client_for):
    book = Book.objects.create(name="Dune")
    Book.objects.filter(pk=book.pk).update_versioned(status="free")  # version 2
    response = client_for(users.editor).put(
        _url(book), {"name": "x", "status": "use"}, format="json", HTTP_IF_MATCH='"1"'
    )
    assert response.status_code == 412
    assert response["ETag"] == '"2"'
    assert response.json()["code"] == "precondition_failed"
    assert response.json()["current_version"] == 2
    assert Book.objects.values_list("name", "status").get() == ("Dune", "free")


def test_a_stale_body_version_is_409(users, client_for):
    book = Book.objects.create(name="Dune")
    Book.objects.filter(pk=book.pk).update_versioned(status="free")
    response = client_for(users.editor).patch(
        _url(book), {"name": "x", "version": 1}, format="json"
    )
    assert response.status_code == 409 and response["ETag"] == '"2"'
    assert response.json()["code"] == "version_conflict"
    ok = client_for(users.editor).patch(_url(book), {"name": "x", "version": 2}, format="json")
    assert ok.status_code == 200 and ok["ETag"] == '"3"'


def test_a_race_lost_between_the_check_and_the_write_is_still_412(users, client_for):
    """The pre-check passes; another writer commits before the UPDATE: the guarded UPDATE
    itself refuses (the check and the write are one statement)."""
    book = Book.objects.create(name="Dune")

    def sneak_in(sender, instance, **kwargs):
        pre_save.disconnect(sneak_in, sender=Book)

        def other_writer() -> None:  # on a connection of its own, as another process
            try:
                Book.objects.filter(pk=instance.pk).update_versioned(note="meanwhile")
            finally:
                connection.close()

        thread = threading.Thread(target=other_writer)
        thread.start()
        thread.join()

    pre_save.connect(sneak_in, sender=Book)
    try:
        response = client_for(users.editor).patch(
            _url(book), {"status": "free"}, format="json", HTTP_IF_MATCH='"1"'
        )
    finally:
        pre_save.disconnect(sneak_in, sender=Book)
    assert response.status_code == 412 and response["ETag"] == '"2"'
    assert Book.objects.values_list("status", "note").get() == ("use", "meanwhile")


def test_delete_is_conditional(users, client_for):
    book = Book.objects.create(name="Dune")
    api = client_for(users.editor)
    assert api.delete(_url(book), HTTP_IF_MATCH='"2"').status_code == 412
    assert api.delete(_url(book), HTTP_IF_MATCH='"1"').status_code == 204
    assert not Book.objects.exists()


def test_permissions_come_before_preconditions(users, client_for):
    book = Book.objects.create(name="Dune")
    assert (
        client_for(users.viewer).patch(_url(book), {"name": "x"}, format="json").status_code == 403
    )
    from rest_framework.test import APIClient

    assert APIClient().patch(_url(book), {"name": "x"}, format="json").status_code in (401, 403)
    assert APIClient().get(_url(book)).status_code in (401, 403)


# --- writes and edit leases -----------------------------------------------------------
def test_an_object_someone_else_holds_is_423_with_retry_after(users, client_for):
    book = Book.objects.create(name="Dune")
    lease = occupy.acquire(book.occupy_key, owner=f"user:{users.other.pk}", ttl=30)
    response = client_for(users.editor).patch(
        _url(book), {"name": "x"}, format="json", HTTP_IF_MATCH='"1"'
    )
    assert response.status_code == 423
    assert 1 <= int(response["Retry-After"]) <= 30
    body = response.json()
    assert body["code"] == "locked" and body["retry_after"] >= 1
    assert body["holder"]["owner_display"] == "Other"
    assert set(body["holder"]) == {"owner_display", "since", "expires_at"}
    assert lease.token not in response.content.decode()
    assert "@" not in response.content.decode()
    assert Book.objects.get().name == "Dune"
    occupy.release(lease)


def test_the_lease_endpoints(users, client_for):
    book = Book.objects.create(name="Dune")
    api = client_for(users.editor)
    taken = api.post(_url(book, "lease/"), {"ttl": 60}, format="json")
    assert taken.status_code == 201, taken.content
    token = taken.json()["token"]
    again = api.post(_url(book, "lease/"), {}, format="json", HTTP_OCCUPY_LEASE=token)
    assert again.status_code == 200 and again.json()["token"] == token  # no new level
    mine = api.post(_url(book, "lease/"), {}, format="json")  # the token was lost
    assert mine.status_code == 423 and mine.json()["holder"]["owner_display"] == "Editor"
    looked = api.get(_url(book, "lease/"))
    assert looked.status_code == 200 and looked.json()["holder"]["owner_display"] == "Editor"
    assert token not in looked.content.decode()
    assert api.patch(_url(book, "lease/"), {"ttl": 90}, format="json").status_code == 428
    renewed = api.patch(_url(book, "lease/"), {"ttl": 90}, format="json", HTTP_OCCUPY_LEASE=token)
    assert renewed.status_code == 200 and "token" not in renewed.json()
    write = api.patch(
        _url(book), {"name": "Arrakis"}, format="json", HTTP_IF_MATCH='"1"', HTTP_OCCUPY_LEASE=token
    )
    assert write.status_code == 200, write.content
    blocked = client_for(users.other).patch(
        _url(book), {"name": "x"}, format="json", HTTP_IF_MATCH='"2"'
    )
    assert blocked.status_code == 423
    assert api.delete(_url(book, "lease/"), HTTP_OCCUPY_LEASE=token).status_code == 204
    assert occupy.holder(book.occupy_key) is None  # one release: no level leaked
    assert api.delete(_url(book, "lease/"), HTTP_OCCUPY_LEASE=token).status_code == 204
    assert Book.objects.get().name == "Arrakis"


def test_leasing_needs_the_change_permission_not_the_add_one(users, client_for):
    from django.contrib.auth.models import Permission

    book = Book.objects.create(name="Dune")
    users.viewer.user_permissions.add(Permission.objects.get(codename="change_book"))
    from django.contrib.auth.models import User

    changer = User.objects.get(pk=users.viewer.pk)  # view and change, no add
    taken = client_for(changer).post(_url(book, "lease/"), {}, format="json")
    assert taken.status_code == 201, taken.content
    viewer = User.objects.create_user("onlyview")
    viewer.user_permissions.add(Permission.objects.get(codename="view_book"))
    refused = client_for(User.objects.get(pk=viewer.pk)).post(
        _url(book, "lease/"), {}, format="json"
    )
    assert refused.status_code == 403
    from rest_framework.test import APIClient

    assert APIClient().post(_url(book, "lease/"), {}, format="json").status_code in (401, 403)


@pytest.mark.parametrize("ttl", ["x", "nan", [1], 0, -1, 1e308, 1e-9])
@pytest.mark.parametrize("endpoint", ["lease/", "lease/takeover/"])
def test_an_invalid_ttl_is_400(users, client_for, endpoint, ttl):
    book = Book.objects.create(name="Dune")
    response = client_for(users.supervisor).post(_url(book, endpoint), {"ttl": ttl}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid_ttl"
    assert occupy.holder(book.occupy_key) is None


def test_leasing_needs_the_change_permission_not_add_or_delete(users, client_for):
    """Under DjangoModelPermissions, the lease endpoints' POST and DELETE are judged as a
    change of the object (not as an add or a delete): a user who may change books but
    not add or delete them takes, renews, releases and beacon-releases leases."""
    from django.contrib.auth.models import Permission, User

    changer = User.objects.create_user("changer", password="x")
    changer.user_permissions.set(
        Permission.objects.filter(codename__in=["change_book", "view_book"])
    )
    changer = User.objects.get(pk=changer.pk)
    book = Book.objects.create(name="Dune")
    api = client_for(changer)
    taken = api.post(_url(book, "lease/"), {"ttl": 60}, format="json")
    assert taken.status_code == 201, taken.content
    token = taken.json()["token"]
    assert (
        api.patch(_url(book, "lease/"), {}, format="json", HTTP_OCCUPY_LEASE=token).status_code
        == 200
    )
    assert api.delete(_url(book, "lease/"), HTTP_OCCUPY_LEASE=token).status_code == 204
    token = api.post(_url(book, "lease/"), {}, format="json").json()["token"]
    assert api.post(_url(book, "lease/release/"), {"token": token}).status_code == 204
    assert occupy.holder(book.occupy_key) is None
    assert api.delete(_url(book), HTTP_IF_MATCH='"1"').status_code == 403  # still no delete
    viewer = client_for(users.viewer)
    assert viewer.post(_url(book, "lease/"), {}, format="json").status_code == 403


def test_another_holders_token_is_409_and_their_lease_survives(users, client_for):
    book = Book.objects.create(name="Dune")
    theirs = client_for(users.other).post(_url(book, "lease/"), {}, format="json").json()
    mine = occupy.acquire("elsewhere", owner="me")
    api = client_for(users.editor)
    response = api.delete(_url(book, "lease/"), HTTP_OCCUPY_LEASE=mine.token)
    assert response.status_code == 409 and response.json()["code"] == "lease_lost"
    assert occupy.holder(book.occupy_key).fence == theirs["fence"]
    bad = api.delete(_url(book, "lease/"), HTTP_OCCUPY_LEASE="not a token!")
    assert bad.status_code == 400
    occupy.release(mine)


def test_takeover_fences_out_the_old_holder(users, client_for):
    doc = Document.objects.create(body="draft")
    url = f"/api/documents/{doc.pk}/"
    old = client_for(users.editor).post(url + "lease/", {}, format="json").json()["token"]
    refused = client_for(users.other).post(url + "lease/takeover/", {}, format="json")
    assert refused.status_code == 403
    boss = client_for(users.supervisor)
    new = boss.post(url + "lease/takeover/", {}, format="json")
    assert new.status_code == 201 and new.json()["fence"] > 0
    new_token = new.json()["token"]
    assert (
        boss.patch(
            url, {"body": "final"}, format="json", HTTP_IF_MATCH='"1"', HTTP_OCCUPY_LEASE=new_token
        ).status_code
        == 200
    )
    api = client_for(users.editor)
    renew = api.patch(url + "lease/", {}, format="json", HTTP_OCCUPY_LEASE=old)
    assert renew.status_code == 409 and renew.json()["code"] == "lease_lost"
    write = api.patch(
        url, {"body": "stale"}, format="json", HTTP_IF_MATCH='"2"', HTTP_OCCUPY_LEASE=old
    )
    assert write.status_code == 409 and write.json()["code"] == "fenced_out"
    assert Document.objects.get().body == "final"
    from django.contrib.admin.models import LogEntry

    entry = LogEntry.objects.get(user=users.supervisor)
    assert "Took over the edit lease from Editor" in get_change_message(entry)


def test_the_same_user_may_take_over_their_own_lease(users, client_for):
    book = Book.objects.create(name="Dune")
    api = client_for(users.editor)
    lost = api.post(_url(book, "lease/"), {}, format="json").json()["token"]
    back = api.post(_url(book, "lease/takeover/"), {}, format="json")
    assert back.status_code == 201 and back.json()["token"] != lost


def test_the_beacon_release_is_csrf_protected(users, client_for):
    book = Book.objects.create(name="Dune")
    api = client_for(users.editor, csrf=True)
    csrf = api.get("/api/books/").cookies.get("csrftoken")
    if csrf is None:  # no view set the cookie: ask the middleware for one
        from django.middleware.csrf import _get_new_csrf_string

        csrf_value = _get_new_csrf_string()
        api.cookies["csrftoken"] = csrf_value
    else:
        csrf_value = csrf.value
    taken = api.post(_url(book, "lease/"), {}, format="json", HTTP_X_CSRFTOKEN=csrf_value)
    assert taken.status_code == 201, taken.content
    token = taken.json()["token"]
    refused = api.post(_url(book, "lease/release/"), {"token": token})
    assert refused.status_code == 403  # no CSRF token in the form
    assert occupy.holder(book.occupy_key) is not None
    released = api.post(
        _url(book, "lease/release/"), {"token": token, "csrfmiddlewaretoken": csrf_value}
    )
    assert released.status_code == 204
    assert occupy.holder(book.occupy_key) is None


@pytest.mark.parametrize("kind", ["uuid", "string"])
def test_uuid_and_string_primary_keys(users, client_for, kind):
    if kind == "uuid":
        obj = UUIDBook.objects.create(id=uuid.uuid4(), name="Dune")
        url, field = f"/api/uuid-books/{obj.pk}/", "name"
    else:
        obj = Label.objects.create(code="sci-fi.1", text="Dune")
        url, field = f"/api/labels/{obj.pk}/", "text"
    api = client_for(users.editor)
    token = api.post(url + "lease/", {}, format="json").json()["token"]
    assert (
        client_for(users.other)
        .patch(url, {field: "x"}, format="json", HTTP_IF_MATCH='"1"')
        .status_code
        == 423
    )
    response = api.patch(
        url, {field: "Arrakis"}, format="json", HTTP_IF_MATCH='"1"', HTTP_OCCUPY_LEASE=token
    )
    assert response.status_code == 200 and response["ETag"] == '"2"'
    assert api.delete(url + "lease/", HTTP_OCCUPY_LEASE=token).status_code == 204
    assert api.delete(url, HTTP_IF_MATCH='"2"').status_code == 204


def test_problem_details_handler(users, client_for, settings):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "EXCEPTION_HANDLER": "occupy.rest_framework.handlers.problem_exception_handler",
    }
    book = Book.objects.create(name="Dune")
    response = client_for(users.editor).patch(
        _url(book), {"name": "x"}, format="json", HTTP_IF_MATCH='"9"'
    )
    assert response.status_code == 412
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["type"] == "about:blank" and body["status"] == 412
    assert body["code"] == "precondition_failed" and body["instance"] == _url(book)
    assert response["ETag"] == '"1"'


def test_an_unreachable_lock_store_is_503_not_500(users, client_for, monkeypatch):
    from occupy.backends import get_backend

    book = Book.objects.create(name="Dune")
    backend = get_backend("default")

    def down(*args, **kwargs):
        raise occupy.StoreUnavailable("the lock store is down (test)", key="k", backend="default")

    monkeypatch.setattr(backend, "acquire", down)
    monkeypatch.setattr(backend, "hold_for_transaction", down)  # the write lock on PostgreSQL
    response = client_for(users.editor).patch(
        _url(book), {"name": "x"}, format="json", HTTP_IF_MATCH='"1"'
    )
    assert response.status_code == 503 and response["Retry-After"] == "1"
    assert response.json()["code"] == "store_unavailable"
    assert Book.objects.get().name == "Dune"
