"""System checks: occupy.E001-E003, occupy.W001 and occupy.W004."""

from __future__ import annotations

import os

from django.core.checks import run_checks
from django.test import override_settings

from occupy.backends import get_backend
from occupy.checks import check_backends, check_foreign_claims, check_occupation_table
from tests.conftest import server_skip


def ids(messages) -> list[str]:
    return [m.id for m in messages]


def test_the_test_settings_pass_every_check(live_db: None) -> None:
    assert [m for m in run_checks(databases=["default"]) if m.id.startswith("occupy")] == []


@override_settings(OCCUPY={"BACKENDS": {"default": {"BACKEND": "occupy.backends.nope.Gone"}}})
def test_an_unknown_backend_path_is_e001() -> None:
    errors = check_backends()
    assert ids(errors) == ["occupy.E001"]
    assert "occupy.backends.nope.Gone" in errors[0].msg


@override_settings(OCCUPY={"BACKENDS": {"default": {"BACKEND": "occupy.exceptions.LeaseLost"}}})
def test_a_class_that_is_not_a_backend_is_e001() -> None:
    assert ids(check_backends()) == ["occupy.E001"]


@override_settings(OCCUPY={"BACKENDS": []})
def test_a_malformed_setting_is_e002() -> None:
    assert ids(check_backends()) == ["occupy.E002"]


@override_settings(OCCUPY={"BACKENDS": {"default": {
    "BACKEND": "occupy.backends.db.DatabaseBackend", "OPTIONS": {"DATABASE": "nowhere"}}}})
def test_a_database_backend_on_an_unknown_database_is_e003() -> None:
    errors = check_backends()
    assert ids(errors) == ["occupy.E003"] and "'nowhere'" in errors[0].msg


def test_a_missing_occupation_table_is_w001(live_db: None) -> None:
    from django.db import connection

    assert check_occupation_table(databases=["default"]) == []
    with connection.schema_editor() as editor:
        from occupy.models import Occupation

        editor.delete_model(Occupation)
    try:
        warnings = check_occupation_table(databases=["default"])
        assert ids(warnings) == ["occupy.W001"]
        assert "migrate occupy" in warnings[0].hint
    finally:
        with connection.schema_editor() as editor:
            editor.create_model(Occupation)


def test_claims_occupy_did_not_write_are_w004_when_asked(live_db: None) -> None:
    files = get_backend("files")
    path = files.using_path("book:1")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"not a claim")
    planted = {"files": path}
    if not server_skip("redis"):
        redis = get_backend("redis")
        name = redis.keys("book:1").lock
        redis.client.set(name, "not ours", px=60_000)
        planted["redis"] = name
    assert check_foreign_claims() == []  # reading every claim: only on --database
    warnings = check_foreign_claims(databases=["default"])
    assert ids(warnings) == ["occupy.W004"] * len(planted)
    by_backend = {w.obj: w.msg for w in warnings}
    for alias, name in planted.items():
        assert repr(name) in by_backend[f"OCCUPY['BACKENDS'][{alias!r}]"]
