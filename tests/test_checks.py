"""System checks: the loop over backends, the settings values, the ids, W001, W004."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from django.core.checks import run_checks
from django.test import override_settings
from django.test.utils import isolate_apps

from occupy.backends import get_backend
from occupy.checks import check_backends, check_settings, check_stores
from occupy.exceptions import InvalidBackendError
from tests.support.aliases import server_skip


def ids(messages) -> list[str]:
    return [m.id for m in messages]


def test_the_test_settings_pass_every_check(live_db: None) -> None:
    """Every check passes, but for the W303 of each document API that races writers
    on one server's store (``DOCUMENT_BACKENDS``): it locks Document's keys outside
    the model's store on purpose, and the check says so."""
    from tests.testapp.api import DOCUMENT_BACKENDS

    messages = [m for m in run_checks(databases=["default"]) if m.id.startswith("occupy")]
    racing = [m for m in messages if m.id == "occupy.W303"]
    assert [m for m in messages if m not in racing] == []
    assert sorted(m.obj.__name__ for m in racing) == sorted(
        f"DocumentViewSet_{alias.replace('-', '_')}" for alias in DOCUMENT_BACKENDS
    )


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
    assert ids(check_settings()) == ["occupy.E002"]


@override_settings(
    OCCUPY={
        "BACKENDS": {
            "default": {
                "BACKEND": "occupy.backends.db.DatabaseBackend",
                "OPTIONS": {"DATABASE": "nowhere"},
            }
        }
    }
)
def test_a_database_backend_on_an_unknown_database_is_e003() -> None:
    errors = check_backends()
    assert ids(errors) == ["occupy.E003"] and "'nowhere'" in errors[0].msg


def test_a_missing_occupation_table_is_w001(live_db: None) -> None:
    from django.db import connection

    assert check_stores(databases=["default"]) == []
    with connection.schema_editor() as editor:
        from occupy.models import Occupation

        editor.delete_model(Occupation)
    try:
        warnings = check_stores(databases=["default"])
        assert ids(warnings) == ["occupy.W001"]
        assert "migrate occupy zero --fake" in warnings[0].hint
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
    assert check_stores() == []  # reading every claim: only on --database
    warnings = [w for w in check_stores(databases=["default"]) if w.id == "occupy.W004"]
    assert ids(warnings) == ["occupy.W004"] * len(planted)
    by_backend = {w.obj: w.msg for w in warnings}
    for alias, name in planted.items():
        assert repr(name) in by_backend[f"OCCUPY['BACKENDS'][{alias!r}]"]


@pytest.mark.parametrize(
    ("config", "named"),
    [
        (
            {"BACKEND": "occupy.backends.db.DatabaseBackend", "OPTIONS": {"POLL_INTERVALL": 0.1}},
            "'POLL_INTERVALL'",
        ),
        (
            {"BACKEND": "occupy.backends.db.DatabaseBackend", "OPTIONS": {"DATABSE": "other"}},
            "'DATABSE'",
        ),
        (
            {"BACKEND": "occupy.backends.db.DatabaseBackend", "OPTION": {"DATABASE": "other"}},
            "'OPTION'",
        ),
        (
            {"BACKEND": "occupy.backends.db.DatabaseBackend", "OPTIONS": {"POLL_INTERVAL": -1}},
            "POLL_INTERVAL",
        ),
        (
            {"BACKEND": "occupy.backends.db.DatabaseBackend", "OPTIONS": {"PREPARE": "yes"}},
            "PREPARE",
        ),
        (
            {
                "BACKEND": "occupy.backends.cache.CacheBackend",
                "OPTIONS": {"CACHE": "default", "SINGLE_PROCES": True},
            },
            "'SINGLE_PROCES'",
        ),
        (
            {
                "BACKEND": "occupy.backends.file.FileBackend",
                "LOCATION": "/tmp/occupy-typo",
                "OPTIONS": {"POLL_INTERVALL": 0.1},
            },
            "'POLL_INTERVALL'",
        ),
        ({"BACKEND": "occupy.backends.file.FileBackend"}, "LOCATION"),
        (
            {"BACKEND": "occupy.backends.redis.RedisBackend", "OPTIONS": {"QUEUE_TTL": 0.1}},
            "QUEUE_TTL",
        ),
        ({"BACKEND": "occupy.backends.redis.RedisBackend", "OPTIONS": {"PREFX": "x:"}}, "'PREFX'"),
    ],
)
def test_a_typo_or_a_bad_value_in_any_backend_is_e006_and_refused(config, named) -> None:
    """What ``check`` reports is what building the backend refuses, naming the key."""
    with override_settings(
        OCCUPY={
            "BACKENDS": {
                "default": {"BACKEND": "occupy.backends.db.DatabaseBackend"},
                "typo": config,
            }
        }
    ):
        errors = [m for m in check_backends() if m.id == "occupy.E006"]
        assert len(errors) == 1, check_backends()
        assert "'typo'" in errors[0].msg and named in errors[0].msg
        with pytest.raises(InvalidBackendError) as raised:
            get_backend("typo")
        assert str(raised.value) == errors[0].msg


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("TTL", -5),
        ("TTL", "60"),
        ("TIMEOUT", -1),
        ("REST_FRAMEWORK", {"LEASE_TTL": 0}),
        ("TELEMETRY", {"KEY_FAMILY": 3}),
        ("TELEMETRY", {"KEY_FAMILY": "no.such.family"}),
        ("REST_FRAMEWORK", {"LEASE_WAIT_MAX": -1}),
        ("REST_FRAMEWORK", {"LEASE_WAIT_MAX": 1.5}),
        ("REST_FRAMEWORK", {"LEASE_WAIT_MAX": 31}),
        ("REST_FRAMEWORK", {"LEASE_WAIT_MAX": True}),
        ("TELEMETRY", {"FAMILY": None}),
        ("TELEMETRY", "yes"),
    ],
)
def test_a_bad_setting_value_is_e007(name: str, value: object) -> None:
    with override_settings(OCCUPY={name: value}):
        errors = check_settings()
        assert ids(errors) == ["occupy.E007"] and name in errors[0].msg


@pytest.mark.parametrize("path", ["tests.support.tcp_proxy", "tests.support"])
def test_a_key_family_that_names_a_module_is_told_so(path: str) -> None:
    """A module's path (imported by its package or not) is no function: E007 says it
    is a module, never that its package "does not define" it."""
    with override_settings(OCCUPY={"TELEMETRY": {"KEY_FAMILY": path}}):
        errors = check_settings()
    assert ids(errors) == ["occupy.E007"]
    assert f"{path!r} is a module: name a function in it" in errors[0].msg, errors[0].msg
    assert "does not define" not in errors[0].msg


def test_w007_for_a_sentinel_cache_is_one_short_sentence(live_db: None) -> None:
    """redis-py's "No master found" names every sentinel by its full client repr
    (about a thousand characters each): W007 names each by its address."""
    pytest.importorskip("django_redis")
    from django.conf import settings
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    sentinel = {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": "redis://mymaster/0",
        "OPTIONS": {
            "CLIENT_CLASS": "django_redis.client.SentinelClient",
            "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
            "SENTINELS": [("127.0.0.1", 9), ("127.0.0.2", 9)],
            "SOCKET_TIMEOUT": 0.5,
            "SOCKET_CONNECT_TIMEOUT": 0.5,
            # No retry of the refused sentinels: redis-py's default backs off for about
            # 9 s before the same "No master found", the error the check words.
            "SENTINEL_KWARGS": {
                "socket_timeout": 0.5,
                "socket_connect_timeout": 0.5,
                "retry": Retry(NoBackoff(), 0),
            },
        },
    }
    with override_settings(
        CACHES={**settings.CACHES, "sentinel": sentinel},
        OCCUPY={
            "BACKENDS": {
                "default": {"BACKEND": "occupy.backends.db.DatabaseBackend"},
                "sentinel": {
                    "BACKEND": "occupy.backends.redis.RedisBackend",
                    "OPTIONS": {"CACHE": "sentinel", "MIN_REPLICAS": 1},
                },
            }
        },
    ):
        warnings = [w for w in check_stores(databases=["default"]) if w.id == "occupy.W007"]
    assert len(warnings) == 1
    message = warnings[0].msg
    assert "No master found for 'mymaster'" in message, message
    assert "127.0.0.1:9" in message and "127.0.0.2:9" in message, message
    assert "<" not in message and "redis.connection" not in message, message
    assert len(message) < 300 and "\n" not in message, message


def test_every_check_id_names_one_problem() -> None:
    """docs/reference/checks.md lists each id once, and exactly the ids occupy's code
    reports (the page cannot drift from the checks)."""
    root = Path(__file__).resolve().parent.parent
    listed = re.findall(
        r"^\| `(occupy\.[EW]\d{3})` \|", (root / "docs/reference/checks.md").read_text(), re.M
    )
    reported = {
        found
        for path in (root / "occupy").rglob("*.py")
        for found in re.findall(r'id="(occupy\.[EW]\d{3})"', path.read_text())
    }
    assert len(listed) == len(set(listed)) >= 12
    assert set(listed) == reported


def test_a_backend_with_only_warnings_is_still_looked_into(
    tmp_path, monkeypatch, live_db: None
) -> None:
    """A relative LOCATION is W003, not a reason to skip the store's own W004."""
    monkeypatch.chdir(tmp_path)
    with override_settings(
        OCCUPY={
            "BACKENDS": {
                "default": {"BACKEND": "occupy.backends.db.DatabaseBackend"},
                "relative": {"BACKEND": "occupy.backends.file.FileBackend", "LOCATION": "locks"},
            }
        }
    ):
        path = get_backend("relative").using_path("book:1")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(b"not a claim")
        assert "occupy.W003" in ids(check_backends())
        assert ids(check_stores(databases=["default"])) == ["occupy.W004"]


def test_e201_names_a_manager_of_ones_own_in_manage_py_check() -> None:
    """Through ``manage.py check``'s model checks: the mixins combined with no manager
    declared pass; a manager of one's own without what they add is ``occupy.E201``."""
    from django.db import models

    from occupy.models import OccupiableMixin, VersionedMixin

    with isolate_apps("tests.testapp") as registry:

        class Combined(VersionedMixin, OccupiableMixin, models.Model):  # noqa: DJ008
            class Meta:
                app_label = "testapp"

        class OwnManager(VersionedMixin, OccupiableMixin, models.Model):  # noqa: DJ008
            objects = models.Manager()

            class Meta:
                app_label = "testapp"

        messages = run_checks(app_configs=[registry.get_app_config("testapp")], tags=["models"])
    found = [(m.obj, m.id) for m in messages if m.id.startswith("occupy.")]
    assert found == [(OwnManager, "occupy.E201"), (OwnManager, "occupy.E201")]


@pytest.mark.parametrize(
    "cache",
    [
        "django.core.cache.backends.locmem.LocMemCache",
        "django.core.cache.backends.redis.RedisCache",
    ],
)
def test_a_redis_backend_on_a_cache_that_is_not_django_redis_is_e008(cache: str) -> None:
    pytest.importorskip("django_redis")
    caches = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "other": {"BACKEND": cache, "LOCATION": "redis://127.0.0.1:16601/0"},
    }
    with override_settings(
        CACHES=caches,
        OCCUPY={
            "BACKENDS": {
                "default": {"BACKEND": "occupy.backends.db.DatabaseBackend"},
                "redis": {
                    "BACKEND": "occupy.backends.redis.RedisBackend",
                    "OPTIONS": {"CACHE": "other"},
                },
            }
        },
    ):
        errors = check_backends()
    assert ids(errors) == ["occupy.E008"]
    assert "'other'" in errors[0].msg and cache in errors[0].msg
    assert "django_redis.cache.RedisCache" in errors[0].hint


def test_a_default_lease_ttl_above_the_longest_is_e007() -> None:
    with override_settings(OCCUPY={"REST_FRAMEWORK": {"LEASE_TTL": 900, "LEASE_TTL_MAX": 600}}):
        errors = check_settings()
    assert ids(errors) == ["occupy.E007"]
    assert "LEASE_TTL" in errors[0].msg and "LEASE_TTL_MAX (600 s)" in errors[0].msg


def test_a_database_occupy_was_never_migrated_to_is_w006(live_db: None) -> None:
    from django.db import connection
    from django.db.migrations.recorder import MigrationRecorder

    from occupy.models import Occupation

    recorder = MigrationRecorder(connection)
    applied = [name for app, name in recorder.applied_migrations() if app == "occupy"]
    with connection.schema_editor() as editor:
        editor.delete_model(Occupation)
    for name in applied:
        recorder.record_unapplied("occupy", name)
    try:
        warnings = check_stores(databases=["default"])
    finally:
        for name in applied:
            recorder.record_applied("occupy", name)
        with connection.schema_editor() as editor:
            editor.create_model(Occupation)
        get_backend("default").close()
    assert ids(warnings) == ["occupy.W006"]
    assert "never applied to database 'default'" in warnings[0].msg
    assert warnings[0].hint == "Run 'python manage.py migrate occupy --database default'."


@pytest.mark.parametrize(
    "occupy_setting",
    [
        {"TIMOUT": 5},
        {"BACKENDS": {"locks": {"BACKEND": "occupy.backends.db.DatabaseBackend"}}},
    ],
    ids=["misspelled-key", "no-default-alias"],
)
def test_a_broken_setting_is_one_e002_with_every_occupy_class_in_use(occupy_setting) -> None:
    """``check`` with the test app's occupy models and admins registered: the setting
    is reported once, by its own check, and no model or admin check that reads the
    aliases raises (or repeats it as E102/E203)."""
    with override_settings(OCCUPY=occupy_setting):
        messages = [m for m in run_checks() if m.id.startswith("occupy.")]
    assert ids(messages) == ["occupy.E002"], messages


def test_a_models_backend_that_is_not_configured_is_e203(monkeypatch) -> None:
    from tests.testapp.models import Book

    monkeypatch.setattr(Book, "occupy_backend", "locks")
    errors = [m for m in Book.check() if m.id.startswith("occupy.")]
    assert ids(errors) == ["occupy.E203"]
    assert errors[0].obj is Book
    assert errors[0].msg.startswith("Book.occupy_backend is 'locks', which OCCUPY['BACKENDS']")


def test_migrate_on_a_new_projects_database_warns_of_nothing(tmp_path) -> None:
    """``migrate`` runs the database checks before it migrates: on a database where
    nothing was migrated yet (a new project, ``make demo``) occupy's table is about to
    be made, and no warning says to run the command that is running."""
    import subprocess
    import sys

    from tests.support.example_site import ROOT, example_env

    done = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--verbosity", "0"],
        cwd=ROOT,
        env=example_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "occupy." not in done.stdout + done.stderr, done.stdout + done.stderr


def test_a_store_that_cannot_be_reached_is_w007_not_w004(live_db: None) -> None:
    pytest.importorskip("django_redis")
    from django.conf import settings

    caches = {
        **settings.CACHES,
        "down": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": "redis://127.0.0.1:16601/0",
            "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1},
        },
    }
    with override_settings(
        CACHES=caches,
        OCCUPY={
            "BACKENDS": {
                "default": {"BACKEND": "occupy.backends.db.DatabaseBackend"},
                "down": {
                    "BACKEND": "occupy.backends.redis.RedisBackend",
                    "OPTIONS": {"CACHE": "down"},
                },
            }
        },
    ):
        warnings = check_stores(databases=["default"])
    assert ids(warnings) == ["occupy.W007"]
    assert warnings[0].obj == "OCCUPY['BACKENDS']['down']"
    assert "could not read cache 'down' (redis://127.0.0.1:16601/0)" in warnings[0].msg
    assert warnings[0].hint.startswith("Check that this Redis server answers")
