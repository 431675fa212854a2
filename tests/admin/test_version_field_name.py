"""VersionedAdminMixin on a model whose version field is ``revision``
(``version_field_name``) and whose ``version`` is an ordinary field of the form."""

from __future__ import annotations

import re

from django.test import Client

from tests.support.users import StaffUsers, login
from tests.testapp.models import Manual


def _form(client: Client, url: str) -> dict[str, str]:
    html = client.get(url).content.decode()
    return {
        "title": re.search(r'name="title" value="([^"]*)"', html)[1],
        "version": re.search(r'name="version" value="([^"]*)"', html)[1],
        "occupy_version": re.search(r'name="occupy_version" value="(\d+)"', html)[1],
        "occupy_rendered": re.search(r'name="occupy_rendered" value="([^"]*)"', html)[1],
    }


def test_the_form_carries_the_named_field_and_a_stale_tab_meets_the_conflict(
    users: StaffUsers,
) -> None:
    manual = Manual.objects.create(title="Guide", version="2.0")
    Manual.objects.filter(pk=manual.pk).update_versioned(title="Handbook")  # revision 2
    url = f"/admin/testapp/manual/{manual.pk}/change/"
    tab_b, tab_a = login(users.editor), login(users.other)
    form_b = _form(tab_b, url)
    form_a = _form(tab_a, url)
    assert form_b["occupy_version"] == "2" and form_b["version"] == "2.0"
    assert tab_a.post(url, {**form_a, "version": "2.1", "_save": "1"}).status_code == 302
    response = tab_b.post(url, {**form_b, "version": "3.0", "_save": "1"})
    assert response.status_code == 409
    html = response.content.decode()
    assert re.search(r'class="mine">3.0</td><td class="theirs">2.1</td>', html)
    keep = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', html))
    assert keep["occupy_version"] == "3" and keep["version"] == "3.0"
    assert tab_b.post(url, {**keep, "_continue": "1"}).status_code == 302
    assert Manual.objects.values_list("title", "version", "revision").get() == (
        "Handbook",
        "3.0",
        4,
    )


def test_the_changelist_rows_carry_the_named_field(users: StaffUsers) -> None:
    manual = Manual.objects.create(title="Guide", version="2.0")
    Manual.objects.filter(pk=manual.pk).update_versioned(title="Handbook")  # revision 2
    html = login(users.editor).get("/admin/testapp/manual/").content.decode()
    assert re.search(r'name="form-0-occupy_version" value="2"', html), html
