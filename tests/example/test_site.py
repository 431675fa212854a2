"""The example site over HTTP: the front page, the schema and docs, and the library API
with occupy's contract (who may write, and that writes are conditional)."""

from __future__ import annotations

import json

from tests.support.example_site import Site, call


def _json(raw: bytes) -> dict:
    return json.loads(raw)


def _book(site: Site, **fields: object) -> dict:
    status, _head, raw = call(
        "POST", f"{site.url}/api/books/", "editor", {"name": "Dune", **fields}
    )
    assert status == 201, raw
    return _json(raw)


def test_front_page_links_the_api_the_schema_the_docs_and_the_admin(example_site) -> None:
    status, head, raw = call("GET", f"{example_site.url}/")
    assert status == 200
    assert head["Content-Type"].startswith("text/html")
    for link in ('href="/api/"', 'href="/api/schema/"', 'href="/api/docs/"', 'href="/admin/"'):
        assert link in raw.decode(), link


def test_schema_lists_both_viewsets_and_their_lease_endpoints(example_site) -> None:
    status, _head, raw = call("GET", f"{example_site.url}/api/schema/?format=json")
    assert status == 200
    schema = _json(raw)
    assert schema["openapi"].startswith("3.")
    for path in (
        "/api/books/{id}/",
        "/api/tasks/{id}/",
        "/api/books/{id}/lease/",
        "/api/tasks/{id}/lease/takeover/",
    ):
        assert path in schema["paths"], path
    book = schema["components"]["schemas"]["Book"]["properties"]
    assert "version" in book


def test_swagger_ui_page_loads(example_site) -> None:
    status, head, raw = call("GET", f"{example_site.url}/api/docs/")
    assert status == 200
    assert head["Content-Type"].startswith("text/html")
    assert b"swagger" in raw.lower()
    page = raw.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/" in page  # offline
    assert "cdn." not in page and "unpkg" not in page
    static = page.split('src="', 2)[1].split('"', 1)[0] if 'src="' in page else None
    if static is not None and static.startswith("/static/"):
        assert call("GET", f"{example_site.url}{static}")[0] == 200


def test_anyone_reads_nobody_anonymous_writes(example_site) -> None:
    book = _book(example_site)
    url = f"{example_site.url}/api/books/{book['id']}/"
    status, head, _raw = call("GET", url)
    assert status == 200
    assert head["ETag"] == '"1"'
    for method, body in (("PATCH", {"name": "x"}), ("PUT", {"name": "x"}), ("DELETE", None)):
        status, _head, _raw = call(method, url, None, body, If_Match='"1"')
        assert status in (401, 403), (method, status)
    assert call("POST", f"{example_site.url}/api/books/", None, {"name": "x"})[0] in (401, 403)
    assert call("POST", f"{url}lease/", None)[0] in (401, 403)


def test_a_user_without_permissions_cannot_write_or_lease(example_site) -> None:
    book = _book(example_site)
    url = f"{example_site.url}/api/books/{book['id']}/"
    assert call("GET", url, "reader")[0] == 200
    assert call("PATCH", url, "reader", {"name": "x"}, If_Match='"1"')[0] == 403
    assert call("POST", f"{url}lease/", "reader")[0] == 403


def test_a_write_without_a_precondition_is_428(example_site) -> None:
    book = _book(example_site)
    status, head, raw = call(
        "PATCH", f"{example_site.url}/api/books/{book['id']}/", "editor", {"name": "Dune Messiah"}
    )
    assert status == 428
    assert _json(raw)["code"] == "precondition_required"
    assert head["Cache-Control"] == "no-store"


def test_if_match_writes_once_and_refuses_the_stale_copy(example_site) -> None:
    book = _book(example_site)
    url = f"{example_site.url}/api/books/{book['id']}/"
    etag = call("GET", url)[1]["ETag"]
    status, head, raw = call("PATCH", url, "editor", {"borrow_count": 1}, If_Match=etag)
    assert status == 200, raw
    assert head["ETag"] == '"2"'
    status, head, raw = call("PATCH", url, "editor", {"borrow_count": 1}, If_Match=etag)
    assert status == 412
    assert _json(raw)["code"] == "precondition_failed"
    assert head["ETag"] == '"2"'


def test_tasks_are_versioned_and_take_the_body_version(example_site) -> None:
    status, _head, raw = call(
        "POST", f"{example_site.url}/api/tasks/", "editor", {"title": "proofread"}
    )
    assert status == 201, raw
    task = _json(raw)
    assert task["version"] == 1
    url = f"{example_site.url}/api/tasks/{task['id']}/"
    status, head, raw = call("PATCH", url, "editor", {"done": True, "version": 1})
    assert status == 200, raw
    assert (_json(raw)["done"], head["ETag"]) == (True, '"2"')
    status, _head, raw = call("PATCH", url, "editor", {"done": False, "version": 1})
    assert status == 409
    assert _json(raw)["code"] == "version_conflict"


def test_an_edit_lease_keeps_other_writers_out_with_retry_after(example_site) -> None:
    book = _book(example_site)
    url = f"{example_site.url}/api/books/{book['id']}/"
    status, _head, raw = call("POST", f"{url}lease/", "editor", {"ttl": 30}, Occupy_Client="tab-1")
    assert status == 201, raw
    token = _json(raw)["token"]
    status, head, raw = call(
        "PATCH", url, "editor", {"name": "other tab"}, If_Match='"1"', Occupy_Client="tab-2"
    )
    assert status == 423
    assert int(head["Retry-After"]) >= 1
    assert _json(raw)["holder"]["owner_display"] == "editor"
    status, _head, raw = call(
        "PATCH", url, "editor", {"name": "leased"}, If_Match='"1"', Occupy_Lease=token
    )
    assert status == 200, raw
    assert call("DELETE", f"{url}lease/", "editor", Occupy_Lease=token)[0] == 204
