"""Lost update: two people load the same book and save; neither may silently undo the
other's change."""

import occupy
import pytest

from shop.models import Book


@pytest.mark.django_db
def test_both_changes_survive_two_saves_of_different_fields() -> None:
    book = Book.objects.create(name="Dune")
    student = Book.objects.get(pk=book.pk)
    admin = Book.objects.get(pk=book.pk)

    student.status = "returned"
    student.save()
    admin.name = "Dune (2nd ed.)"
    admin.save()

    book.refresh_from_db()
    assert (book.name, book.status) == ("Dune (2nd ed.)", "returned")


@pytest.mark.django_db
def test_a_stale_save_of_the_same_field_conflicts() -> None:
    book = Book.objects.create(name="Dune")
    first = Book.objects.get(pk=book.pk)
    second = Book.objects.get(pk=book.pk)

    first.name = "Dune Messiah"
    first.save()
    second.name = "Children of Dune"
    with pytest.raises(occupy.VersionConflict):
        second.save()

    book.refresh_from_db()
    assert book.name == "Dune Messiah"
