"""Races over real HTTP: several client processes against a live server."""

from __future__ import annotations

import multiprocessing

import pytest

from tests.support import api_clients, multiproc
from tests.testapp.models import Book, Document, Shelf

pytestmark = pytest.mark.multiprocess
ROUNDS = 12


def test_two_patches_with_the_same_if_match_one_wins_one_gets_412(users, server_url):
    """Read-modify-write from two processes at once, many rounds: each round exactly
    one 200 and one 412, and every winning append is in the row."""
    book = Book.objects.create(name="Dune")
    url = f"{server_url}/api/conditional-books/{book.pk}/"
    barrier = multiprocessing.get_context("spawn").Barrier(2)
    a, b = multiproc.run(
        api_clients.append_at_once,
        [
            (url, users.editor.username, "a", ROUNDS, barrier),
            (url, users.other.username, "b", ROUNDS, barrier),
        ],
        timeout=180,
    )
    assert [sorted(pair) for pair in zip(a, b, strict=True)] == [[200, 412]] * ROUNDS
    row = Book.objects.get()
    assert row.version == 1 + ROUNDS
    assert row.note == "".join("a" if x == 200 else "b" for x in a)  # nothing lost


def test_plain_drf_loses_one_of_two_appends(users, server_url):
    """The control: the same race on plain DRF answers 200 twice and loses an append."""
    shelf = Shelf.objects.create(code="s1", name="")
    url = f"{server_url}/api/plain-shelves/{shelf.pk}/"
    barrier = multiprocessing.get_context("spawn").Barrier(2)
    a, b = multiproc.run(
        api_clients.append_at_once,
        [
            (url, users.editor.username, "a", 3, barrier, "name"),
            (url, users.other.username, "b", 3, barrier, "name"),
        ],
        timeout=180,
    )
    assert a == b == [200, 200, 200]
    assert len(Shelf.objects.get().name) < 6


def test_no_write_ever_lands_inside_someone_elses_lease(users, server_url):
    doc = Document.objects.create(body="draft")
    url = f"{server_url}/api/documents/{doc.pk}/"
    leased, unleased = multiproc.run(
        api_clients.lease_race,
        [
            ("lease", url, users.editor.username),
            ("free", url, users.other.username),
        ],
        timeout=180,
    )
    assert leased == [200] * 10  # nobody wrote between the lease holder's read and write
    assert 423 in unleased and 200 in unleased, unleased  # the race really happened
    assert set(unleased) <= {200, 412, 423}, unleased
