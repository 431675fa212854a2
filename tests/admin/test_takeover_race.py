"""The admin's takeover is decided on the holder the store replaces, in processes over
real HTTP: the editor takes and renews her lease; another editor without the takeover
permission takes over his own lease while he lets it go (so that she may get it in
between); a supervisor takes over whoever edits. No grant of hers goes to him, and
every takeover of another user's lease has one admin log entry naming the holder the
store replaced."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.contrib import admin
from django.contrib.admin.models import LogEntry

import occupy
from occupy import signals
from occupy.admin import EditLeaseAdminMixin
from occupy.history import get_change_message
from occupy.owners import owner_user_pk
from tests.support import multiproc
from tests.support.admin_race import CAP, ROUNDS, race_worker
from tests.support.aliases import backend_params
from tests.support.live_server import serve
from tests.support.users import StaffUsers, login
from tests.testapp.models import Document

SECONDS = 12


@pytest.fixture
def leases_on(
    request: pytest.FixtureRequest, users: StaffUsers, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    alias = request.param
    for model_admin in admin.site._registry.values():
        if isinstance(model_admin, EditLeaseAdminMixin):
            monkeypatch.setattr(model_admin, "occupy_backend", alias)
    yield alias


# A soak of at least 12 s per store: test_conditions.py's
# test_a_takeover_is_decided_on_the_holder_the_store_replaces, in make test, steps
# through the same race deterministically.
@pytest.mark.slow
@pytest.mark.parametrize("leases_on", backend_params(["db-postgresql", "redis"]), indirect=True)
def test_no_grant_goes_to_a_user_without_the_permission(users: StaffUsers, leases_on: str) -> None:
    doc = Document.objects.create(body="draft")
    replaced: list[tuple[str, str, int]] = []  # (new owner, replaced owner, its fence)

    def receiver(
        sender: type, lease: occupy.Lease, previous: occupy.Holder | None, **kwargs: object
    ) -> None:
        if previous is not None and previous.owner != lease.owner:
            replaced.append((lease.owner, previous.owner, previous.fence))

    cookie = settings.SESSION_COOKIE_NAME
    cookies = {
        user.username: (cookie, login(user).cookies[cookie].value)
        for user in (users.editor, users.other, users.supervisor)
    }
    obj = f"/admin/testapp/document/{doc.pk}/"
    signals.lease_taken_over.connect(receiver, weak=False)
    try:
        with serve() as url:
            her, his, supervisor = multiproc.run(
                race_worker,
                [
                    ("editor", url, cookies["editor"], obj, SECONDS),
                    ("other", url, cookies["other"], obj, SECONDS),
                    ("supervisor", url, cookies["supervisor"], obj, SECONDS),
                ],
                timeout=SECONDS * CAP + 120,
            )
    finally:
        signals.lease_taken_over.disconnect(receiver)
    pk = {str(u.pk): u.username for u in (users.editor, users.other, users.supervisor)}
    by = Counter(
        (pk[owner_user_pk(new) or ""], pk[owner_user_pk(old) or ""])
        for new, old, _fence in replaced
    )
    # The race ran: she held the object, and he tried his takeover many times (each
    # "took" his own lease, or 403: she had it by then, and it stayed hers).
    assert her["grants"] >= 1 and sum(his.values()) >= ROUNDS, (her, his, supervisor)
    assert by[("other", "editor")] == 0, (by, her, his)  # 0 grants of hers lost to him
    # His own tab to his other tab; the supervisor from either of them.
    assert set(by) <= {("other", "other"), ("supervisor", "editor"), ("supervisor", "other")}, by
    names = {"editor": "Editor", "other": "Other"}
    expected = Counter(
        f"Took over the edit lease from {names[pk[owner_user_pk(old) or '']]} (fence {fence})."
        for new, old, fence in replaced
        if owner_user_pk(new) != owner_user_pk(old)
    )
    logged = Counter(map(get_change_message, LogEntry.objects.filter(object_id=str(doc.pk))))
    assert logged == expected
    assert all(
        re.match(r"Took over the edit lease from (Editor|Other) \(fence \d+\)\.$", m)
        for m in logged
    )
    assert set(LogEntry.objects.values_list("user__username", flat=True)) <= {"supervisor"}
