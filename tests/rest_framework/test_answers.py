"""Answers that say what happened: content types, applied ttls, bodies that are not
objects, preconditions compared as RFC 9110 says, messages, dates, the forms the
browsable API offers, the 412 that carries the object, and ``Prefer: wait``."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from django.utils.dateparse import parse_datetime

import occupy
from tests.support.waiting import watch_waiters
from tests.testapp.models import Book

pytestmark = pytest.mark.usefixtures("users")


def _url(book: Book, suffix: str = "") -> str:
    return f"/api/books/{book.pk}/{suffix}"


# --- 11. problem details keep the browsable API's content type ------------------------
def test_problem_details_in_html_are_served_as_html(users, client_for, settings):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "EXCEPTION_HANDLER": "occupy.rest_framework.handlers.problem_exception_handler",
    }
    book = Book.objects.create(name="Dune")
    api = client_for(users.editor)
    page = api.patch(
        _url(book), {"name": "x"}, format="json", HTTP_IF_MATCH='"9"', HTTP_ACCEPT="text/html"
    )
    assert page.status_code == 412
    assert page["Content-Type"].startswith("text/html"), page["Content-Type"]
    assert "precondition_failed" in page.content.decode()
    data = api.patch(_url(book), {"name": "x"}, format="json", HTTP_IF_MATCH='"9"')
    assert data["Content-Type"] == "application/problem+json"


# --- 12. a renew answers the ttl it applied -------------------------------------------
def test_a_shorter_renew_answers_what_the_lease_has_left(users, client_for):
    book = Book.objects.create(name="Dune")
    api = client_for(users.editor)
    taken = api.post(_url(book, "lease/"), {"ttl": 300}, format="json").json()
    renewed = api.patch(
        _url(book, "lease/"), {"ttl": 5}, format="json", HTTP_OCCUPY_LEASE=taken["token"]
    )
    assert renewed.status_code == 200, renewed.content
    body = renewed.json()
    assert body["expires_at"] == taken["expires_at"]  # never shortened
    assert 290 <= body["ttl"] <= 300, body  # and the answer says so
    held = occupy.holder(book.occupy_key)
    assert held is not None and (held.expires_at - datetime.now(timezone.utc)).total_seconds() > 290
    longer = api.patch(
        _url(book, "lease/"), {"ttl": 500}, format="json", HTTP_OCCUPY_LEASE=taken["token"]
    ).json()
    assert longer["ttl"] == 500.0 and longer["expires_at"] > taken["expires_at"]


# --- 14. a lease request's body is an object ------------------------------------------
@pytest.mark.parametrize("body", [[], "x", None, 42, [{"ttl": 5}]])
@pytest.mark.parametrize("endpoint", ["lease/", "lease/takeover/"])
def test_a_lease_body_that_is_no_object_is_400(users, client_for, endpoint, body):
    import json

    book = Book.objects.create(name="Dune")
    response = client_for(users.supervisor).post(
        _url(book, endpoint), json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 400, response.content
    assert "non_field_errors" in response.json()
    same = client_for(users.supervisor).patch(
        _url(book), json.dumps(body), content_type="application/json", HTTP_IF_MATCH='"1"'
    )
    assert same.status_code == 400 and set(same.json()) == set(response.json())  # one shape
    assert occupy.holder(book.occupy_key) is None


@pytest.mark.parametrize("ttl", ["٣٠", "３０", "३०.५"])
def test_a_ttl_of_non_ascii_digits_is_400(users, client_for, ttl):
    book = Book.objects.create(name="Dune")
    response = client_for(users.editor).post(_url(book, "lease/"), {"ttl": ttl}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid_ttl"
    assert occupy.holder(book.occupy_key) is None


# --- 15. one shape for a bad version; exact comparison; If-None-Match on writes --------
@pytest.mark.parametrize("version", [0, -1, 10**12, "abc", True, 1.5])
@pytest.mark.parametrize("path", ["books", "conditional-books"])
def test_a_bad_body_version_has_one_answer(users, client_for, path, version):
    book = Book.objects.create(name="Dune")
    api = client_for(users.editor)
    for method in ("patch", "put", "delete"):
        response = getattr(api, method)(
            f"/api/{path}/{book.pk}/",
            {"name": "x", "status": "use", "version": version},
            format="json",
        )
        assert response.status_code == 400, (method, response.content)
        assert response.json()["code"] == "malformed_precondition", (method, response.json())
        assert "'version'" in response.json()["detail"]
    assert Book.objects.values_list("name", "version").get() == ("Dune", 1)


@pytest.mark.parametrize("tag", ['"013"', '"13 "', 'W/"013"', '"+13"'])
def test_if_match_compares_entity_tags_by_their_characters(users, client_for, tag):
    book = Book.objects.create(name="Dune")
    Book.objects.filter(pk=book.pk).update(version=13)
    response = client_for(users.editor).patch(
        _url(book), {"name": "x"}, format="json", HTTP_IF_MATCH=tag
    )
    assert response.status_code == 412, response.content
    assert response["ETag"] == '"13"'
    assert Book.objects.get().name == "Dune"


@pytest.mark.parametrize("header", ["*", '"1"', 'W/"1"', '"7", "1"'])
@pytest.mark.parametrize("method", ["patch", "put", "delete"])
def test_if_none_match_that_matches_is_412_on_a_write(users, client_for, header, method):
    book = Book.objects.create(name="Dune")
    response = getattr(client_for(users.editor), method)(
        _url(book),
        {"name": "x", "status": "use"},
        format="json",
        HTTP_IF_MATCH='"1"',
        HTTP_IF_NONE_MATCH=header,
    )
    assert response.status_code == 412, response.content
    assert response.json()["code"] == "precondition_failed"
    assert Book.objects.values_list("name", "version").get() == ("Dune", 1)


def test_if_none_match_that_does_not_match_lets_the_write_through(users, client_for):
    book = Book.objects.create(name="Dune")
    api = client_for(users.editor)
    ok = api.patch(
        _url(book), {"name": "x"}, format="json", HTTP_IF_MATCH='"1"', HTTP_IF_NONE_MATCH='"7"'
    )
    assert ok.status_code == 200, ok.content
    bad = api.patch(
        _url(book), {"name": "y"}, format="json", HTTP_IF_MATCH='"2"', HTTP_IF_NONE_MATCH="7"
    )
    assert bad.status_code == 400 and bad.json()["code"] == "malformed_precondition"


# --- 13. If-Match: * means any current version ----------------------------------------
@pytest.mark.parametrize("path", ["books", "conditional-books"])
def test_if_match_star_writes_over_a_row_changed_since_the_read(users, client_for, path):
    """The view read the row; another write changes the same field before this write
    runs: ``*`` writes anyway (any current version), and answers the row as written."""
    book = Book.objects.create(name="Dune", note="a")
    from django.db.models.signals import pre_save

    def sneak_in(sender, instance, **kwargs):
        pre_save.disconnect(sneak_in, sender=Book)
        Book.objects.filter(pk=instance.pk).update_versioned(note="b", status="free")

    pre_save.connect(sneak_in, sender=Book)
    try:
        response = client_for(users.editor).patch(
            f"/api/{path}/{book.pk}/", {"note": "mine"}, format="json", HTTP_IF_MATCH="*"
        )
    finally:
        pre_save.disconnect(sneak_in, sender=Book)
    assert response.status_code == 200, response.content
    row = Book.objects.get()
    assert (row.note, row.status, row.version) == ("mine", "free", 3)
    assert response.json()["status"] == "free" and response["ETag"] == '"3"'


# --- 16. messages, dates and forms ----------------------------------------------------
def test_a_503_on_a_read_does_not_say_nothing_was_written(users, client_for, monkeypatch):
    from occupy.backends import get_backend

    book = Book.objects.create(name="Dune")
    backend = get_backend("default")

    def down(*args, **kwargs):
        raise occupy.StoreUnavailable("the lock store is down (test)", key="k", backend="default")

    monkeypatch.setattr(backend, "holder", down)
    monkeypatch.setattr(backend, "acquire", down)
    # On PostgreSQL the write lock is held by the write's own transaction.
    monkeypatch.setattr(backend, "hold_for_transaction", down, raising=False)
    api = client_for(users.editor)
    read = api.get(_url(book, "lease/"))
    assert read.status_code == 503
    assert "written" not in read.json()["detail"], read.json()
    write = api.patch(_url(book), {"name": "x"}, format="json", HTTP_IF_MATCH='"1"')
    assert write.status_code == 503 and "nothing was written" in write.json()["detail"]


def test_lease_dates_have_one_form(users, client_for):
    book = Book.objects.create(name="Dune")
    api = client_for(users.editor)
    taken = api.post(_url(book, "lease/"), {"ttl": 60}, format="json").json()
    shown = api.get(_url(book, "lease/")).json()["holder"]
    refused = client_for(users.other).post(_url(book, "lease/"), {}, format="json").json()
    dates = [taken["expires_at"], shown["expires_at"], shown["since"]]
    dates += [refused["holder"]["expires_at"], refused["holder"]["since"]]
    assert all(d.endswith("Z") and "+00:00" not in d for d in dates), dates
    assert parse_datetime(taken["expires_at"]) == parse_datetime(shown["expires_at"])
    assert taken["expires_at"] == shown["expires_at"]
    from occupy.http import utc_text

    assert utc_text(datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=2)))) == (
        "2026-01-02T01:04:05.000006Z"
    )


def test_the_browsable_api_offers_no_lease_form_that_needs_the_token(users, client_for):
    book = Book.objects.create(name="Dune")
    api = client_for(users.editor)
    page = api.get(_url(book, "lease/"), HTTP_ACCEPT="text/html").content.decode()
    assert 'id="post-object-form"' in page or "post-generic-content-form" in page
    assert 'data-method="DELETE"' not in page, "a DELETE button that always gets 428"
    assert 'data-method="PATCH"' not in page, "a PATCH button that always gets 428"
    assert 'data-method="PUT"' not in page
    # Without the browsable API's help, the request itself still gets its 428.
    assert api.patch(_url(book, "lease/"), {}, format="json").status_code == 428
    assert api.delete(_url(book, "lease/")).status_code == 428


# --- 31.3: the 412 carries the object; Prefer: wait -----------------------------------
@pytest.mark.parametrize("handler", ["default", "problem"])
def test_a_412_carries_the_current_object_and_its_etag(users, client_for, settings, handler):
    if handler == "problem":
        settings.REST_FRAMEWORK = {
            **settings.REST_FRAMEWORK,
            "EXCEPTION_HANDLER": "occupy.rest_framework.handlers.problem_exception_handler",
        }
    book = Book.objects.create(name="Dune")
    Book.objects.filter(pk=book.pk).update_versioned(status="free", note="theirs")
    api = client_for(users.editor)
    response = api.patch(_url(book), {"name": "mine"}, format="json", HTTP_IF_MATCH='"1"')
    assert response.status_code == 412
    body = response.json()
    assert response["ETag"] == '"2"' and body["current_version"] == 2
    assert body["current"] == api.get(_url(book)).json()
    again = api.patch(_url(book), {"name": "mine"}, format="json", HTTP_IF_MATCH=response["ETag"])
    assert again.status_code == 200 and again.json()["note"] == "theirs"
    stale_body = api.patch(_url(book), {"name": "x", "version": 1}, format="json")
    assert stale_body.status_code == 409 and stale_body.json()["current"]["version"] == 3


@pytest.mark.parametrize(
    ("header", "wait"),
    [
        ("wait=5", 5),
        ("WAIT = 7", 7),
        ("respond-async, wait=3", 3),
        ('handling=lenient; x=1, wait="4"', 4),
        ("wait=2, wait=9", 2),
        ("wait=abc", None),
        ("wait=-1", None),
        ("wait=1.5", None),
        ("wait=" + "9" * 12, None),
        ("return=minimal", None),
        ("", None),
        (None, None),
    ],
)
def test_prefer_wait_is_read_as_rfc_7240_says(header, wait):
    from occupy.preconditions import preferred_wait

    assert preferred_wait(header) == wait


def test_prefer_wait_waits_for_the_lease_then_says_what_it_applied(
    users, client_for, settings, monkeypatch
):
    settings.OCCUPY = {**settings.OCCUPY, "REST_FRAMEWORK": {"LEASE_WAIT_MAX": 3}}
    book = Book.objects.create(name="Dune")
    theirs = client_for(users.other).post(_url(book, "lease/"), {"ttl": 60}, format="json").json()
    waiting = watch_waiters(Book.occupy_backend, monkeypatch)

    def give_back_once_waited_for() -> None:
        try:
            waiting.wait_for(1)
        finally:  # whatever happened, so a waiter that was never seen cannot hang
            client_for(users.other).delete(_url(book, "lease/"), HTTP_OCCUPY_LEASE=theirs["token"])

    giver = threading.Thread(target=give_back_once_waited_for)
    started = time.monotonic()
    giver.start()
    try:
        granted = client_for(users.editor).post(
            _url(book, "lease/"), {}, format="json", HTTP_PREFER="wait=30"
        )
    finally:
        giver.join()
    assert waiting.count() == 1  # the lease was given back while the request waited
    assert granted.status_code == 201, granted.content
    assert granted["Preference-Applied"] == "wait=3"  # capped by LEASE_WAIT_MAX
    assert time.monotonic() - started < 3
    started = time.monotonic()
    refused = client_for(users.other).post(
        _url(book, "lease/"), {}, format="json", HTTP_PREFER="wait=1"
    )
    assert refused.status_code == 423 and 0.9 < time.monotonic() - started < 2.5
    assert refused["Preference-Applied"] == "wait=1" and int(refused["Retry-After"]) >= 1
    at_once = client_for(users.other).post(_url(book, "lease/"), {}, format="json")
    assert at_once.status_code == 423 and "Preference-Applied" not in at_once
