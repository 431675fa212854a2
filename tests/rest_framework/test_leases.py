"""Edit leases over the API: bound to their user, bounded ttls, deletes that release,
write locks that are waited for and never told as somebody editing."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.utils.dateparse import parse_datetime

import occupy
from occupy.exceptions import InvalidBackendError
from occupy.history import get_change_message
from occupy.owners import admin_owner, lease_owner, parse_owner, write_owner
from tests.support.waiting import release_once_waiting
from tests.testapp.models import Book, Document

pytestmark = pytest.mark.usefixtures("users")


def _url(obj, suffix: str = "") -> str:
    return f"/api/{'documents' if isinstance(obj, Document) else 'books'}/{obj.pk}/{suffix}"


def _remaining(expires_at: str) -> float:
    return (parse_datetime(expires_at) - datetime.now(timezone.utc)).total_seconds()


# --- a lease is its user's ----------------------------------------------------------------
@pytest.fixture
def her_lease(users, client_for):
    """A document and the lease the editor took on it through the API."""
    doc = Document.objects.create(body="draft")
    taken = client_for(users.editor).post(_url(doc, "lease/"), {"ttl": 60}, format="json")
    assert taken.status_code == 201
    return doc, taken.json()


def _survives(doc, lease) -> None:
    holder = occupy.holder(doc.occupy_key)
    assert holder is not None and holder.fence == lease["fence"]
    assert parse_owner(holder.owner).user is not None
    assert abs(_remaining(holder.expires_at.isoformat()) - _remaining(lease["expires_at"])) < 5


def test_another_user_cannot_renew_her_lease(users, client_for, her_lease):
    doc, lease = her_lease
    response = client_for(users.other).patch(
        _url(doc, "lease/"), {"ttl": 600}, format="json", HTTP_OCCUPY_LEASE=lease["token"]
    )
    assert response.status_code == 409 and response.json()["code"] == "lease_lost"
    _survives(doc, lease)


def test_another_user_cannot_write_under_her_lease(users, client_for, her_lease):
    doc, lease = her_lease
    response = client_for(users.other).patch(
        _url(doc),
        {"body": "theirs"},
        format="json",
        HTTP_IF_MATCH='"1"',
        HTTP_OCCUPY_LEASE=lease["token"],
    )
    assert response.status_code == 409, response.content
    assert Document.objects.get().body == "draft"
    _survives(doc, lease)


@pytest.mark.parametrize("how", ["delete", "beacon"])
def test_another_user_cannot_release_her_lease(users, client_for, her_lease, how):
    doc, lease = her_lease
    api = client_for(users.other)
    if how == "delete":
        response = api.delete(_url(doc, "lease/"), HTTP_OCCUPY_LEASE=lease["token"])
    else:
        response = api.post(_url(doc, "lease/release/"), {"token": lease["token"]})
    assert response.status_code == 409 and response.json()["code"] == "lease_lost"
    _survives(doc, lease)


def test_a_missing_token_is_asked_for_where_it_goes(users, client_for, her_lease):
    """The header for a renew or a release, the form field for the beacon's release."""
    doc, _lease = her_lease
    api = client_for(users.editor)
    header = api.delete(_url(doc, "lease/"))
    field = api.post(_url(doc, "lease/release/"), {})
    assert (header.status_code, field.status_code) == (428, 428)
    assert header.json()["code"] == field.json()["code"] == "lease_token_required"
    assert header.json()["detail"] == "Send the lease's token in the Occupy-Lease header."
    assert field.json()["detail"] == "Send the lease's token in the 'token' form field."


def test_another_user_cannot_take_her_lease_with_her_token(users, client_for, her_lease):
    doc, lease = her_lease
    api = client_for(users.other)
    took = api.post(
        _url(doc, "lease/takeover/"), {}, format="json", HTTP_OCCUPY_LEASE=lease["token"]
    )
    assert took.status_code == 409 and took.json()["code"] == "lease_lost"
    again = api.post(_url(doc, "lease/"), {}, format="json", HTTP_OCCUPY_LEASE=lease["token"])
    assert again.status_code == 409 and "token" not in again.json()
    _survives(doc, lease)
    # And she still can: her token is hers.
    mine = client_for(users.editor)
    assert (
        mine.patch(
            _url(doc, "lease/"), {}, format="json", HTTP_OCCUPY_LEASE=lease["token"]
        ).status_code
        == 200
    )


def test_a_takeover_names_the_holder_it_replaced(users, client_for, her_lease):
    """Her own lease taken over (no permission needed): ``replaced`` and the log entry
    name the holder the store replaced, with its fence."""
    from django.contrib.admin.models import LogEntry

    doc, lease = her_lease
    took = client_for(users.editor).post(_url(doc, "lease/takeover/"), {}, format="json")
    assert took.status_code == 201
    assert took.json()["replaced"]["owner_display"] == "Editor"
    entry = LogEntry.objects.get()
    assert entry.user_id == users.editor.pk
    assert get_change_message(entry) == (
        f"Took over the edit lease from Editor (fence {lease['fence']})."
    )


def test_a_view_only_user_may_see_who_holds_an_object(users, client_for, her_lease):
    doc, lease = her_lease
    api = client_for(users.viewer)
    looked = api.get(_url(doc, "lease/"))
    assert looked.status_code == 200, looked.content
    assert looked.json()["holder"]["owner_display"] == "Editor"
    assert lease["token"] not in looked.content.decode()
    assert api.post(_url(doc, "lease/"), {}, format="json").status_code == 403


def test_deleting_the_object_under_its_lease_releases_the_lease(users, client_for, her_lease):
    doc, lease = her_lease
    response = client_for(users.editor).delete(
        _url(doc), HTTP_IF_MATCH='"1"', HTTP_OCCUPY_LEASE=lease["token"]
    )
    assert response.status_code == 204, response.content
    assert not Document.objects.exists()
    assert occupy.holder(doc.occupy_key) is None


# --- ttls -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "ttl", [True, False, 1e-300, "nan", "1e-300", "inf", "30s", None, {"s": 1}, 0.5]
)
def test_a_ttl_is_a_number_of_seconds_in_range(users, client_for, ttl):
    book = Book.objects.create(name="Dune")
    body = {} if ttl is None else {"ttl": ttl}
    response = client_for(users.editor).post(_url(book, "lease/"), body, format="json")
    if ttl is None:  # absent: the default
        assert response.status_code == 201
        return
    assert response.status_code == 400, (ttl, response.content)
    assert response.json()["code"] == "invalid_ttl"
    assert occupy.holder(book.occupy_key) is None


def test_a_form_ttl_in_digits_is_a_number(users, client_for):
    book = Book.objects.create(name="Dune")
    response = client_for(users.editor).post(_url(book, "lease/"), {"ttl": "45"})
    assert response.status_code == 201 and response.json()["ttl"] == 45


def test_a_renew_without_ttl_keeps_the_leases_own(users, client_for):
    book = Book.objects.create(name="Dune")
    api = client_for(users.editor)
    lease = api.post(_url(book, "lease/"), {"ttl": 20}, format="json").json()
    time.sleep(1.2)
    renewed = api.patch(_url(book, "lease/"), {}, format="json", HTTP_OCCUPY_LEASE=lease["token"])
    assert renewed.status_code == 200
    assert 18 < _remaining(renewed.json()["expires_at"]) <= 20.5  # 20 s again, not 120
    longer = api.patch(
        _url(book, "lease/"), {"ttl": 90}, format="json", HTTP_OCCUPY_LEASE=lease["token"]
    )
    assert 85 < _remaining(longer.json()["expires_at"]) <= 90.5


def test_a_write_under_a_lease_keeps_it_its_own_length(users, client_for):
    """A write renews the lease by the ttl its client asked for, never by the write
    lock's 30 s: a writer without it is told to retry after seconds, not half a minute."""
    book = Book.objects.create(name="Dune")
    api = client_for(users.editor)
    lease = api.post(_url(book, "lease/"), {"ttl": 3}, format="json").json()
    wrote = api.patch(
        _url(book),
        {"name": "Dune Messiah"},
        format="json",
        HTTP_IF_MATCH='"1"',
        HTTP_OCCUPY_LEASE=lease["token"],
    )
    assert wrote.status_code == 200, wrote.content
    holder = occupy.holder(book.occupy_key)
    assert holder is not None and holder.fence == lease["fence"]
    assert 1 < _remaining(holder.expires_at.isoformat()) <= 3.5  # 3 s again, not 30
    refused = client_for(users.other).patch(
        _url(book), {"name": "x"}, format="json", HTTP_IF_MATCH='"2"'
    )
    assert refused.status_code == 423 and 1 <= int(refused["Retry-After"]) <= 3
    assert refused.json()["holder"]["owner_display"] == "Editor"


@pytest.mark.parametrize(
    ("holder", "detail"),
    [
        ("editor-admin", "You are editing this object in the admin site (an open change page)"),
        ("editor-api", "You hold this object's edit lease already, with another client"),
        ("other-admin", "This object is being edited by Other in the admin site;"),
        ("other-api", "This object is being edited by Other;"),
    ],
)
def test_a_423_says_whose_lease_and_where(users, client_for, holder: str, detail: str):
    """The editor's own change page in the admin holds the object for its whole ttl:
    her API write is told it is hers and where, not that "Editor" edits it."""
    book = Book.objects.create(name="Dune")
    user = users.editor if holder.startswith("editor") else users.other
    owner = (
        admin_owner(user.pk, "0123456789abcdef")
        if holder.endswith("admin")
        else lease_owner(user.pk, ttl=60)
    )
    lease = occupy.acquire(book.occupy_key, owner=owner, ttl=60, reentrant=False)
    response = client_for(users.editor).patch(
        _url(book), {"name": "x"}, format="json", HTTP_IF_MATCH='"1"'
    )
    occupy.release(lease)
    assert response.status_code == 423
    assert response.json()["detail"].startswith(detail), response.json()["detail"]
    assert response.json()["holder"]["owner_display"] == user.get_full_name()


# --- preconditions ------------------------------------------------------------------------
def test_if_match_and_a_body_version_that_disagree_are_400(users, client_for):
    book = Book.objects.create(name="Dune")
    Book.objects.filter(pk=book.pk).update_versioned(status="free")  # version 2
    api = client_for(users.editor)
    for header, version in (('"2"', 1), ('"1"', 2), ('"2", "3"', 1)):
        response = api.patch(
            _url(book), {"name": "x", "version": version}, format="json", HTTP_IF_MATCH=header
        )
        assert response.status_code == 400, (header, version, response.content)
        assert response.json()["code"] == "malformed_precondition"
        assert "version" in response.json()["detail"]
    agree = api.patch(_url(book), {"name": "x", "version": 2}, format="json", HTTP_IF_MATCH='"2"')
    assert agree.status_code == 200
    assert Book.objects.values_list("name", "version").get() == ("x", 3)


def test_a_patch_of_the_values_already_there_changes_nothing(users, client_for):
    book = Book.objects.create(name="Dune", note="n")
    api = client_for(users.editor)
    response = api.patch(
        _url(book), {"name": "Dune", "note": "n"}, format="json", HTTP_IF_MATCH='"1"'
    )
    assert response.status_code == 200 and response["ETag"] == '"1"'
    assert Book.objects.get().version == 1
    Book.objects.filter(pk=book.pk).update_versioned(status="free")  # version 2
    stale = api.patch(_url(book), {"name": "Dune"}, format="json", HTTP_IF_MATCH='"1"')
    assert stale.status_code == 412  # a precondition still holds for a no-op
    plain = client_for(users.editor).patch(
        f"/api/plain-books/{book.pk}/", {"name": "Dune"}, format="json"
    )
    assert plain.status_code == 200 and Book.objects.get().version == 2


# --- write locks are not edit leases --------------------------------------------------------
def test_a_write_waits_for_another_write_in_flight(users, client_for, monkeypatch):
    book = Book.objects.create(name="Dune")
    writing = occupy.acquire(
        book.occupy_key, owner=write_owner(users.other.pk), ttl=30, reentrant=False
    )
    released = release_once_waiting(writing.alias, writing, monkeypatch)
    try:
        response = client_for(users.editor).patch(
            _url(book), {"name": "x"}, format="json", HTTP_IF_MATCH='"1"'
        )
    finally:
        released()  # fails unless the write waited
    assert response.status_code == 200, response.content
    assert Book.objects.get().name == "x"


def test_a_write_held_past_the_wait_is_423_naming_nobody(users, client_for, settings):
    settings.OCCUPY = {**settings.OCCUPY, "REST_FRAMEWORK": {"WRITE_WAIT": 0.2}}
    book = Book.objects.create(name="Dune")
    writing = occupy.acquire(
        book.occupy_key, owner=write_owner(users.other.pk), ttl=30, reentrant=False
    )
    try:
        response = client_for(users.editor).patch(
            _url(book), {"name": "x"}, format="json", HTTP_IF_MATCH='"1"'
        )
    finally:
        occupy.release(writing)
    assert response.status_code == 423
    # About the write wait (whole seconds, at least 1), not the 30 s the lock could last.
    assert response["Retry-After"] == "1"
    body = response.json()
    assert body["holder"] is None and "Other" not in body["detail"]
    assert "edited" not in body["detail"]


def test_an_edit_lease_is_423_at_once_with_its_remaining_time(users, client_for, monkeypatch):
    book = Book.objects.create(name="Dune")
    lease = occupy.acquire(
        book.occupy_key, owner=lease_owner(users.other.pk), ttl=40, reentrant=False
    )
    timeouts = []
    acquire = occupy.acquire

    def recorded(*args, **kwargs):
        timeouts.append(kwargs.get("timeout"))
        return acquire(*args, **kwargs)

    monkeypatch.setattr(occupy, "acquire", recorded)
    # Where the write lock is held by the write's transaction (PostgreSQL).
    from occupy.backends import get_backend

    backend = get_backend("default")
    hold = backend.hold_for_transaction

    def held(*args, **kwargs):
        timeouts.append(kwargs.get("timeout"))
        return hold(*args, **kwargs)

    monkeypatch.setattr(backend, "hold_for_transaction", held)
    response = client_for(users.editor).patch(
        _url(book), {"name": "x"}, format="json", HTTP_IF_MATCH='"1"'
    )
    occupy.release(lease)
    assert response.status_code == 423
    assert response.json()["holder"]["owner_display"] == "Other"
    assert 39 <= int(response["Retry-After"]) <= 40
    assert timeouts == [0]  # an edit lease is not waited for


@pytest.mark.parametrize("value", [-1, "2", True, float("nan"), 600])
def test_write_wait_is_checked(settings, value):
    settings.OCCUPY = {**settings.OCCUPY, "REST_FRAMEWORK": {"WRITE_WAIT": value}}
    from occupy.conf import occupy_settings

    with pytest.raises(ImproperlyConfigured, match="WRITE_WAIT") as raised:
        occupy_settings.REST_FRAMEWORK  # noqa: B018
    assert not isinstance(raised.value, InvalidBackendError)  # no backend is wrong
    assert any("WRITE_WAIT" in m.msg for m in run_checks() if m.id.startswith("occupy."))


@pytest.mark.parametrize("client", ["tab\n2", "\x1b[31mred", "evil\u202etxt", "nel\x85"])
def test_a_client_name_with_control_characters_is_400(users, client_for, client):
    """Before, the lease was taken (201), and with a newline in its owner string its own
    user then got 409 ``lease_lost`` on renew and release."""
    book = Book.objects.create(name="Dune")
    api = client_for(users.editor)
    refused = api.post(_url(book, "lease/"), {"ttl": 60}, format="json", HTTP_OCCUPY_CLIENT=client)
    assert refused.status_code == 400, refused.content
    body = refused.json()
    assert body["code"] == "invalid_client" and "Occupy-Client" in body["detail"]
    assert "control characters" in body["detail"]
    taken = api.post(_url(book, "lease/takeover/"), {}, format="json", HTTP_OCCUPY_CLIENT=client)
    assert taken.status_code == 400 and taken.json()["code"] == "invalid_client"
    assert occupy.holder(book.occupy_key) is None
    # A name without them is kept, and its user renews and releases the lease.
    lease = api.post(
        _url(book, "lease/"), {"ttl": 60}, format="json", HTTP_OCCUPY_CLIENT="tab 2"
    ).json()
    assert parse_owner(occupy.holder(book.occupy_key).owner).client == "tab 2"
    token = lease["token"]
    renewed = api.patch(_url(book, "lease/"), {}, format="json", HTTP_OCCUPY_LEASE=token)
    assert renewed.status_code == 200
    assert api.delete(_url(book, "lease/"), HTTP_OCCUPY_LEASE=token).status_code == 204


@pytest.mark.skipif(
    __import__("django.conf").conf.settings.DEFAULT_DB != "postgresql",
    reason="the write lock is held by the write's transaction on PostgreSQL only",
)
def test_a_write_lock_costs_one_statement_and_no_commit_of_its_own(users, client_for, monkeypatch):
    """On PostgreSQL the write lock is held by the write's own transaction: one query of
    occupy's on the app's connection, none on occupy's own (before: a lease taken and
    released there, two statements and two commits)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from occupy.backends import get_backend

    book = Book.objects.create(name="Dune")
    api = client_for(users.editor)
    backend = get_backend("default")
    own: list[str] = []
    execute = backend.store.execute

    def counted(sql, *args, **kwargs):
        own.append(sql)
        return execute(sql, *args, **kwargs)

    monkeypatch.setattr(backend.store, "execute", counted)
    with CaptureQueriesContext(connection) as app:
        response = api.patch(_url(book), {"name": "x"}, format="json", HTTP_IF_MATCH='"1"')
    assert response.status_code == 200, response.content
    assert own == []
    # One lock statement: the occupy_hold function's call (its migration made it), or
    # the advisory lock's where a database lacks the function.
    locks = [
        q["sql"]
        for q in app.captured_queries
        if q["sql"].startswith("SELECT occupy_hold(") or "advisory_xact_lock" in q["sql"]
    ]
    assert len(locks) == 1, app.captured_queries
    updates = [q["sql"] for q in app.captured_queries if q["sql"].startswith("UPDATE")]
    assert len(updates) == 1
    assert Book.objects.get().name == "x"
