"""VersionedAdminMixin: seed 000's two tabs over plain requests; the stale save is
refused with the conflict page, never saved over the newer row."""

from __future__ import annotations

import re

from django.test import Client

from tests.support.users import StaffUsers, login
from tests.testapp.models import Book


def _form(client: Client, url: str) -> dict[str, str]:
    html = client.get(url).content.decode()
    version = re.search(r'name="occupy_version" value="(\d+)"', html)
    assert version, "the change form carries no version"
    rendered = re.search(r'name="occupy_rendered" value="([^"]*)"', html)
    assert rendered, "the change form carries no snapshot of its values"
    return {
        "name": re.search(r'name="name" value="([^"]*)"', html)[1],
        "status": re.search(r'name="status" value="([^"]*)"', html)[1],
        "note": "",
        "occupy_version": version[1],
        "occupy_rendered": rendered[1],
    }


def test_a_stale_tab_meets_the_conflict_page_and_nothing_is_reverted(users: StaffUsers) -> None:
    book = Book.objects.create(name="Dune", status="use")
    url = f"/admin/testapp/book/{book.pk}/change/"
    tab_b, tab_a = login(users.editor), login(users.other)
    form_b = _form(tab_b, url)  # opened earlier
    form_a = _form(tab_a, url)
    assert tab_a.post(url, {**form_a, "name": "Dune Messiah", "_save": "1"}).status_code == 302
    response = tab_b.post(url, {**form_b, "status": "free", "_save": "1"})
    assert response.status_code == 409
    html = response.content.decode()
    # Only what tab B changed is shown as its own: it never touched the name.
    assert re.search(r'class="mine">free</td><td class="theirs">use</td>', html)
    assert "occupy-conflict-name" not in html
    book.refresh_from_db()
    assert (book.name, book.status, book.version) == ("Dune Messiah", "use", 2)
    # Keep mine: tab B's change on the current version; the rename it never made stands.
    keep = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', html))
    assert keep["occupy_version"] == "2" and keep["name"] == "Dune Messiah"
    assert tab_b.post(url, {**keep, "_continue": "1"}).status_code == 302
    book.refresh_from_db()
    assert (book.name, book.status, book.version) == ("Dune Messiah", "free", 3)


def test_a_field_both_tabs_changed_is_shown_and_keep_mine_writes_it(users: StaffUsers) -> None:
    book = Book.objects.create(name="Dune", status="use")
    url = f"/admin/testapp/book/{book.pk}/change/"
    tab_b, tab_a = login(users.editor), login(users.other)
    form_b = _form(tab_b, url)
    form_a = _form(tab_a, url)
    assert tab_a.post(url, {**form_a, "name": "Dune Messiah", "_save": "1"}).status_code == 302
    html = tab_b.post(url, {**form_b, "name": "Children of Dune", "_save": "1"}).content.decode()
    assert re.search(
        r'class="mine">Children of Dune</td><td class="theirs">Dune Messiah</td>', html
    )
    keep = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', html))
    assert tab_b.post(url, {**keep, "_continue": "1"}).status_code == 302
    book.refresh_from_db()
    assert (book.name, book.version) == ("Children of Dune", 3)


def test_a_form_without_its_version_is_refused(users: StaffUsers) -> None:
    book = Book.objects.create(name="Dune", status="use")
    url = f"/admin/testapp/book/{book.pk}/change/"
    response = login(users.editor).post(url, {"name": "X", "status": "use", "note": ""})
    assert response.status_code == 200
    assert "This form carries no version" in response.content.decode()
    book.refresh_from_db()
    assert book.name == "Dune"


def test_adding_needs_no_version(users: StaffUsers) -> None:
    response = login(users.editor).post(
        "/admin/testapp/book/add/", {"name": "New", "status": "use", "note": ""}
    )
    assert response.status_code == 302
    assert Book.objects.get().version == 1


def test_control_django_admin_alone_silently_reverts_the_rename(users: StaffUsers) -> None:
    """The issue's report, reproduced with Django's own ModelAdmin: both saves succeed
    and tab B, opened before tab A's rename, writes the old name back."""
    book = Book.objects.create(name="Dune", status="use")
    url = f"/plain-admin/testapp/book/{book.pk}/change/"
    tab_b, tab_a = login(users.editor), login(users.other)
    shown_to_b = {"name": "Dune", "status": "use", "note": "", "tags": "[]"}
    assert tab_b.get(url).status_code == 200
    assert tab_a.post(url, {**shown_to_b, "name": "Dune Messiah"}).status_code == 302
    assert tab_b.post(url, {**shown_to_b, "status": "free"}).status_code == 302
    book.refresh_from_db()
    assert (book.name, book.status) == ("Dune", "free")  # tab A's rename is lost


def _inputs(html: str) -> dict[str, str]:
    """Return the page's text and hidden inputs, by name."""
    return dict(re.findall(r'<input type="(?:hidden|text)" name="([^"]+)" value="([^"]*)"', html))


def test_inline_rows_carry_their_own_versions(users: StaffUsers) -> None:
    from tests.testapp.models import Chapter, UUIDBook

    book = UUIDBook.objects.create(name="Dune")
    chapter = Chapter.objects.create(book=book, title="Arrakis")
    url = f"/admin/testapp/uuidbook/{book.pk}/change/"
    client = login(users.editor)
    page = client.get(url).content.decode()
    form = _inputs(page)
    assert form["chapters-0-occupy_version"] == "1" and form["occupy_version"] == "1"
    Chapter.objects.filter(pk=chapter.pk).update_versioned(title="Arrakis, by a script")
    response = client.post(url, {**form, "chapters-0-title": "Dune planet", "_save": "1"})
    assert response.status_code == 409
    html = response.content.decode()
    assert "What changed is the chapter “Arrakis, by a script”" in html
    assert 'class="mine">Dune planet</td><td class="theirs">Arrakis, by a script</td>' in html
    chapter.refresh_from_db()
    assert chapter.title == "Arrakis, by a script"
    keep = _inputs(html)
    assert keep["chapters-0-occupy_version"] == "2" and keep["occupy_version"] == "1"
    assert client.post(url, {**keep, "_continue": "1"}).status_code == 302
    chapter.refresh_from_db()
    assert (chapter.title, chapter.version) == ("Dune planet", 3)


def test_list_editable_rows_carry_versions(users: StaffUsers) -> None:
    first, second = Book.objects.create(name="A"), Book.objects.create(name="B")
    client = login(users.editor)
    page = client.get("/admin/testapp/book/?o=1").content.decode()
    listed = _inputs(page)
    rows = {listed[f"form-{i}-id"]: i for i in range(2)}
    assert {listed[f"form-{i}-occupy_version"] for i in range(2)} == {"1"}
    Book.objects.filter(pk=second.pk).update_versioned(note="someone")  # an untouched row
    i = rows[str(first.pk)]
    data = {**listed, f"form-{i}-status": "free", "_save": "Save"}
    for n in range(2):
        data.setdefault(f"form-{n}-status", "use")
    assert client.post("/admin/testapp/book/?o=1", data).status_code == 302
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.status, first.version, second.version) == ("free", 2, 2)
    Book.objects.filter(pk=first.pk).update_versioned(status="lost")  # the row edited
    response = client.post(
        "/admin/testapp/book/?o=1",
        {**data, f"form-{i}-status": "use", f"form-{i}-occupy_version": "2"},
        follow=True,
    )
    assert "changed since this list was loaded" in response.content.decode()
    first.refresh_from_db()
    assert first.status == "lost"


def test_admin_actions_go_through_update_versioned(users: StaffUsers) -> None:
    book = Book.objects.create(name="Dune", status="use")
    url = f"/admin/testapp/book/{book.pk}/change/"
    client = login(users.editor)
    html = client.get(url).content.decode()
    stale = {**_inputs(html), "note": "", "name": "Dune 2"}
    client.post("/admin/testapp/book/", {"action": "mark_free", "_selected_action": [book.pk]})
    book.refresh_from_db()
    assert (book.status, book.version) == ("free", 2)
    assert client.post(url, {**stale, "_save": "1"}).status_code == 409
    book.refresh_from_db()
    assert (book.name, book.status) == ("Dune", "free")
