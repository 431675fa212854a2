"""The DRF layer counts its answers with an occupy status (``occupy.http.responses``)."""

from __future__ import annotations

import pytest

from tests.support.telemetry import Recorded, recorded
from tests.testapp.models import Book


@pytest.fixture
def otel() -> Recorded:
    """What the SDK recorded in this session (needs opentelemetry-sdk)."""
    found = recorded()
    if found is None:
        pytest.skip("opentelemetry-sdk is not installed (pip install -e '.[test]')")
    return found


def _count(otel: Recorded, status: int, code: str | None) -> float:
    attributes: dict[str, object] = {"http.response.status_code": status}
    if code is not None:
        attributes["occupy.code"] = code
    return otel.total("occupy.http.responses", **attributes)


def test_occupy_statuses_are_counted_by_status_and_code(otel, users, client_for) -> None:
    book = Book.objects.create(name="Dune")
    client = client_for(users.editor)
    url = f"/api/books/{book.pk}/"
    before = {
        (412, "precondition_failed"): _count(otel, 412, "precondition_failed"),
        (428, "precondition_required"): _count(otel, 428, "precondition_required"),
        (304, None): _count(otel, 304, None),
    }

    assert (
        client.patch(url, {"status": "lent"}, format="json", HTTP_IF_MATCH='"99"').status_code
        == 412
    )
    assert client.patch(url, {"status": "lent"}, format="json").status_code == 428
    etag = client.get(url)["ETag"]
    assert client.get(url, HTTP_IF_NONE_MATCH=etag).status_code == 304
    assert client.get(url).status_code == 200  # not an occupy status: not counted

    for (status, code), count in before.items():
        assert _count(otel, status, code) == count + 1, (status, code)
