"""Every attribute occupy reads on a DRF view is checked by ``manage.py check``, with an
id and a hint; a request that meets a misconfigured one is answered 503
(``store_unavailable``), never 500. The views: tests/rest_framework/misconfigured_urls.py."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

import occupy
from occupy.rest_framework.checks import check_views
from tests.rest_framework.misconfigured_urls import MISCONFIGURED
from tests.testapp.models import Book, Document

pytestmark = pytest.mark.usefixtures("users")

URLCONF = "tests.rest_framework.misconfigured_urls"


@pytest.fixture
def doc(settings) -> Document:
    settings.ROOT_URLCONF = URLCONF
    return Document.objects.create(body="draft")


@pytest.mark.parametrize("name", sorted(MISCONFIGURED))
def test_check_reports_the_attribute_with_an_id_and_a_hint(settings, name):
    settings.ROOT_URLCONF = URLCONF
    attributes, check_id = MISCONFIGURED[name]
    found = [m for m in check_views() if m.obj.__name__ == name]
    assert [m.id for m in found] == [check_id], found
    (attribute,) = attributes
    assert found[0].msg.startswith(f"{name}.{attribute} "), found[0].msg
    assert attribute in found[0].hint


def test_check_reads_what_as_view_was_given(settings):
    settings.ROOT_URLCONF = URLCONF
    found = [m for m in check_views() if m.obj.__name__ == "DocumentViewSet"]
    assert [m.id for m in found] == ["occupy.E302"]
    assert "DocumentViewSet.occupy_backend is 'nowhere'" in found[0].msg


def _unavailable(response) -> None:
    """A misconfigured view is 503 ``store_unavailable``, saying the site is configured
    so, without the ``Retry-After`` that would have clients retry into the same 503."""
    assert response.status_code == 503, (response.status_code, response.content[:500])
    assert response.json()["code"] == "store_unavailable"
    assert "as the site is configured" in response.json()["detail"], response.json()
    assert "Retry-After" not in response, response.headers


@pytest.mark.parametrize("name", ["UnknownBackend", "ZeroWriteTtl", "TextWriteTtl"])
def test_a_write_through_a_misconfigured_view_is_503_not_500(
    users, client_for, doc, name, caplog, monkeypatch
):
    monkeypatch.setattr("occupy.checks._logged", set())
    api = client_for(users.editor)
    url = f"/api/{name.lower()}/{doc.pk}/"
    with caplog.at_level(logging.ERROR, logger="occupy.checks"):
        for _ in range(2):
            _unavailable(api.patch(url, {"body": "x"}, format="json", HTTP_IF_MATCH='"1"'))
    (attribute,) = MISCONFIGURED[name][0]
    logged = [r.getMessage() for r in caplog.records if r.name == "occupy.checks"]
    assert len(logged) == 1 and logged[0].startswith(f"{name}.{attribute} "), logged
    assert Document.objects.get().body == "draft"


@pytest.mark.parametrize("name", ["NegativeWriteWait", "HourWriteWait"])
def test_a_write_that_would_wait_with_a_misconfigured_wait_is_503(users, client_for, doc, name):
    """The wait is read when another write is in flight (here a write lock of 2 s)."""
    occupy.acquire(doc.occupy_key, owner=f"write:user:{users.other.pk}", ttl=2)
    response = client_for(users.editor).patch(
        f"/api/{name.lower()}/{doc.pk}/", {"body": "x"}, format="json", HTTP_IF_MATCH='"1"'
    )
    _unavailable(response)
    assert Document.objects.get().body == "draft"


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("TextLeaseTtl", {}),
        ("ZeroLeaseTtl", {}),
        ("NegativeLeaseTtlMax", {"ttl": 60}),
        ("LeaseTtlAboveMax", {}),
    ],
)
def test_a_lease_through_a_misconfigured_view_is_503_not_500(users, client_for, doc, name, body):
    response = client_for(users.editor).post(
        f"/api/{name.lower()}/{doc.pk}/lease/", body, format="json"
    )
    _unavailable(response)
    assert occupy.holder(doc.occupy_key) is None


def test_as_view_arguments_are_read_at_request_time_too(users, client_for, doc):
    response = client_for(users.editor).patch(
        f"/given/{doc.pk}/", {"body": "x"}, format="json", HTTP_IF_MATCH='"1"'
    )
    _unavailable(response)


@pytest.mark.parametrize("name", ["TextLeaseTtl", "TextWriteTtl", "UnknownBackend", "ZeroWriteTtl"])
def test_no_request_to_a_misconfigured_view_answers_500(users, client_for, doc, name):
    """Every action of the views whose requests of every kind met their attribute as a
    500 (the others are met on one path each, tested above)."""
    api = client_for(users.editor)
    url = f"/api/{name.lower()}/{doc.pk}/"
    token = "a" * 32
    answers = [
        api.get(url),
        api.patch(url, {"body": "x"}, format="json", HTTP_IF_MATCH='"1"'),
        api.get(f"{url}lease/"),
        api.post(f"{url}lease/", {}, format="json"),
        api.patch(f"{url}lease/", {}, format="json", HTTP_OCCUPY_LEASE=token),
        api.delete(f"{url}lease/", HTTP_OCCUPY_LEASE=token),
        api.post(f"{url}lease/takeover/", {}, format="json"),
        api.delete(url, HTTP_IF_MATCH='"1"'),
    ]
    assert [a.status_code for a in answers if a.status_code >= 500 and a.status_code != 503] == []


def test_a_view_on_a_model_whose_store_is_not_configured_is_503(users, client_for, monkeypatch):
    """The view follows its model; the model's own check is occupy.E203."""
    monkeypatch.setattr(Document, "occupy_backend", "nope")
    doc = Document.objects.create(body="draft")
    assert [m.id for m in Document.check() if m.id.startswith("occupy.")] == ["occupy.E203"]
    response = client_for(users.editor).patch(
        f"/api/documents/{doc.pk}/", {"body": "x"}, format="json", HTTP_IF_MATCH='"1"'
    )
    _unavailable(response)
    assert Document.objects.get().body == "draft"


@pytest.mark.parametrize("urlconf", [URLCONF, "tests.rest_framework.broken_urls", None])
def test_the_view_check_never_crashes_on_a_urlconf(settings, urlconf):
    """Odd patterns, an include whose module is missing, a URLconf that cannot be
    loaded, no ROOT_URLCONF at all: the check reports what it can, and never raises."""
    if urlconf is None:
        del settings.ROOT_URLCONF
    else:
        settings.ROOT_URLCONF = urlconf
    found = {m.obj.__name__ for m in check_views()}
    assert found == ({*MISCONFIGURED, "DocumentViewSet"} if urlconf == URLCONF else set())


#: Mistakes in ``settings.OCCUPY`` itself, which ``check`` reports (E001, E002, E007)
#: and a server that skips ``check`` serves with, and whether a plain view's call of
#: the lock API (which reads no HTTP setting) meets them.
WRONG_SETTINGS = {
    "an unknown key": ({"TTl": 30}, True),
    "no default alias": (
        {"BACKENDS": {"main": {"BACKEND": "occupy.backends.db.DatabaseBackend"}}},
        True,
    ),
    "a backend path that is no class": (
        {"BACKENDS": {"default": {"BACKEND": "occupy.nowhere.X"}}},
        True,
    ),
    "a lease ttl of 0": ({"REST_FRAMEWORK": {"LEASE_TTL": 0}}, False),
}


def _503_logged_once(answers: list[Any], caplog: pytest.LogCaptureFixture) -> None:
    for response in answers:
        assert response.status_code == 503, (response.status_code, response.content[:300])
        assert response.json()["code"] == "store_unavailable"
        assert "as the site is configured" in response.json()["detail"]
        assert "Retry-After" not in response
    logged = [r.getMessage() for r in caplog.records if r.name == "occupy.checks"]
    assert len(logged) == 1, logged


@pytest.mark.parametrize("wrong", sorted(WRONG_SETTINGS))
def test_wrong_occupy_settings_are_503_on_occupys_views(
    users, client_for, settings, caplog, monkeypatch, wrong
):
    """A server that skips ``check`` answers them as a view's own misconfiguration: 503
    without Retry-After, the problem logged once, nothing written."""
    monkeypatch.setattr("occupy.checks._logged", set())
    document = Document.objects.create(body="draft")
    settings.OCCUPY = WRONG_SETTINGS[wrong][0]
    api = client_for(users.editor)
    url = f"/api/documents/{document.pk}/"
    with caplog.at_level(logging.ERROR, logger="occupy.checks"):
        answers = [api.post(f"{url}lease/", {}, format="json")]
        if WRONG_SETTINGS[wrong][1]:
            answers.append(api.patch(url, {"body": "x"}, format="json", HTTP_IF_MATCH='"1"'))
            answers.append(api.get(f"{url}lease/"))
    _503_logged_once(answers, caplog)
    settings.OCCUPY = {}
    assert Document.objects.get().body == "draft"


@pytest.mark.parametrize("wrong", sorted(w for w, (_, met) in WRONG_SETTINGS.items() if met))
def test_wrong_occupy_settings_are_503_through_the_middleware(
    users, client_for, settings, caplog, monkeypatch, wrong
):
    """A plain view whose code calls the lock API, with occupy's middleware."""
    monkeypatch.setattr("occupy.checks._logged", set())
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "occupy.middleware.OccupyErrorsMiddleware"]
    book = Book.objects.create(name="Dune")
    settings.OCCUPY = WRONG_SETTINGS[wrong][0]
    monkeypatch.setattr(Book, "save", lambda *args, **kwargs: occupy.holder("k"))
    with caplog.at_level(logging.ERROR, logger="occupy.checks"):
        answers = [
            client_for(users.editor).patch(
                f"/api/plain-books/{book.pk}/", {"name": "x"}, format="json"
            )
        ]
    _503_logged_once(answers, caplog)


def test_an_improperly_configured_of_another_app_stays_django_s(
    users, client_for, settings, monkeypatch
):
    """With occupy's settings right, an ``ImproperlyConfigured`` is somebody else's
    problem: Django's 500, as before."""
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "occupy.middleware.OccupyErrorsMiddleware"]
    book = Book.objects.create(name="Dune")

    def wrong(*args, **kwargs):
        raise ImproperlyConfigured("another app's setting is wrong")

    monkeypatch.setattr(Book, "save", wrong)
    with pytest.raises(ImproperlyConfigured, match="another app's"):
        client_for(users.editor).patch(f"/api/plain-books/{book.pk}/", {"name": "x"}, format="json")
