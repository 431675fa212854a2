"""The changelist respects a live edit lease as the change form does: ``list_editable``
rows and admin actions (``delete_selected`` included) touching an object a tab edits are
refused with a message naming the editor, nothing written; free, they go through and
leave no claim behind."""

from __future__ import annotations

import re

import occupy
from occupy.admin.editing import STORE_UNAVAILABLE
from occupy.models import object_key
from tests.support.users import StaffUsers, login
from tests.testapp.models import Label

LIST = "/admin/testapp/label/?o=1"


def _inputs(html: str) -> dict[str, str]:
    return dict(re.findall(r'<input type="(?:hidden|text)" name="([^"]+)" value="([^"]*)"', html))


def _edit(users: StaffUsers, label: Label) -> occupy.Lease:
    """The editor's tab holds ``label`` (as opening its change form does)."""
    return occupy.acquire(
        object_key(Label, label.pk),
        reentrant=False,
        ttl=60,
        owner=f"admin:user:{users.editor.pk}:tab:{'7' * 16}",
    )


def test_list_editable_is_refused_while_a_row_is_edited(users: StaffUsers) -> None:
    first, second = (
        Label.objects.create(code="a", text="A"),
        Label.objects.create(code="b", text="B"),
    )
    lease = _edit(users, second)
    client = login(users.other)
    listed = _inputs(client.get(LIST).content.decode())
    data = {**listed, "form-0-text": "A2", "form-1-text": "B2", "_save": "Save"}
    response = client.post(LIST, data, follow=True)
    html = response.content.decode()
    assert "Nothing was saved: “b” is being edited by Editor" in html, html
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.text, second.text) == ("A", "B")  # one transaction: neither row
    assert occupy.holder(object_key(Label, first.pk)) is None  # the refused write let go
    holder = occupy.holder(object_key(Label, second.pk))
    assert holder is not None and holder.fence == lease.fence
    occupy.release(lease)
    for _ in range(3):
        listed = _inputs(client.get(LIST).content.decode())
        data = {**listed, "form-0-text": "A2", "form-1-text": "B2", "_save": "Save"}
        html = client.post(LIST, data, follow=True).content.decode()
        # A statement stalled past its bound on a loaded machine says so, and nothing
        # is written: the same request, sent again, must then go through.
        if str(STORE_UNAVAILABLE) not in html:
            break
    assert "Nothing was saved" not in html, html
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.text, second.text) == ("A2", "B2")
    assert occupy.holder(object_key(Label, first.pk)) is None
    assert occupy.holder(object_key(Label, second.pk)) is None


def test_actions_are_refused_while_a_selected_object_is_edited(users: StaffUsers) -> None:
    first, second = (
        Label.objects.create(code="a", text="A"),
        Label.objects.create(code="b", text="B"),
    )
    lease = _edit(users, first)
    client = login(users.other)
    for action in ("clear_text", "delete_selected"):
        response = client.post(
            LIST,
            {"action": action, "post": "yes", "_selected_action": [first.pk, second.pk]},
            follow=True,
        )
        html = response.content.decode()
        assert "Nothing was done: “a” is being edited by Editor" in html, action
    assert sorted(Label.objects.values_list("text", flat=True)) == ["A", "B"]
    assert occupy.holder(object_key(Label, second.pk)) is None
    occupy.release(lease)
    client.post(LIST, {"action": "clear_text", "_selected_action": [first.pk, second.pk]})
    assert sorted(Label.objects.values_list("text", flat=True)) == ["", ""]
    client.post(LIST, {"action": "delete_selected", "post": "yes", "_selected_action": [first.pk]})
    assert list(Label.objects.values_list("code", flat=True)) == ["b"]
    assert occupy.holder(object_key(Label, first.pk)) is None
