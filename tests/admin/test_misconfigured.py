"""Every attribute occupy reads on a model admin is checked by ``manage.py check``, with
an id and a hint; a page that meets a misconfigured one is read-only and says the
admin's lock settings are wrong, not that the store is down and will be back (or falls
back, for the script's intervals), never a server error."""

from __future__ import annotations

from html import unescape
from typing import Any

import pytest
from django.contrib import admin

from occupy.admin import EditLeaseAdminMixin, OccupyStatusAdminMixin
from occupy.admin.sentences import KEPT, MISCONFIGURED
from tests.admin.conftest import LeasePages
from tests.support.users import StaffUsers, login
from tests.testapp.admin import DocumentAdmin
from tests.testapp.models import Document


def _occupy_messages(model_admin: Any) -> list[Any]:
    return [m for m in model_admin.check() if m.id.startswith("occupy.")]


@pytest.mark.parametrize(
    ("attribute", "value", "check_id", "state"),
    [
        ("edit_lease_ttl", 0, "occupy.E304", "unavailable"),
        ("edit_lease_ttl", -30, "occupy.E304", "unavailable"),
        ("edit_lease_ttl", "120", "occupy.E304", "unavailable"),
        ("edit_lease_poll", "2", "occupy.E304", "editing"),
        ("edit_lease_check", -1, "occupy.E304", "editing"),
        ("occupy_backend", "nope", "occupy.E102", "unavailable"),
    ],
)
def test_a_misconfigured_admin_is_reported_and_no_page_answers_500(
    users: StaffUsers,
    doc: Document,
    pages: LeasePages,
    monkeypatch: pytest.MonkeyPatch,
    attribute: str,
    value: Any,
    check_id: str,
    state: str,
) -> None:
    model_admin = admin.site._registry[Document]
    monkeypatch.setattr(model_admin, attribute, value)
    found = _occupy_messages(model_admin)
    assert [m.id for m in found] == [check_id], found
    assert found[0].msg.startswith(f"DocumentAdmin.{attribute} "), found[0].msg
    assert found[0].obj is DocumentAdmin and attribute in found[0].hint
    client = login(users.editor)
    html, page = pages.open(client, pages.url(doc))  # a 200
    assert page["state"] == state, page
    if state == "unavailable":
        assert not page["token"] and 'name="_save"' not in html
        assert str(MISCONFIGURED["now"]) in unescape(html)
        assert 'data-misconfigured="1"' in html  # the script waits for nothing
        assert "lock store is unavailable" not in html.split('class="occupy-texts"')[0]
    else:
        assert 'data-misconfigured=""' in html
    tab = {"_occupy_tab": page["tab"], "_occupy_lease": page["token"] or "ab" * 16}
    answers = {
        "save": client.post(pages.url(doc), {"body": "x", "occupy_version": 1, **tab}),
        "status": client.get(pages.url(doc, "occupy/status/"), {"_occupy_tab": page["tab"]}),
        "renew": client.post(pages.url(doc, "occupy/renew/"), {**tab, "reacquire": "1"}),
        "takeover": client.post(pages.url(doc, "occupy/takeover/"), tab, follow=True),
        "list": client.get("/admin/testapp/document/"),
        "delete page": client.get(pages.url(doc, "delete/")),
        "release": client.post(pages.url(doc, "occupy/release/"), tab),
        "delete": client.post(pages.url(doc, "delete/"), {"post": "yes"}, follow=True),
    }
    statuses = {what: a.status_code for what, a in answers.items()}
    assert {what: s for what, s in statuses.items() if s >= 500 and s != 503} == {}, statuses
    if state == "unavailable":
        assert statuses["renew"] == 503, statuses  # the script is told which it is
        assert answers["renew"].json() == {
            "unavailable": True,
            "misconfigured": True,
            "message": str(MISCONFIGURED["now"]),
        }
        said = {w: unescape(a.content.decode()) for w, a in answers.items() if w != "renew"}
        assert said["save"].count(f"{MISCONFIGURED['save']} {KEPT}") == 1
        assert str(MISCONFIGURED["takeover"]) in said["takeover"]
        assert str(MISCONFIGURED["delete"]) in said["delete"]
        if attribute == "occupy_backend":  # the "being edited" column's store
            assert str(MISCONFIGURED["list"]) in said["list"]
        for what, text in said.items():
            assert "lock store is unavailable" not in text.split('class="occupy-texts"')[0], what
        assert Document.objects.get().body == "draft"  # nothing saved, nothing deleted


def test_an_edit_lease_admin_alone_names_an_unconfigured_backend() -> None:
    """E102 is every occupy admin mixin's, said once even with both on one admin."""

    class Leases(EditLeaseAdminMixin, admin.ModelAdmin):
        occupy_backend = "nope"

    class Both(EditLeaseAdminMixin, OccupyStatusAdminMixin, admin.ModelAdmin):
        occupy_backend = "nope"

    for cls in (Leases, Both):
        found = _occupy_messages(cls(Document, admin.AdminSite()))
        assert [m.id for m in found] == ["occupy.E102"], found
        assert found[0].msg.startswith(f"{cls.__name__}.occupy_backend is 'nope', which")


def test_an_admin_on_another_store_than_its_model_is_w303(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class OnFiles(EditLeaseAdminMixin, admin.ModelAdmin):
        occupy_backend = "files"

    class Follows(EditLeaseAdminMixin, admin.ModelAdmin):
        pass

    found = _occupy_messages(OnFiles(Document, admin.AdminSite()))
    assert [m.id for m in found] == ["occupy.W303"], found
    assert "testapp.Document's objects are locked in 'default'" in found[0].msg
    assert "Remove occupy_backend from OnFiles" in found[0].hint
    assert _occupy_messages(Follows(Document, admin.AdminSite())) == []
    monkeypatch.setattr(Document, "occupy_backend", "files")
    assert _occupy_messages(OnFiles(Document, admin.AdminSite())) == []
    assert Follows(Document, admin.AdminSite()).get_occupy_backend() == "files"
