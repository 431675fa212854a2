"""The same in a Django TestCase, as ``manage.py test`` runs it."""

import occupy
from django.test import TestCase
from occupy.testing import OccupyTestCaseMixin

from shop.editing import EDIT_TTL, start_editing, who_edits
from shop.models import Book


class EditingTests(OccupyTestCaseMixin, TestCase):
    def test_a_crashed_editors_claim_expires(self) -> None:
        book = Book.objects.create(name="Dune")
        start_editing(book, "alice")
        with self.assertRaises(occupy.Occupied):
            start_editing(book, "bob")

        self.occupy_clock.advance(EDIT_TTL + 1)

        self.assertIsNone(who_edits(book))
        start_editing(book, "bob")
