"""EditLeaseAdminMixin over plain requests: who gets the editable form, the lease
endpoints' permissions and answers, fenced saves, the admin log of a takeover."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.models import LogEntry

import occupy
from occupy.history import get_change_message
from occupy.models import object_key
from tests.admin.conftest import LeasePages
from tests.support.users import StaffUsers, login
from tests.support.waiting import wait_until
from tests.testapp.models import Document, Label, Shelf, UUIDBook


def test_the_first_opener_edits_and_the_second_reads_only(
    users: StaffUsers, doc: Document, pages: LeasePages
) -> None:
    html, editor = pages.open(login(users.editor), pages.url(doc))
    assert editor["state"] == "editing" and editor["token"]
    assert 'name="body"' in html and 'name="occupy_version"' in html
    holder = occupy.holder(object_key(Document, doc.pk))
    assert holder.owner == f"admin:user:{users.editor.pk}:tab:{editor['tab']}"
    html, other = pages.open(login(users.other), pages.url(doc))
    assert other["state"] == "readonly" and not other["token"]
    assert "Editor is editing this object since" in html
    assert 'name="body"' not in html and 'name="_save"' not in html
    assert "Take over" not in html  # no permission, no button


def test_a_save_without_the_lease_is_refused_and_keeps_the_input(
    users: StaffUsers, doc: Document, pages: LeasePages
) -> None:
    pages.open(login(users.editor), pages.url(doc))
    other = login(users.other)
    response = other.post(
        pages.url(doc),
        {"body": "mine", "occupy_version": 1, "_occupy_tab": "0" * 16, "_occupy_lease": "ab" * 16},
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert "Editor is editing this now: nothing was saved" in html
    assert "mine</textarea>" in html  # the user's input is kept
    doc.refresh_from_db()
    assert doc.body == "draft"


def test_the_save_goes_through_the_lease_and_frees_it(
    users: StaffUsers, doc: Document, pages: LeasePages
) -> None:
    client = login(users.editor)
    _html, page = pages.open(client, pages.url(doc))
    response = client.post(
        pages.url(doc),
        {
            "body": "final",
            "occupy_version": 1,
            "_occupy_tab": page["tab"],
            "_occupy_lease": page["token"],
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    doc.refresh_from_db()
    assert doc.body == "final" and doc.version == 2 and doc.fence > 0
    assert occupy.holder(object_key(Document, doc.pk)) is None


def test_a_taken_over_tab_cannot_save(users: StaffUsers, doc: Document, pages: LeasePages) -> None:
    editor = login(users.editor)
    _html, old = pages.open(editor, pages.url(doc))
    supervisor = login(users.supervisor)
    html, _page_state = pages.open(supervisor, pages.url(doc))
    assert "Take over from Editor" in html
    response = supervisor.post(pages.url(doc, "occupy/takeover/"), {"_occupy_tab": "1" * 16})
    assert response.status_code == 302
    assert response["Location"].endswith("?_occupy_tab=" + "1" * 16)
    html, new = pages.open(supervisor, response["Location"])
    assert new["state"] == "editing"
    entry = LogEntry.objects.get(object_id=str(doc.pk))
    assert get_change_message(entry).startswith("Took over the edit lease from Editor (fence")
    response = editor.post(
        pages.url(doc),
        {
            "body": "stale",
            "occupy_version": 1,
            "_occupy_tab": old["tab"],
            "_occupy_lease": old["token"],
        },
    )
    assert "Supervisor is editing this now" in response.content.decode()
    doc.refresh_from_db()
    assert doc.body == "draft"


def test_takeover_needs_the_permission(users: StaffUsers, doc: Document, pages: LeasePages) -> None:
    pages.open(login(users.editor), pages.url(doc))
    response = login(users.other).post(
        pages.url(doc, "occupy/takeover/"), {"_occupy_tab": "2" * 16}
    )
    assert response.status_code == 403
    assert occupy.holder(object_key(Document, doc.pk)).owner.startswith(
        f"admin:user:{users.editor.pk}:"
    )


def test_the_endpoints_answer_404_without_the_change_permission(
    users: StaffUsers, doc: Document, pages: LeasePages
) -> None:
    from django.contrib.auth.models import Permission, User

    viewer = User.objects.create_user("viewer", is_staff=True)
    viewer.user_permissions.set(Permission.objects.filter(codename="view_document"))
    client = login(viewer)
    for suffix, method in (
        ("renew/", "post"),
        ("release/", "post"),
        ("takeover/", "post"),
        ("status/", "get"),
    ):
        response = getattr(client, method)(
            pages.url(doc, f"occupy/{suffix}"), {"_occupy_tab": "3" * 16}
        )
        assert response.status_code == 404, suffix


def test_renew_release_and_status(users: StaffUsers, doc: Document, pages: LeasePages) -> None:
    client = login(users.editor)
    _html, page = pages.open(client, pages.url(doc))
    body = {"_occupy_tab": page["tab"], "_occupy_lease": page["token"]}
    response = client.post(pages.url(doc, "occupy/renew/"), body)
    assert response.status_code == 200 and response.json()["tokens"] == [page["token"]]
    status = login(users.other).get(pages.url(doc, "occupy/status/")).json()
    assert status["holder"] == "Editor" and status["free"] is False
    assert client.post(pages.url(doc, "occupy/release/"), body).status_code == 204
    assert client.get(pages.url(doc, "occupy/status/")).json() == {"free": True, "mine": False}
    response = client.post(pages.url(doc, "occupy/renew/"), body)
    assert response.status_code == 409 and response.json()["lost"] is True
    again = client.post(pages.url(doc, "occupy/renew/"), {**body, "reacquire": "1"}).json()
    assert again["tokens"] and again["tokens"] != [page["token"]]


@pytest.mark.parametrize(
    "make",
    [
        lambda: UUIDBook.objects.create(name="uuid"),
        lambda: Label.objects.create(code="a/b_c 1", text="string"),
        lambda: Shelf.objects.create(code="x_y/2", name="shelf"),
    ],
    ids=["uuid", "label", "shelf"],
)
def test_uuid_and_string_primary_keys(users: StaffUsers, make, pages: LeasePages) -> None:
    obj = make()
    client = login(users.editor)
    _html, page = pages.open(client, pages.url(obj))
    assert page["state"] == "editing"
    data = {"_occupy_tab": page["tab"], "_occupy_lease": page["token"]}
    assert client.post(pages.url(obj, "occupy/renew/"), data).status_code == 200
    assert login(users.other).get(pages.url(obj, "occupy/status/")).json()["holder"] == "Editor"
    assert client.post(pages.url(obj, "occupy/release/"), data).status_code == 204
    assert occupy.holder(object_key(type(obj), obj.pk)) is None


def test_the_fence_refuses_a_save_whose_lease_check_passed_before_a_takeover(
    users: StaffUsers, monkeypatch: pytest.MonkeyPatch, doc: Document, pages: LeasePages
) -> None:
    """The tab's lease is checked, then (a pause) taken over and the new editor saves:
    the old tab's UPDATE compares the fence and writes nothing."""
    from occupy.admin.leases import EditLeaseAdminMixin

    editor = login(users.editor)
    _html, old = pages.open(editor, pages.url(doc))
    stale = occupy.resume(object_key(Document, doc.pk), old["token"])
    supervisor = login(users.supervisor)
    location = supervisor.post(pages.url(doc, "occupy/takeover/"), {"_occupy_tab": "4" * 16})
    _html, new = pages.open(supervisor, location["Location"])
    assert (
        supervisor.post(
            pages.url(doc),
            {
                "body": "new editor",
                "occupy_version": 1,
                "_occupy_tab": new["tab"],
                "_occupy_lease": new["token"],
            },
        ).status_code
        == 302
    )
    monkeypatch.setattr(
        EditLeaseAdminMixin, "_resume", lambda self, request, state, tokens: [stale]
    )
    response = editor.post(
        pages.url(doc),
        {
            "body": "stale",
            "occupy_version": 2,
            "_occupy_tab": old["tab"],
            "_occupy_lease": old["token"],
        },
    )
    assert response.status_code == 200
    assert "nothing was saved" in response.content.decode()
    doc.refresh_from_db()
    assert doc.body == "new editor"


def test_related_keys_are_taken_all_or_nothing(
    users: StaffUsers, monkeypatch: pytest.MonkeyPatch, doc: Document, pages: LeasePages
) -> None:
    """get_occupy_keys() adds related objects: held elsewhere, the page is read-only
    and none of the keys is kept; free, the tab holds them all and renews them all."""
    from django.contrib import admin

    related = "testapp.chapter:7"
    model_admin = admin.site._registry[Document]
    monkeypatch.setattr(
        type(model_admin),
        "get_occupy_keys",
        lambda self, request, obj: [self.get_occupy_key(obj), related],
        raising=False,
    )
    elsewhere = occupy.acquire(related, owner="someone", reentrant=False)
    html, page = pages.open(login(users.editor), pages.url(doc))
    assert page["state"] == "readonly"
    assert occupy.holder(object_key(Document, doc.pk)) is None  # nothing kept
    occupy.release(elsewhere)
    client = login(users.editor)
    html, page = pages.open(client, pages.url(doc))
    tokens = re.findall(r'name="_occupy_lease" value="([0-9a-f]+)"', html)
    assert page["state"] == "editing" and len(tokens) == 2
    assert occupy.holder(related).owner == occupy.holder(object_key(Document, doc.pk)).owner
    body = {"_occupy_tab": page["tab"], "_occupy_lease": tokens}
    assert client.post(pages.url(doc, "occupy/renew/"), body).json()["tokens"] == tokens
    response = client.post(pages.url(doc), {**body, "body": "both", "occupy_version": 1})
    assert response.status_code == 302
    assert occupy.holder(related) is None  # saved: the tab let both go


def test_the_conflict_page_keeps_the_lease_and_keep_mine_saves(
    users: StaffUsers, doc: Document, pages: LeasePages
) -> None:
    client = login(users.editor)
    _html, page = pages.open(client, pages.url(doc))
    Document.objects.filter(pk=doc.pk).update_versioned(body="a script wrote")
    lease = {"_occupy_tab": page["tab"], "_occupy_lease": page["token"]}
    response = client.post(pages.url(doc), {**lease, "body": "mine", "occupy_version": 1})
    assert response.status_code == 409
    html = response.content.decode()
    assert 'class="mine">mine</td><td class="theirs">a script wrote</td>' in html
    assert f'name="_occupy_lease" value="{page["token"]}"' in html  # still this tab's
    assert occupy.holder(object_key(Document, doc.pk)).owner.endswith(page["tab"])
    keep = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', html))
    assert client.post(pages.url(doc), {**keep, "_continue": "1"}).status_code == 302
    doc.refresh_from_db()
    assert (doc.body, doc.version) == ("mine", 3)


def test_delete_is_refused_while_someone_edits(
    users: StaffUsers, doc: Document, pages: LeasePages
) -> None:
    _html, page = pages.open(login(users.editor), pages.url(doc))
    other = login(users.other)
    html, _state = pages.open(other, pages.url(doc))
    assert "deletelink" not in html  # no Delete button on the read-only form
    response = other.post(pages.url(doc, "delete/"), {"post": "yes"})
    assert response.status_code == 302
    assert Document.objects.filter(pk=doc.pk).exists()
    login(users.editor).post(
        pages.url(doc, "occupy/release/"),
        {"_occupy_tab": page["tab"], "_occupy_lease": page["token"]},
    )
    assert other.post(pages.url(doc, "delete/"), {"post": "yes"}).status_code == 302
    assert not Document.objects.filter(pk=doc.pk).exists()


def test_versioned_admin_on_a_model_without_version_fails_the_check() -> None:
    from django.contrib import admin

    from occupy.admin import VersionedAdminMixin

    class ShelfVersions(VersionedAdminMixin, admin.ModelAdmin):
        pass

    errors = ShelfVersions(Shelf, admin.AdminSite()).check()
    assert [e.id for e in errors] == ["occupy.E101"]


def test_the_same_users_other_tab_may_edit_here_instead(
    users: StaffUsers, doc: Document, pages: LeasePages
) -> None:
    client = login(users.editor)
    _html, first = pages.open(client, pages.url(doc))
    html, second = pages.open(client, pages.url(doc))
    assert second["state"] == "readonly" and "Edit here instead" in html
    response = client.post(pages.url(doc, "occupy/takeover/"), {"_occupy_tab": second["tab"]})
    _html, second = pages.open(client, response["Location"])
    assert second["state"] == "editing"
    assert not LogEntry.objects.exists()  # one's own lease: nothing to log
    lost = client.post(
        pages.url(doc, "occupy/renew/"),
        {"_occupy_tab": first["tab"], "_occupy_lease": first["token"]},
    )
    assert lost.status_code == 409
    assert lost.json()["message"].startswith(
        "You are editing this in another tab. Your changes are still in this form"
    )


@pytest.mark.skipif(
    __import__("django.conf").conf.settings.DEFAULT_DB != "postgresql",
    reason="the save's transaction holds the key on PostgreSQL only",
)
def test_a_takeover_asked_during_a_save_is_granted_after_its_commit(
    users: StaffUsers, monkeypatch: pytest.MonkeyPatch, doc: Document, pages: LeasePages
) -> None:
    """On PostgreSQL the save's own transaction holds the key while the tab's lease is
    checked, up to its commit: a takeover asked between the check and the commit is
    granted after the commit (before, the check was a read on occupy's connection, and
    the takeover went through before the save committed)."""
    import threading

    from django.db import connections

    from occupy.admin.leases import EditLeaseAdminMixin

    key = object_key(Document, doc.pk)
    saved = EditLeaseAdminMixin.save_related
    seen: dict[str, str] = {}
    threads: list[threading.Thread] = []

    def take_over() -> None:
        occupy.takeover(key, owner="supervisor", ttl=30)
        # Granted after the save's COMMIT, the takeover's thread (its own connection, in
        # READ COMMITTED) sees the saved row; granted before it, the old one.
        seen["body"] = Document.objects.get(pk=doc.pk).body
        connections.close_all()

    def takeover_waits() -> bool:
        """Whether a session waits for an advisory lock on the test database (the key's,
        held by this save's transaction); read on the save's own connection."""
        with connections["default"].cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            )
            return cursor.fetchone()[0] > 0

    def save_related(self, request, form, formsets, change):  # type: ignore[no-untyped-def]
        saved(self, request, form, formsets, change)
        threads.append(threading.Thread(target=take_over))
        threads[0].start()
        # Commit only once the takeover has been asked: it waits for this transaction (or,
        # granted at once, has read the row already, which the assertions below catch).
        wait_until(
            lambda: "body" in seen or takeover_waits(),
            what="the takeover to wait for the save's transaction",
        )

    monkeypatch.setattr(EditLeaseAdminMixin, "save_related", save_related)
    editor = login(users.editor)
    _html, page = pages.open(editor, pages.url(doc))
    response = editor.post(
        pages.url(doc),
        {
            "body": "saved",
            "occupy_version": 1,
            "_occupy_tab": page["tab"],
            "_occupy_lease": page["token"],
        },
    )
    threads[0].join()
    assert response.status_code == 302
    assert seen["body"] == "saved"


@pytest.mark.skipif(
    __import__("django.conf").conf.settings.DEFAULT_DB != "sqlite",
    reason="SQLite's one write lock per file",
)
def test_another_tabs_renewal_between_the_saves_read_and_write_is_no_500(
    users: StaffUsers, monkeypatch: pytest.MonkeyPatch, doc: Document, pages: LeasePages
) -> None:
    """Two tabs on a SQLite file (WAL): the save's transaction reads the object, then
    the other tab renews its lease (a commit on another connection, through the renew
    endpoint, from another thread), then the save writes. SQLite refuses the write of a
    transaction whose snapshot is older than the last commit ("database is locked", at
    once, whatever the busy timeout): the change view, fully rolled back, is run again
    once, and the save goes through instead of answering 500."""
    import threading

    from django.db import connections

    from occupy.admin.leases import EditLeaseAdminMixin

    other_doc = Document.objects.create(body="other")
    editor, other_tab = login(users.editor), login(users.editor)
    _html, page = pages.open(editor, pages.url(doc))
    _html, other = pages.open(other_tab, pages.url(other_doc))
    saved = EditLeaseAdminMixin.save_model
    renewals: list[int] = []

    def renew_in_another_tab() -> None:
        try:
            body = {"_occupy_tab": other["tab"], "_occupy_lease": other["token"]}
            renewals.append(other_tab.post(pages.url(other_doc, "occupy/renew/"), body).status_code)
        finally:
            connections.close_all()

    def save_model(self, request, obj, form, change):  # type: ignore[no-untyped-def]
        if not renewals:  # the first run of the save only
            thread = threading.Thread(target=renew_in_another_tab)
            thread.start()
            thread.join()
        saved(self, request, obj, form, change)

    monkeypatch.setattr(EditLeaseAdminMixin, "save_model", save_model)
    response = editor.post(
        pages.url(doc),
        {
            "body": "saved",
            "occupy_version": 1,
            "_occupy_tab": page["tab"],
            "_occupy_lease": page["token"],
        },
    )
    assert renewals == [200]
    assert response.status_code == 302, response.content.decode()[:500]
    doc.refresh_from_db()
    assert doc.body == "saved" and doc.version == 2
