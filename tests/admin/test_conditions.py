"""Every occupy condition in the admin is a sentence on the page, never a 500: the lease
store going down part-way (a private Redis killed), another user replaying a tab's
hidden fields, a refused save said once, a reload of one's own page."""

from __future__ import annotations

import occupy
from occupy.models import object_key
from tests.admin.conftest import LeasePages
from tests.support.redis_server import ALIAS, RedisServer
from tests.support.users import StaffUsers, login
from tests.testapp.models import Document

UNAVAILABLE = (
    "The lock store is unavailable: nothing can be saved now. This page keeps "
    "trying and says when it can."
)


def _holder(doc: Document, alias: str = "default") -> occupy.Holder | None:
    return occupy.holder(object_key(Document, doc.pk), backend=alias)


def test_the_store_going_down_is_a_message_and_keeps_the_typed_text(
    users: StaffUsers, store: RedisServer, doc: Document, pages: LeasePages
) -> None:
    editor = login(users.editor)
    _html, page = pages.open(editor, pages.url(doc))
    assert page["state"] == "editing"
    assert _holder(doc, ALIAS).owner.endswith(page["tab"])
    lease = {"_occupy_tab": page["tab"], "_occupy_lease": page["token"]}
    store.kill()
    response = editor.post(
        pages.url(doc), {**lease, "body": "typed while it was down", "occupy_version": 1}
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert html.count("The lock store is unavailable: nothing was saved, try again") == 1
    assert "typed while it was down</textarea>" in html  # the input is kept, editable
    assert f'name="_occupy_lease" value="{page["token"]}"' in html  # to try again
    doc.refresh_from_db()
    assert (doc.body, doc.version) == ("draft", 1)
    html, other = pages.open(login(users.other), pages.url(doc))
    assert other["state"] == "unavailable"
    assert "The lock store is unavailable, so nobody can edit this object now" in html
    assert 'data-misconfigured=""' in html and "lock settings are wrong" not in html
    assert 'name="body"' not in html and 'name="_save"' not in html  # read-only
    for suffix in ("renew/", "release/"):
        response = editor.post(pages.url(doc, f"occupy/{suffix}"), lease)
        assert response.status_code == 503, suffix
        assert response.json()["message"] == UNAVAILABLE
        assert response.json()["misconfigured"] is False  # the page waits for the store
    assert editor.get(pages.url(doc, "occupy/status/")).status_code == 503
    response = login(users.supervisor).post(
        pages.url(doc, "occupy/takeover/"), {"_occupy_tab": "5" * 16}
    )
    assert response.status_code == 302
    response = editor.get(pages.url(doc, "delete/"))
    assert response.status_code == 200
    response = editor.post(pages.url(doc, "delete/"), {"post": "yes"}, follow=True)
    assert "The lock store is unavailable: nothing was deleted" in response.content.decode()
    assert Document.objects.filter(pk=doc.pk).exists()
    # Back: the lease the page kept was lost with the server; the page says so.
    store.start()
    response = editor.post(
        pages.url(doc), {**lease, "body": "typed while it was down", "occupy_version": 1}
    )
    assert "nothing was saved" in response.content.decode()
    _html, again = pages.open(editor, pages.url(doc))
    assert again["state"] == "editing"
    response = editor.post(
        pages.url(doc),
        {
            "_occupy_tab": again["tab"],
            "_occupy_lease": again["token"],
            "body": "typed while it was down",
            "occupy_version": 1,
        },
    )
    assert response.status_code == 302
    doc.refresh_from_db()
    assert doc.body == "typed while it was down"


def test_another_users_replayed_hidden_fields_get_the_refusal_not_the_lease(
    users: StaffUsers, doc: Document, pages: LeasePages
) -> None:
    """The other user posts the editor's tab and token (change form, renew, release,
    reacquire): refused each time; the editor's lease survives, unrenewed."""
    _html, page = pages.open(login(users.editor), pages.url(doc))
    before = _holder(doc)
    stolen = {"_occupy_tab": page["tab"], "_occupy_lease": page["token"]}
    other = login(users.other)
    response = other.post(pages.url(doc), {**stolen, "body": "not hers", "occupy_version": 1})
    assert response.status_code == 200
    html = response.content.decode()
    assert "Editor is editing this now: nothing was saved" in html
    assert "not hers</textarea>" in html
    renew = other.post(pages.url(doc, "occupy/renew/"), stolen)
    assert renew.status_code == 409 and "tokens" not in renew.json()
    again = other.post(pages.url(doc, "occupy/renew/"), {**stolen, "reacquire": "1"})
    assert again.status_code == 409 and "tokens" not in again.json()
    assert other.post(pages.url(doc, "occupy/release/"), stolen).status_code == 204
    doc.refresh_from_db()
    assert (doc.body, doc.version) == ("draft", 1)
    after = _holder(doc)
    assert after is not None and (after.owner, after.fence) == (before.owner, before.fence)
    assert after.expires_at == before.expires_at  # not renewed by her either


def test_a_refused_save_says_its_sentence_once(
    users: StaffUsers, doc: Document, pages: LeasePages
) -> None:
    editor = login(users.editor)
    _html, page = pages.open(editor, pages.url(doc))
    occupy.takeover(
        object_key(Document, doc.pk),
        reentrant=False,
        owner=f"admin:user:{users.supervisor.pk}:tab:{'6' * 16}",
    )
    response = editor.post(
        pages.url(doc),
        {
            "_occupy_tab": page["tab"],
            "_occupy_lease": page["token"],
            "body": "mine",
            "occupy_version": 1,
        },
    )
    html = response.content.decode()
    assert html.count("Supervisor is editing this now: nothing was saved.") == 1, html
    assert 'data-state="lost"' in html and "deletelink" not in html


def test_reloading_ones_own_page_keeps_it_editable(
    users: StaffUsers, doc: Document, pages: LeasePages
) -> None:
    """The page's address carries its tab (the script puts it there): a reload, whose
    release beacon has not arrived yet, takes the tab's lease over from itself."""
    editor = login(users.editor)
    _html, page = pages.open(editor, pages.url(doc))
    fence = _holder(doc).fence
    _html, reloaded = pages.open(editor, pages.url(doc) + f"?_occupy_tab={page['tab']}")
    assert reloaded["state"] == "editing" and reloaded["tab"] == page["tab"]
    assert _holder(doc).fence > fence
    # The late beacon of the page before the reload frees nothing.
    assert (
        editor.post(
            pages.url(doc, "occupy/release/"),
            {"_occupy_tab": page["tab"], "_occupy_lease": page["token"]},
        ).status_code
        == 204
    )
    assert _holder(doc).owner.endswith(page["tab"])


def test_the_delete_confirmation_names_the_editor_and_a_delete_releases_the_claim(
    users: StaffUsers, doc: Document, pages: LeasePages
) -> None:
    editor = login(users.editor)
    _html, page = pages.open(editor, pages.url(doc))
    html = login(users.other).get(pages.url(doc, "delete/")).content.decode()
    assert "“draft” is being edited by Editor: it is not deleted while they edit" in html
    # The editor deletes from their own page (the beacon of the change form has not
    # arrived): the delete takes the key from the editor's tab and lets it go.
    response = editor.post(pages.url(doc, "delete/"), {"post": "yes"})
    assert response.status_code == 302
    assert not Document.objects.filter(pk=doc.pk).exists()
    assert _holder(doc) is None
    # The late beacon of the deleted object's page answers, and frees nothing else.
    assert (
        editor.post(
            pages.url(doc, "occupy/release/"),
            {"_occupy_tab": page["tab"], "_occupy_lease": page["token"]},
        ).status_code
        == 204
    )


def test_a_takeover_is_decided_on_the_holder_the_store_replaces(
    users: StaffUsers, monkeypatch, doc: Document, pages: LeasePages
) -> None:
    """The other editor (no takeover permission) takes over his own lease; between his
    page's read of the holder (his) and the takeover, he lets it go and the editor
    takes it. The store refuses the takeover of her grant; read again, she is not his:
    403, her lease stays, nothing logged."""
    from django.contrib.admin.models import LogEntry

    from occupy.history import get_change_message

    key = object_key(Document, doc.pk)
    his = occupy.acquire(key, owner=f"admin:user:{users.other.pk}:tab:{'9' * 16}", reentrant=False)
    real_holder = occupy.holder
    hers: list[occupy.Lease] = []

    def holder_then_switch(k: str, *, backend: str = "default") -> occupy.Holder | None:
        found = real_holder(k, backend=backend)
        if k == key and not hers:  # his lease ends, hers begins, after this read
            occupy.release(his)
            hers.append(
                occupy.acquire(
                    key, reentrant=False, owner=f"admin:user:{users.editor.pk}:tab:{'a' * 16}"
                )
            )
        return found

    monkeypatch.setattr(occupy, "holder", holder_then_switch)
    response = login(users.other).post(
        pages.url(doc, "occupy/takeover/"), {"_occupy_tab": "b" * 16}
    )
    assert response.status_code == 403
    holder = real_holder(key)
    assert holder is not None and (holder.owner, holder.fence) == (hers[0].owner, hers[0].fence)
    assert not LogEntry.objects.exists()
    # With the permission, the same race replaces her, logged under her name.
    hers.clear()
    his = occupy.takeover(key, owner=f"admin:user:{users.other.pk}:tab:{'9' * 16}", reentrant=False)
    response = login(users.supervisor).post(
        pages.url(doc, "occupy/takeover/"), {"_occupy_tab": "c" * 16}
    )
    assert response.status_code == 302
    assert real_holder(key).owner.endswith(":tab:" + "c" * 16)
    assert list(map(get_change_message, LogEntry.objects.all())) == [
        f"Took over the edit lease from Editor (fence {hers[0].fence})."
    ]
