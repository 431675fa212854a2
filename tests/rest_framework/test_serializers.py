"""OccupyModelSerializerMixin and VersionField (found by fuzzing the example API)."""

from __future__ import annotations

import pytest

from tests.testapp.models import Book

pytestmark = pytest.mark.usefixtures("users")


def test_a_create_starts_at_version_1_whatever_version_it_sends(users, client_for):
    response = client_for(users.editor).post(
        "/api/books/", {"name": "Dune", "version": 5}, format="json"
    )
    assert response.status_code == 201, response.content
    assert response.json()["version"] == 1
    assert Book.objects.get().version == 1


def test_a_version_beyond_the_column_is_400_not_a_server_error(users, client_for):
    """With ``If-Match: *`` the body's version is the save's precondition: one too large
    for the column is refused by the serializer before it reaches the database."""
    api = client_for(users.editor)
    response = api.post("/api/books/", {"name": "Dune", "version": 10**24}, format="json")
    assert response.status_code == 400, response.content
    book = Book.objects.create(name="Dune")
    response = api.patch(
        f"/api/books/{book.pk}/", {"name": "x", "version": 10**24}, format="json", HTTP_IF_MATCH="*"
    )
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "malformed_precondition"
    assert "'version'" in response.json()["detail"]
    assert Book.objects.get().name == "Dune"
