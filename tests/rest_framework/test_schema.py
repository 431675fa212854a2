"""OpenAPI through drf-spectacular: every mixin view documents the contract by itself."""

from __future__ import annotations

import pytest
from drf_spectacular.generators import SchemaGenerator

pytestmark = pytest.mark.usefixtures("users")


@pytest.fixture
def schema() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)


def _headers(operation: dict) -> set[str]:
    return {p["name"] for p in operation.get("parameters", []) if p["in"] == "header"}


@pytest.mark.parametrize(
    "path", ["/api/books/{id}/", "/api/documents/{id}/", "/api/uuid-books/{id}/"]
)
def test_every_guarded_write_lists_the_contract(schema, path):
    operations = schema["paths"][path]
    for method in ("put", "patch", "delete"):
        operation = operations[method]
        assert {"409", "412", "423", "428"} <= set(operation["responses"]), (path, method)
        assert {"If-Match", "Occupy-Lease"} <= _headers(operation)
        assert "Retry-After" in operation["responses"]["423"]["headers"]
        assert "ETag" in operation["responses"]["412"]["headers"]
        body = operation["responses"]["423"]["content"]["application/json"]["schema"]
        assert body == {"$ref": "#/components/schemas/OccupyError"}
    retrieve = operations["get"]
    assert "304" in retrieve["responses"] and "If-None-Match" in _headers(retrieve)
    assert "ETag" in retrieve["responses"]["200"]["headers"]


def test_the_conditional_only_view_lists_no_423(schema):
    patch = schema["paths"]["/api/conditional-books/{id}/"]["patch"]
    assert {"409", "412", "428"} <= set(patch["responses"])
    assert "423" not in patch["responses"] and "Occupy-Lease" not in _headers(patch)


def test_the_lease_endpoints_have_their_own_bodies(schema):
    lease = schema["paths"]["/api/books/{id}/lease/"]
    assert "423" in lease["post"]["responses"]
    created = lease["post"]["responses"]["201"]["content"]["application/json"]["schema"]
    assert created == {"$ref": "#/components/schemas/LeaseToken"}
    assert {"409", "428"} <= set(lease["patch"]["responses"])
    assert "Occupy-Lease" in _headers(lease["delete"])
    token = schema["components"]["schemas"]["LeaseToken"]["properties"]
    assert "token" in token
    holder = schema["components"]["schemas"]["HolderBody"]["properties"]["holder"]
    assert "token" not in str(holder)
    assert "/api/books/{id}/lease/takeover/" in schema["paths"]


def test_a_users_own_answer_wins(schema):
    patch = schema["paths"]["/api/labels/{code}/"]["patch"]
    body = patch["responses"]["412"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/CustomAnswer"}
    assert "423" in patch["responses"]  # the rest is still added


def test_plain_views_are_left_alone(schema):
    patch = schema["paths"]["/api/plain-shelves/{code}/"]["patch"]
    assert not {"412", "423", "428"} & set(patch["responses"])


def test_bad_requests_outages_and_the_client_header_are_listed(schema):
    patch = schema["paths"]["/api/books/{id}/"]["patch"]
    assert {"400", "503"} <= set(patch["responses"])
    assert "Retry-After" in patch["responses"]["503"]["headers"]
    lease = schema["paths"]["/api/books/{id}/lease/"]
    assert {"400", "503"} <= set(lease["post"]["responses"])
    assert "Occupy-Client" in _headers(lease["post"])
    assert {"400", "409", "428", "503"} <= set(lease["patch"]["responses"])
    takeover = schema["paths"]["/api/books/{id}/lease/takeover/"]["post"]
    assert {"400", "403", "409", "423", "503"} <= set(takeover["responses"])
    assert "Occupy-Client" in _headers(takeover)
    created = takeover["responses"]["201"]["content"]["application/json"]["schema"]
    assert (
        "replaced" in schema["components"]["schemas"][created["$ref"].split("/")[-1]]["properties"]
    )
    beacon = schema["paths"]["/api/books/{id}/lease/release/"]["post"]
    body = beacon["requestBody"]["content"]
    assert any(
        "token"
        in str(
            schema["components"]["schemas"].get(media["schema"].get("$ref", "").split("/")[-1], {})
        )
        for media in body.values()
    )
    described = patch["responses"]["400"]["description"]
    assert "malformed_precondition" in described
    assert "invalid_ttl" in lease["post"]["responses"]["400"]["description"]


def test_queued_editors_and_the_412_body_are_listed(schema):
    lease = schema["paths"]["/api/books/{id}/lease/"]["post"]
    assert "Prefer" in _headers(lease)
    for code in ("201", "423"):
        assert "Preference-Applied" in lease["responses"][code]["headers"], code
    patch = schema["paths"]["/api/books/{id}/"]["patch"]
    for code in ("409", "412"):
        body = patch["responses"][code]["content"]["application/json"]["schema"]
        error, current = body["allOf"]
        assert error == {"$ref": "#/components/schemas/OccupyError"}
        assert current["properties"]["current"]["$ref"] == "#/components/schemas/Book"
    assert "current" in patch["responses"]["412"]["description"]
    conditional = schema["paths"]["/api/conditional-books/{id}/"]["put"]["responses"]["412"]
    assert "allOf" in conditional["content"]["application/json"]["schema"]
