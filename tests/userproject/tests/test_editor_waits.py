"""An editor who must wait: while Alice edits a book nobody else can; her crashed
browser's claim ends by itself. The store's clock moves instead of the test sleeping."""

import occupy
import pytest

from shop.editing import EDIT_TTL, start_editing, who_edits
from shop.models import Book


@pytest.mark.django_db
def test_the_second_editor_is_told_who_edits(occupy_memory) -> None:
    book = Book.objects.create(name="Dune")
    start_editing(book, "alice")

    with pytest.raises(occupy.Occupied) as caught:
        start_editing(book, "bob")
    assert caught.value.holder.owner == "user:alice"
    assert who_edits(book) == "alice"


@pytest.mark.django_db
def test_a_crashed_editors_claim_expires(occupy_memory) -> None:
    book = Book.objects.create(name="Dune")
    alice = start_editing(book, "alice")

    occupy_memory.advance(EDIT_TTL + 1)  # Alice's browser never came back

    assert who_edits(book) is None
    bob = start_editing(book, "bob")
    assert who_edits(book) == "bob"
    with pytest.raises(occupy.LeaseLost):
        alice.extend(EDIT_TTL)  # her page's renewal fails: she must reload
    occupy.release(bob)
