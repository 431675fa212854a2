"""The admin in a real browser (headless Chromium through Selenium): seed 000's two tabs,
the read-only form and its banner, the beacon, the heartbeat, takeover, the
back/forward cache, UUID and string primary keys. Each state is photographed under
``tests/.screenshots/``."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from django.contrib.admin.utils import quote

import occupy
from occupy.models import object_key
from tests.support.browser import Browser
from tests.support.users import StaffUsers
from tests.testapp.admin import TTL
from tests.testapp.models import Book, Document, Label, UUIDBook

Make = Callable[..., Browser]


def _change(obj: object) -> str:
    return f"/admin/testapp/{obj._meta.model_name}/{quote(obj.pk)}/change/"


def _holder_owner(obj: object) -> str | None:
    holder = occupy.holder(object_key(type(obj), obj.pk))
    return None if holder is None else holder.owner


def _type(page: Browser, name: str, value: str) -> None:
    field = page.find(f"[name={name}]")
    field.clear()
    field.send_keys(value)


def _save(page: Browser, button: str = "_save") -> None:
    page.find(f"input[name={button}]").click()


@pytest.mark.parametrize("same_user", [True, False], ids=["same-user", "two-users"])
def test_seed_000_two_tabs_nothing_is_reverted(
    users: StaffUsers, browser: Make, same_user: bool
) -> None:
    """Tab B opened first changes only the status after tab A renamed: B meets the
    conflict page with both values, and the rename stands."""
    book = Book.objects.create(name="Dune", status="use")
    tab_b = browser(users.editor)
    if same_user:
        tab_a = tab_b
        first = tab_b.driver.current_window_handle
    tab_b.open(_change(book))
    if same_user:
        tab_b.driver.switch_to.new_window("tab")
    else:
        tab_a = browser(users.other)
    tab_a.open(_change(book))
    _type(tab_a, "name", "Dune Messiah")
    _save(tab_a)
    tab_a.wait(lambda: "was changed successfully" in tab_a.text("ul.messagelist"), what="saved")
    if same_user:
        tab_b.driver.switch_to.window(first)
    _type(tab_b, "status", "free")
    _save(tab_b)
    tab_b.wait(lambda: tab_b.finds("#occupy-conflict"), what="the conflict page")
    assert not tab_b.finds(".occupy-conflict-name")  # tab B never changed the name
    assert tab_b.text(".occupy-conflict-status .mine") == "free"
    assert tab_b.text(".occupy-conflict-status .theirs") == "use"
    if not same_user:
        tab_b.screenshot("conflict-page")
    book.refresh_from_db()
    assert (book.name, book.status) == ("Dune Messiah", "use")
    tab_b.find("#occupy-take-current").click()  # take theirs: the current form
    tab_b.wait(
        lambda: tab_b.find("[name=name]").get_attribute("value") == "Dune Messiah",
        what="the current values",
    )
    _type(tab_b, "status", "free")
    _save(tab_b)
    tab_b.wait(lambda: "was changed successfully" in tab_b.text("ul.messagelist"), what="saved")
    book.refresh_from_db()
    assert (book.name, book.status, book.version) == ("Dune Messiah", "free", 3)


@pytest.mark.parametrize("model", [Label, UUIDBook], ids=["string-pk", "uuid-pk"])
def test_the_others_read_only_until_the_beacon_frees_it(
    users: StaffUsers, browser: Make, model: type
) -> None:
    """Another user sees the read-only form and the banner; when the holder closes its
    tab the beacon frees the lease, and the waiting page turns editable."""
    obj = (
        Label.objects.create(code="shelf/a b_1", text="x")
        if model is Label
        else UUIDBook.objects.create(name="x")
    )
    editor, other = browser(users.editor), browser(users.other)
    editor.open("/admin/")
    home = editor.driver.current_window_handle
    editor.driver.switch_to.new_window("tab")
    editor.open(_change(obj))
    editor.wait(lambda: editor.state() == "editing", what="editing")
    if model is Label:
        editor.screenshot("editing")
    other.open(_change(obj))
    assert other.state() == "readonly"
    banner = other.text(".occupy-message")
    assert banner.startswith("Editor is editing this object since"), banner
    assert not other.finds("input[name=_save]") and not other.finds("[name=_occupy_takeover]")
    if model is Label:
        other.screenshot("read-only-banner")
    closed = time.monotonic()
    editor.driver.close()  # the holder closes its tab: pagehide sends the beacon
    editor.driver.switch_to.window(home)
    other.wait(lambda: other.state() == "editing", timeout=8, what="the page turns editable")
    took = time.monotonic() - closed
    assert took < 5, f"the page turned editable only after {took:.1f}s"
    assert other.finds("input[name=_save]")
    assert _holder_owner(obj).startswith(f"admin:user:{users.other.pk}:tab:")


@pytest.mark.slow
def test_the_heartbeat_keeps_the_lease_past_several_ttls_also_hidden(
    users: StaffUsers, browser: Make
) -> None:
    doc = Document.objects.create(body="draft")
    page = browser(users.editor)
    page.open(_change(doc))
    page.wait(lambda: page.state() == "editing", what="editing")
    owner = _holder_owner(doc)
    fence = occupy.holder(object_key(Document, doc.pk)).fence
    page.driver.execute_script(
        "window.occupyVisibility = [];"
        "document.addEventListener('visibilitychange', function () {"
        "  window.occupyVisibility.push(document.visibilityState); });"
    )
    editing = page.driver.current_window_handle
    page.driver.switch_to.new_window("tab")  # the change form goes to the background
    time.sleep(2.5 * TTL)
    holder = occupy.holder(object_key(Document, doc.pk))
    assert holder is not None and (holder.owner, holder.fence) == (owner, fence)
    page.driver.switch_to.window(editing)
    seen = page.driver.execute_script("return window.occupyVisibility;")
    assert "hidden" in seen, f"the tab was never hidden ({seen})"
    assert page.state() == "editing"
    _type(page, "body", "after a while")
    _save(page)
    page.wait(lambda: "was changed successfully" in page.text("ul.messagelist"), what="saved")
    doc.refresh_from_db()
    assert doc.body == "after a while"


def test_takeover_disables_the_old_tab_and_the_fence_refuses_its_save(
    users: StaffUsers, browser: Make
) -> None:
    doc = Document.objects.create(body="draft")
    editor, supervisor = browser(users.editor), browser(users.supervisor)
    editor.open(_change(doc))
    editor.wait(lambda: editor.state() == "editing", what="editing")
    _type(editor, "body", "the editor's unsaved words")
    supervisor.open(_change(doc))
    button = supervisor.find("[name=_occupy_takeover]")
    assert button.get_attribute("value") == "Take over from Editor"
    button.click()
    supervisor.wait(lambda: supervisor.state() == "editing", what="editing after takeover")
    editor.wait(lambda: editor.state() == "lost", timeout=TTL, what="the lost lease")
    message = editor.text(".occupy-message")
    assert message.startswith("Supervisor is editing this now"), message
    assert not editor.find("input[name=_save]").is_enabled()
    assert editor.find("[name=body]").get_attribute("value") == "the editor's unsaved words"
    editor.screenshot("lease-lost")
    _type(supervisor, "body", "the supervisor's text")
    _save(supervisor)
    supervisor.wait(
        lambda: "was changed successfully" in supervisor.text("ul.messagelist"), what="saved"
    )
    editor.driver.execute_script("document.getElementById('document_form').submit();")
    editor.wait(
        lambda: "nothing was saved" in editor.text("ul.errorlist.nonfield"), what="the refusal"
    )
    assert editor.state() == "lost" and not editor.find("input[name=_save]").is_enabled()
    assert "the editor's unsaved words" in editor.find("[name=body]").get_attribute("value")
    doc.refresh_from_db()
    assert doc.body == "the supervisor's text"
    # The claims list, as an operator sees it at 1280 px: every column on screen.
    lease = occupy.acquire(
        object_key(Document, doc.pk),
        reentrant=False,
        owner=f"admin:user:{users.editor.pk}:tab:0123456789abcdef",
    )
    supervisor.open("/admin/occupy/occupation/")
    link = supervisor.find(f"#result_list a[href$='/testapp/document/{doc.pk}/change/']")
    assert link.text == object_key(Document, doc.pk)
    header, table = supervisor.find("#result_list th.column-until"), supervisor.find(".results")
    assert header.rect["x"] + header.rect["width"] <= table.rect["x"] + table.rect["width"]
    assert supervisor.driver.execute_script(
        "var r = document.querySelector('.results'); return r.scrollWidth <= r.clientWidth;"
    )
    assert "Editor" in supervisor.text("#result_list")
    supervisor.screenshot("occupations")
    occupy.release(lease)


def test_back_forward_takes_the_lease_again_or_shows_read_only(
    users: StaffUsers, browser: Make
) -> None:
    doc = Document.objects.create(body="draft")
    page = browser(users.editor)
    page.open(_change(doc))
    page.wait(lambda: page.state() == "editing", what="editing")
    page.open("/admin/testapp/document/")  # leaving releases (the beacon)
    page.wait(lambda: _holder_owner(doc) is None, timeout=5, what="the release")
    page.driver.back()
    page.wait(lambda: page.state() == "editing", what="editing again")
    page.wait(
        lambda: (_holder_owner(doc) or "").startswith(f"admin:user:{users.editor.pk}:"),
        timeout=5,
        what="the lease taken again",
    )
    page.open("/admin/testapp/document/")
    page.wait(lambda: _holder_owner(doc) is None, timeout=5, what="the release")
    lease = occupy.acquire(
        object_key(Document, doc.pk),
        owner=f"admin:user:{users.other.pk}:tab:0123456789abcdef",
        ttl=TTL * 3,
        reentrant=False,
    )
    page.driver.refresh()
    page.screenshot("changelist-column")
    assert "by Other until" in page.text("#result_list")
    page.driver.back()
    page.wait(lambda: page.state() == "readonly", what="read-only")
    assert page.text(".occupy-message").startswith("Other is editing this object")
    occupy.release(lease)
