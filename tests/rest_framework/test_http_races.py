"""Races over real HTTP on each server backend: client processes against a live server
whose document API keeps its locks in PostgreSQL, MariaDB or Redis."""

from __future__ import annotations

import itertools
import time
from collections import Counter

import pytest
from django.contrib.admin.models import LogEntry
from django.utils.dateparse import parse_datetime

import occupy
from occupy.history import get_change_message
from occupy.owners import owner_user_pk
from tests.support import api_clients, multiproc
from tests.support.aliases import backend_params
from tests.testapp.models import Book, Document

# Processes racing over real HTTP for seconds each: make test-slow, which CI runs.
pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

WRITERS = 4
ROUNDS = 6
#: The takeover race stops once the store has refused this many takeovers.
REFUSALS = 3


def _url(server_url: str, alias: str, doc: Document) -> str:
    return f"{server_url}/api/documents-{alias}/{doc.pk}/"


@pytest.mark.parametrize("alias", backend_params(["db-postgresql", "db-mysql", "redis"]))
def test_writers_without_a_lease_wait_for_each_other_never_423(users, server_url, alias):
    """Four processes PATCH one object with If-Match, re-reading on 412, nobody holding
    an edit lease: a write in flight is waited for, so no 423 at all, and every
    write that was answered 200 is in the row."""
    doc = Document.objects.create(body="")
    url = _url(server_url, alias, doc)
    writers = [users.editor, users.other, users.supervisor, users.editor]
    results = multiproc.run(
        api_clients.append_until_written,
        [(url, user.username, str(i), ROUNDS) for i, user in enumerate(writers)],
        timeout=240,
    )
    statuses = Counter(status for result in results for status in result)
    assert set(statuses) <= {200, 412}, statuses  # no 423, no 500
    assert statuses[200] == WRITERS * ROUNDS
    row = Document.objects.get()
    assert sorted(row.body) == sorted("".join(str(i) * ROUNDS for i in range(WRITERS)))
    assert row.version == 1 + WRITERS * ROUNDS


@pytest.mark.parametrize("alias", backend_params(["db-postgresql", "db-mysql", "redis"]))
def test_writers_facing_an_edit_lease_get_423_with_its_remaining_time(
    users, server_url, client_for, alias
):
    """With an edit lease held, every write without it is 423, its Retry-After the
    lease's remaining time (±1 s), naming the holder."""
    doc = Document.objects.create(body="draft")
    url = _url(server_url, alias, doc)
    lease = (
        client_for(users.supervisor)
        .post(f"/api/documents-{alias}/{doc.pk}/lease/", {"ttl": 120}, format="json")
        .json()
    )
    expires_at = parse_datetime(lease["expires_at"]).timestamp()
    results = multiproc.run(
        api_clients.patch_while_leased,
        [(url, user.username, 5) for user in (users.editor, users.other, users.editor)],
        timeout=240,
    )
    answers = [answer for result in results for answer in result]
    assert {status for _sent, _came, status, _ra, _who in answers} == {423}
    for sent, came, _status, retry_after, who in answers:
        assert who == "Supervisor"
        # The server rounded up the time left when it answered, between sent and came.
        left_then = (expires_at - came, expires_at - sent)
        assert left_then[0] <= int(retry_after) < left_then[1] + 1, (retry_after, left_then)
    assert Document.objects.get().body == "draft"
    client_for(users.supervisor).delete(
        f"/api/documents-{alias}/{doc.pk}/lease/", HTTP_OCCUPY_LEASE=lease["token"]
    )


@pytest.mark.parametrize("alias", backend_params(["db-postgresql", "redis"]))
def test_a_user_without_the_permission_never_takes_anothers_grant(
    users, server_url, alias, monkeypatch
):
    """The editor takes and renews leases; another editor (change permission, no
    takeover permission) takes and releases his own short lease in one process and
    keeps taking it over in another. The server pauses after every holder read (as a
    loaded one does), and every other time it reads his own lease it waits until that
    lease has ended, so his lease ends (and hers may begin) between a takeover's read
    and its act. Not one of her grants is lost to him (the store
    refuses a takeover whose holder changed since the read), and the log has one entry
    per takeover that replaced a holder, naming that holder: always himself."""
    read = occupy.holder
    his = str(users.other.pk)
    reads_of_his = itertools.count()

    def slow_read(*args, **kwargs):
        holder = read(*args, **kwargs)
        time.sleep(0.1)
        mine = holder is not None and owner_user_pk(holder.owner) == his
        if mine and next(reads_of_his) % 2 == 0:
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                now = read(*args, **kwargs)
                if now is None or now.fence != holder.fence:
                    break
                time.sleep(0.005)
        return holder

    monkeypatch.setattr(occupy, "holder", slow_read)
    refused = []
    take_over = occupy.takeover

    def counted(*args, **kwargs):
        try:
            return take_over(*args, **kwargs)
        except occupy.TakeoverRefused as e:
            refused.append(e.holder)
            raise

    monkeypatch.setattr(occupy, "takeover", counted)
    doc = Document.objects.create(body="")
    url = _url(server_url, alias, doc)
    # The race runs until the store has refused REFUSALS takeovers whose holder had
    # changed (each one a grant of hers that an unconditional takeover would have lost),
    # or for 8 s: without the refusals it runs its 8 s, and fails.
    stop = multiproc._ctx.Event()
    workers = multiproc.start(
        api_clients.takeover_race,
        [
            ("hold", url, users.editor.username, 8.0, stop),
            ("flicker", url, users.other.username, 8.0, stop),
            ("take", url, users.other.username, 8.0, stop),
        ],
    )
    deadline = time.monotonic() + 8.0
    while len(refused) < REFUSALS and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    hers, _flickered, taken = multiproc.collect(workers, timeout=240)
    assert hers["grants"] > 0 and hers["lost"] == 0, (hers, Counter(taken))
    statuses = Counter(status for status, _replaced in taken)
    assert statuses[403] > 0, statuses
    # The race really happened: the store refused takeovers whose holder had changed
    # since it was read (unconditional, some of them would have taken her grant).
    assert refused, statuses
    replaced = [who for status, who in taken if status == 201 and who is not None]
    assert set(replaced) <= {"Other"}, Counter(replaced)
    entries = LogEntry.objects.filter(user=users.other)
    assert entries.count() == len(replaced)
    assert all("from Other " in get_change_message(e) for e in entries)
    assert not LogEntry.objects.exclude(user=users.other).exists()


def test_a_plain_model_viewset_of_a_versioned_model_answers_409_not_500(users, settings):
    """A plain ModelViewSet on a model that gained VersionedMixin, DRF's default
    exception handler, occupy's middleware: four processes appending to one field
    get 200 or 409 version_conflict with the current ETag, never a 500. (Without a
    precondition from the client, plain DRF still loses updates made between a
    client's read and its write: that takes ConditionalMixin.)"""
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "occupy.middleware.OccupyErrorsMiddleware"]
    from tests.support.live_server import serve

    book = Book.objects.create(name="Dune")
    with serve() as server_url:
        url = f"{server_url}/api/plain-books/{book.pk}/"
        results = multiproc.run(
            api_clients.plain_appends,
            [
                (url, user.username, str(i), 8)
                for i, user in enumerate(
                    [users.editor, users.other, users.supervisor, users.editor]
                )
            ],
            timeout=240,
        )
    answers = [answer for result in results for answer in result]
    assert {status for status, _etag, _code in answers} <= {200, 409}, Counter(answers)
    conflicts = [(etag, code) for status, etag, code in answers if status == 409]
    assert all(
        code == "version_conflict" and etag and etag.strip('"').isdigit()
        for etag, code in conflicts
    ), conflicts
    assert conflicts, Counter(answers)  # the race really happened


CLIENTS = 8


@pytest.mark.parametrize("alias", backend_params(["db-postgresql", "redis"]))
def test_if_match_star_is_never_a_conflict(users, server_url, alias):
    """Eight processes PATCH one object with ``If-Match: *`` and no GET: ``*`` means
    any current version, so every write is applied to the row as it is under the write
    lock (never 409 for a change another made since the view read the row), each as
    its own version."""
    doc = Document.objects.create(body="")
    url = _url(server_url, alias, doc)
    writers = [users.editor, users.other, users.supervisor] * 3
    rounds = 5
    results = multiproc.run(
        api_clients.write_any_version,
        [(url, writers[i].username, f"w{i}", rounds) for i in range(CLIENTS)],
        timeout=240,
    )
    answers = Counter(answer for result in results for answer in result)
    assert answers == {(200, None): CLIENTS * rounds}, answers
    row = Document.objects.get()
    assert row.version == 1 + CLIENTS * rounds
    assert row.body in {f"w{i}-{rounds - 1}" for i in range(CLIENTS)}


@pytest.mark.parametrize("alias", backend_params(["db-postgresql", "redis"]))
def test_queued_editors_never_meet_a_412_or_a_423(users, server_url, alias):
    """Eight processes edit one object as queued editors (lease with ``Prefer: wait``,
    GET, PATCH under the lease, release): each waits its turn in the key's queue, so
    no 412, no 423, and every append is in the row."""
    doc = Document.objects.create(body="")
    url = _url(server_url, alias, doc)
    writers = [users.editor, users.other, users.supervisor] * 3
    rounds = 4
    results = multiproc.run(
        api_clients.queued_editor,
        [(url, writers[i].username, chr(ord("a") + i), rounds, 30) for i in range(CLIENTS)],
        timeout=240,
    )
    for step, expected in (("lease", 201), ("get", 200), ("patch", 200), ("release", 204)):
        seen = Counter(status for result in results for status in result[step])
        assert seen == {expected: CLIENTS * rounds}, (step, seen)
    # Capped by LEASE_WAIT_MAX (10 by default), and said so on every answer.
    assert all(result["applied"] == ["wait=10"] for result in results), results
    row = Document.objects.get()
    assert sorted(row.body) == sorted("".join(chr(ord("a") + i) * rounds for i in range(CLIENTS)))
    assert row.version == 1 + CLIENTS * rounds
