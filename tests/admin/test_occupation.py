"""OccupationAdmin: holders listed without tokens, force release needs the permission."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

import occupy
from occupy.models import Occupation


@pytest.fixture
def staff(live_db: None) -> User:
    user = User.objects.create_user("ops", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_occupation"))
    yield user
    User.objects.all().delete()


def test_the_list_shows_holders_and_never_tokens(staff: User) -> None:
    lease = occupy.acquire("book:1", owner="alice")
    client = Client()
    client.force_login(staff)
    page = client.get("/admin/occupy/occupation/").content.decode()
    assert "book:1" in page and "alice" in page
    assert lease.token not in page
    assert "force_release" not in page  # no permission, no action
    occupy.release(lease)


def test_force_release_needs_the_permission_and_the_holder_then_loses(staff: User) -> None:
    lease = occupy.acquire("book:1", owner="alice")
    client = Client()
    client.force_login(staff)
    pk = Occupation.objects.get(key="book:1").pk
    data = {"action": "force_release", "_selected_action": [pk]}
    client.post("/admin/occupy/occupation/", data)
    assert occupy.holder("book:1") is not None  # refused without the permission
    staff.user_permissions.add(Permission.objects.get(codename="force_release_occupation"))
    client.post("/admin/occupy/occupation/", data)
    assert occupy.holder("book:1") is None
    with pytest.raises(occupy.LeaseLost):
        occupy.release(lease)


def test_the_key_links_to_the_object_and_the_release_is_logged(staff: User) -> None:
    from django.contrib.admin.models import LogEntry

    from occupy.history import get_change_message
    from occupy.models import object_key
    from tests.testapp.models import Shelf

    shelf = Shelf.objects.create(code="s/1")
    key = object_key(Shelf, shelf.pk)
    lease = occupy.acquire(key, owner="alice")
    staff.user_permissions.add(Permission.objects.get(codename="force_release_occupation"))
    client = Client()
    client.force_login(staff)
    page = client.get("/admin/occupy/occupation/").content.decode()
    assert f'<a href="/admin/testapp/shelf/s_2F1/change/">{key}</a>' in page
    pk = Occupation.objects.get(key=key).pk
    client.post("/admin/occupy/occupation/", {"action": "force_release", "_selected_action": [pk]})
    entry = LogEntry.objects.get()
    assert entry.user == staff
    assert get_change_message(entry) == (
        f"Force-released {key!r} (fence {lease.fence}, using) held by 'alice'."
    )
    Shelf.objects.all().delete()
    LogEntry.objects.all().delete()
