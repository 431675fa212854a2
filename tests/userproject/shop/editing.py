"""The shop's code that takes locks: what its tests exercise."""

import occupy

from shop.models import Book

#: How long an editor's claim on a book lasts unless the page renews it.
EDIT_TTL = 300


def start_editing(book: Book, user: str) -> occupy.Lease:
    """Claim ``book`` for ``user``; ``occupy.Occupied`` (with ``.holder``) if someone
    else edits it."""
    return occupy.acquire(book.occupy_key, owner=f"user:{user}", ttl=EDIT_TTL, timeout=0)


def who_edits(book: Book) -> str | None:
    """Return the user editing ``book``, or ``None``."""
    holder = book.get_holder()
    return None if holder is None else holder.owner.removeprefix("user:")
