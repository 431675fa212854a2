"""The edit lease's conditions in a real browser (headless Chromium): the lock store
killed part-way, a force release and a takeover noticed within seconds (not at the next
renewal), "edit again" keeping the typed text, Delete disabled with the lease lost, a
reload keeping one's own lease, the admin's own buttons. Photographed under
``tests/.screenshots/``."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from django.contrib.admin.utils import quote

import occupy
from occupy.admin.sentences import MISCONFIGURED
from occupy.models import Occupation, object_key
from tests.support.browser import Browser
from tests.support.redis_server import RedisServer
from tests.support.users import StaffUsers
from tests.testapp.admin import DocumentAdmin
from tests.testapp.models import Book, Document

Make = Callable[..., Browser]
#: A lease renewed only every 30 s: what the page notices sooner is not the renewal's.
LONG_TTL = 90
#: The page checks every second (the test admin's ``edit_lease_check``); allow for a
#: loaded machine.
NOTICED_WITHIN = 15
#: How long a page may take to load and answer on a loaded machine.
LOAD = 30


def _change(obj: object) -> str:
    return f"/admin/testapp/{obj._meta.model_name}/{quote(obj.pk)}/change/"


def _type(page: Browser, name: str, value: str) -> None:
    field = page.find(f"[name={name}]")
    field.clear()
    field.send_keys(value)


def _no_server_error(page: Browser) -> None:
    assert "Server Error" not in page.driver.title, page.driver.title
    assert page.finds("#occupy-lease")  # the admin's change form, not a debug page


def test_the_store_killed_part_way(users: StaffUsers, browser: Make, store: RedisServer) -> None:
    doc = Document.objects.create(body="draft")
    editor = browser(users.editor)
    editor.open(_change(doc))
    editor.wait(lambda: editor.state() == "editing", timeout=LOAD, what="editing")
    _type(editor, "body", "typed before the store went down")
    store.kill()
    editor.wait(
        lambda: "lock store is unavailable" in editor.text(".occupy-message"),
        timeout=NOTICED_WITHIN,
        what="the page noticing the store is down",
    )
    editor.find("input[name=_save]").click()
    editor.wait(
        lambda: "nothing was saved" in editor.text("ul.errorlist.nonfield"),
        timeout=LOAD,
        what="the refused save",
    )
    _no_server_error(editor)
    html = editor.driver.page_source
    assert html.count("The lock store is unavailable: nothing was saved, try again") == 1
    assert editor.find("[name=body]").get_attribute("value") == "typed before the store went down"
    assert editor.find("input[name=_save]").is_enabled()  # try again
    editor.screenshot("store-down-save")
    other = browser(users.other)
    other.open(_change(doc))
    _no_server_error(other)
    assert other.state() == "unavailable"
    assert other.text(".occupy-message").startswith(
        "The lock store is unavailable, so nobody can edit this object now"
    )
    assert not other.finds("[name=body]") and not other.finds("input[name=_save]")
    other.screenshot("store-down-read-only")
    store.start()  # back, empty: the waiting page turns editable by itself
    other.wait(
        lambda: other.state() == "editing",
        timeout=LOAD,
        what="the page turning editable when the store is back",
    )
    doc.refresh_from_db()
    assert (doc.body, doc.version) == ("draft", 1)


def test_a_misconfigured_admin_says_so_and_waits_for_nothing(
    users: StaffUsers, browser: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lock settings ``manage.py check`` reports do not pass by themselves: a page
    meeting them says they are wrong, and neither reloads (the object's holder reads
    fine: it is not the store that is away) nor says it edits again."""
    doc = Document.objects.create(body="draft")
    editor = browser(users.editor)
    editor.open(_change(doc))
    editor.wait(lambda: editor.state() == "editing", timeout=LOAD, what="editing")
    monkeypatch.setattr(DocumentAdmin, "edit_lease_ttl", 0)
    other = browser(users.other)
    other.open(_change(doc))
    _no_server_error(other)
    assert other.state() == "unavailable"
    editor.wait(  # its next renewal is refused
        lambda: editor.text(".occupy-message") == str(MISCONFIGURED["now"]),
        timeout=NOTICED_WITHIN,
        what="the editing page meeting the settings",
    )
    for page in (editor, other):
        page.driver.execute_script("window.occupyNotReloaded = true;")
    time.sleep(2 * max(DocumentAdmin.edit_lease_poll, DocumentAdmin.edit_lease_check))
    for page in (editor, other):
        assert page.driver.execute_script("return window.occupyNotReloaded === true;")
        assert page.text(".occupy-message") == str(MISCONFIGURED["now"])
    other.screenshot("misconfigured-read-only")


def test_a_force_release_and_a_takeover_are_noticed_within_seconds(
    users: StaffUsers, browser: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(DocumentAdmin, "edit_lease_ttl", LONG_TTL)
    doc = Document.objects.create(body="draft")
    key = object_key(Document, doc.pk)
    editor = browser(users.editor)
    editor.open(_change(doc))
    editor.wait(lambda: editor.state() == "editing", timeout=LOAD, what="editing")
    _type(editor, "body", "words typed before the release")
    assert editor.find(".deletelink").get_attribute("href")
    Occupation.objects.filter(key=key).delete()  # what OccupationAdmin's force release does
    released = time.monotonic()
    editor.wait(
        lambda: editor.state() == "lost",
        timeout=NOTICED_WITHIN,
        what="the page noticing the force release",
    )
    assert time.monotonic() - released < LONG_TTL / 3  # before the next renewal
    assert editor.text(".occupy-message").startswith("Your edit lease ended")
    assert not editor.find("input[name=_save]").is_enabled()
    delete = editor.find(".deletelink")
    assert delete.get_attribute("href") is None and delete.get_attribute("aria-disabled")
    again = editor.wait(
        lambda: [b for b in editor.finds(".occupy-edit-again") if b.is_displayed()],
        timeout=LOAD,
        what="the offer to edit again",
    )
    editor.screenshot("lease-released-edit-again")
    again[0].click()
    editor.wait(lambda: editor.state() == "editing", timeout=LOAD, what="editing again")
    assert editor.find("[name=body]").get_attribute("value") == "words typed before the release"
    assert editor.find("input[name=_save]").is_enabled()
    assert editor.find(".deletelink").get_attribute("href")
    occupy.takeover(key, owner=f"admin:user:{users.supervisor.pk}:tab:{'8' * 16}", reentrant=False)
    taken = time.monotonic()
    editor.wait(
        lambda: editor.state() == "lost",
        timeout=NOTICED_WITHIN,
        what="the page noticing the takeover",
    )
    assert time.monotonic() - taken < LONG_TTL / 3
    assert editor.text(".occupy-message").startswith("Supervisor is editing this now")
    assert not editor.find("input[name=_save]").is_enabled()
    assert not [b for b in editor.finds(".occupy-edit-again") if b.is_displayed()]
    doc.refresh_from_db()
    assert doc.body == "draft"


def test_a_reload_keeps_ones_own_lease(users: StaffUsers, browser: Make) -> None:
    """The release beacon of the page being reloaded may arrive after the reload's
    request (here: never): the reload still edits, with no read-only moment."""
    doc = Document.objects.create(body="draft")
    page = browser(users.editor)
    page.open(_change(doc))
    page.wait(lambda: page.state() == "editing", timeout=LOAD, what="editing")
    tab = page.find("input[name=_occupy_tab]").get_attribute("value")
    assert f"_occupy_tab={tab}" in page.driver.current_url
    page.driver.execute_script("navigator.sendBeacon = function () { return true; };")
    page.driver.refresh()
    assert page.state() == "editing"  # as rendered, before any script ran again
    assert page.find("input[name=_occupy_tab]").get_attribute("value") == tab
    holder = occupy.holder(object_key(Document, doc.pk))
    assert holder is not None and holder.owner.endswith(f":tab:{tab}")


def test_the_take_over_button(users: StaffUsers, browser: Make) -> None:
    """ "Take over from …" is a Django admin button of a submit row, apart from the
    banner above it."""
    doc = Document.objects.create(body="draft")
    editor, supervisor = browser(users.editor), browser(users.supervisor)
    editor.open(_change(doc))
    editor.wait(lambda: editor.state() == "editing", timeout=LOAD, what="editing")
    supervisor.open(_change(doc))
    button = supervisor.find("[name=_occupy_takeover]")
    assert button.get_attribute("value") == "Take over from Editor"
    row = supervisor.find(".occupy-actions")
    assert "submit-row" in row.get_attribute("class") and row.is_displayed()
    assert button.rect["height"] >= 30  # Django's button, not a bare browser one
    banner = supervisor.find("ul.messagelist")
    assert row.rect["y"] >= banner.rect["y"] + banner.rect["height"] + 5
    supervisor.screenshot("take-over-button")


def test_the_conflict_pages_buttons(users: StaffUsers, browser: Make) -> None:
    """The conflict page's two buttons, side by side with a gap, of one height.

    No edit lease is open meanwhile: on SQLite, a renewal committed between the save's
    read and its write would fail the save with "database is locked" (a read snapshot
    cannot move forward; docs/backends/database.md)."""
    book = Book.objects.create(name="Dune", status="use")
    page = browser(users.supervisor)
    page.open(f"/admin/testapp/book/{book.pk}/change/")
    Book.objects.filter(pk=book.pk).update_versioned(status="lost")
    _type(page, "status", "free")
    page.find("input[name=_save]").click()
    page.wait(lambda: page.finds("#occupy-conflict"), timeout=LOAD, what="the conflict page")
    keep, take = page.find("input[name=_continue]"), page.find("#occupy-take-current")
    assert take.rect["x"] >= keep.rect["x"] + keep.rect["width"] + 5
    assert abs(take.rect["height"] - keep.rect["height"]) <= 2
    page.screenshot("conflict-page-buttons")
