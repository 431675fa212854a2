"""Bad input gets a clear error that names the problem, and nothing is written."""

from __future__ import annotations

import math

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

import occupy
from occupy.backends import get_backend


def claims_in_store() -> int:
    rows = get_backend("default").store.execute("SELECT COUNT(*) FROM occupy_occupation", [])[1]
    return int(rows[0][0])


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"key": ""}, ValueError, "key must not be empty"),
        ({"key": "x" * 256}, ValueError, "256 characters"),
        ({"key": None}, TypeError, "key must be a str, not NoneType"),
        ({"key": 17}, TypeError, "key must be a str, not int"),
        ({"key": b"book:1"}, TypeError, "not bytes"),
        ({"key": "nul\x00key"}, ValueError, "NUL"),
        ({"key": "bad\ud800surrogate"}, ValueError, "not valid Unicode"),
        ({"ttl": 0}, ValueError, "ttl must be positive, not 0"),
        ({"ttl": -5}, ValueError, "ttl must be positive, not -5"),
        ({"ttl": math.nan}, ValueError, "ttl must be a number of seconds, not NaN"),
        ({"ttl": math.inf}, ValueError, "ttl must be finite"),
        ({"ttl": "30"}, TypeError, "ttl must be a number of seconds, not str"),
        ({"ttl": True}, TypeError, "not bool"),
        ({"ttl": 10**12}, ValueError, "at most"),
        ({"ttl": 10**400}, ValueError, "at most"),
        ({"ttl": 1e-9}, ValueError, "ttl must be at least 0.001 seconds"),
        ({"ttl": 0.0009}, ValueError, "ttl must be at least 0.001 seconds"),
        ({"timeout": -math.inf}, ValueError, "timeout must be 0 or more"),
        ({"timeout": True}, TypeError, "timeout must be a number of seconds, not bool"),
        ({"timeout": -1}, ValueError, "timeout must be 0 or more"),
        ({"timeout": math.nan}, ValueError, "timeout must be a number of seconds, not NaN"),
        ({"timeout": "5"}, TypeError, "timeout must be a number of seconds, not str"),
        ({"owner": ""}, ValueError, "owner must not be empty"),
        ({"owner": 7}, TypeError, "owner must be a str"),
        ({"backend": "nope"}, occupy.InvalidBackendError, "'nope'"),
        ({"backend": None}, TypeError, "backend must be a backend alias"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_written(
    live_db: None, kwargs: dict, error: type[Exception], words: str
) -> None:
    arguments = {"key": "book:1", **kwargs}
    with pytest.raises(error) as info:
        occupy.acquire(**arguments)
    assert words in str(info.value)
    with pytest.raises(error):
        occupy.lock(**arguments).__enter__()
    assert claims_in_store() == 0


def test_the_invalid_backend_error_is_an_improperly_configured_and_an_occupy_error() -> None:

    assert issubclass(occupy.InvalidBackendError, ImproperlyConfigured)
    assert issubclass(occupy.InvalidBackendError, occupy.OccupyError)


@pytest.mark.parametrize("bad", [0, -1, math.nan, 1e-9, 1e10, math.inf])
def test_extend_checks_its_ttl(live_db: None, bad: float) -> None:
    lease = occupy.acquire("book:1")
    with pytest.raises(ValueError, match="ttl"):
        lease.extend(bad)
    occupy.release(lease)


def test_release_takes_a_lease(live_db: None) -> None:
    with pytest.raises(TypeError, match="takes a Lease"):
        occupy.release("book:1")


@pytest.mark.parametrize(
    "key",
    [
        "книга:1",
        "本:一",
        "emoji:📚",
        "quotes:'\";--",
        "percent:%s%%",
        "braces:{x}",
        "spaces: a b ",
        "back\\slash",
        "k" * 255,
        "joiner:👩\u200d💻",
        "nbsp:\u00a0",
    ],
)
def test_odd_but_valid_keys_work(alias: str, key: str) -> None:
    lease = occupy.acquire(key, owner="alice", backend=alias)
    assert occupy.holder(key, backend=alias).owner == "alice"
    with pytest.raises(occupy.Occupied):
        occupy.acquire(key, owner="bob", timeout=0, backend=alias)
    occupy.release(lease)
    assert occupy.holder(key, backend=alias) is None


#: Control characters, each refused in a key, an owner and a client label.
CONTROLS = {
    "newline": "\n",
    "carriage return": "\r",
    "tab": "\t",
    "BEL": "\x07",
    "ESC": "\x1b",
    "DEL": "\x7f",
    "C1 NEL": "\x85",
    "C1 CSI": "\x9b",
    "RLO": "\u202e",
    "RLI": "\u2067",
    "LRM": "\u200e",
    "ALM": "\u061c",
    "line separator": "\u2028",
}


@pytest.mark.parametrize("char", CONTROLS.values(), ids=CONTROLS.keys())
def test_control_characters_are_refused_in_keys_owners_and_clients(
    live_db: None, char: str
) -> None:
    """Before, ``acquire`` took a key or an owner holding any of them but NUL: a newline
    forged an extra row in ``list_locks``, ESC drove the operator's terminal."""
    from occupy.validation import check_client

    escaped = repr(char)[1:-1]
    for arguments in ({"key": f"book:{char}1"}, {"key": "book:1", "owner": f"ali{char}ce"}):
        with pytest.raises(ValueError, match="control characters") as info:
            occupy.acquire(**arguments)
        assert escaped in str(info.value) and char not in str(info.value)
    with pytest.raises(ValueError, match="control characters"):
        occupy.holder(f"book:{char}1")
    with pytest.raises(ValueError, match="Occupy-Client must not contain control"):
        check_client(f"tab{char}", name="Occupy-Client")
    assert claims_in_store() == 0


def test_printable_escapes_control_characters_as_repr_does() -> None:
    from occupy.validation import printable

    for char in CONTROLS.values():
        assert printable(f"a{char}b") == "a" + repr(char)[1:-1] + "b"
    for text in ("book:1", "книга:1", "back\\slash", "joiner:👩\u200d💻", "nbsp:\u00a0"):
        assert printable(text) == text


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ({"BACKENDS": {"default": {"BACKEND": "no.such.Backend"}}}, "Could not import"),
        ({"BACKENDS": {"default": {"BACKEND": "occupy.api.lock"}}}, "not a subclass"),
        ({"BACKENDS": {"defualt": {}}}, "must have a 'default' alias; it has ['defualt']"),
        ({"BACKENDS": ["default"]}, "must be a dict with a 'default' alias, not list"),
        ({"BACKENDS": {"default": {}}}, "dotted class path"),
        (
            {"TTL": 0, "BACKENDS": {"default": {"BACKEND": "occupy.backends.db.DatabaseBackend"}}},
            "OCCUPY['TTL'] must be positive",
        ),
        ({"TTL": 1e-9}, "OCCUPY['TTL'] must be at least 0.001 seconds"),
        ({"TTL": 1e10}, "OCCUPY['TTL'] must be at most"),
        ({"TIMEOUT": -1}, "OCCUPY['TIMEOUT'] must be 0 or more"),
        ({"TIMEOUT": "10"}, "OCCUPY['TIMEOUT'] must be a number of seconds, not str"),
        (
            {
                "BACKENDS": {
                    "default": {
                        "BACKEND": "occupy.backends.db.DatabaseBackend",
                        "OPTIONS": {"POLL_INTERVAL": 1e10},
                    }
                }
            },
            "['POLL_INTERVAL'] must be at most 315360000 seconds",
        ),
        (
            {
                "BACKENDS": {
                    "default": {
                        "BACKEND": "occupy.backends.db.DatabaseBackend",
                        "OPTIONS": {"POLL_INTERVAL": 1e-9},
                    }
                }
            },
            "['POLL_INTERVAL'] must be at least 0.001 seconds",
        ),
        ({"SURPRISE": 1}, "unknown keys ['SURPRISE']"),
    ],
)
def test_bad_settings_name_the_problem(live_db: None, setting: dict, words: str) -> None:
    """A backend's mistake is an ``InvalidBackendError``; any other setting's, Django's
    ``ImproperlyConfigured`` (its base)."""
    with override_settings(OCCUPY=setting), pytest.raises(ImproperlyConfigured) as info:
        occupy.acquire("book:1")
    assert words in str(info.value)
    about_a_backend = "BACKEND" in str(setting) and "TTL" not in setting
    assert isinstance(info.value, occupy.InvalidBackendError) == about_a_backend, info.value
    assert claims_in_store() == 0


@pytest.mark.parametrize(
    "forever", [None, math.inf, 10 * 365 * 24 * 3600 + 1, 1e10, 1e300, 10**400]
)
def test_a_wait_longer_than_ten_years_is_forever(forever: object) -> None:
    from occupy.validation import check_timeout

    assert check_timeout(forever) is None
    assert check_timeout(0) == 0.0
    assert check_timeout(10 * 365 * 24 * 3600) == 10 * 365 * 24 * 3600


def test_the_http_lease_ttls_follow_the_rule_for_durations() -> None:
    from occupy.conf import occupy_settings

    with (
        override_settings(OCCUPY={"REST_FRAMEWORK": {"LEASE_TTL": 1e-9}}),
        pytest.raises(
            ImproperlyConfigured, match=r"\['LEASE_TTL'\] must be at least 0.001 seconds"
        ) as raised,
    ):
        occupy_settings.REST_FRAMEWORK  # noqa: B018
    assert not isinstance(raised.value, occupy.InvalidBackendError)


def test_a_database_backend_on_an_unknown_database_names_it(live_db: None) -> None:
    setting = {
        "BACKENDS": {
            "default": {
                "BACKEND": "occupy.backends.db.DatabaseBackend",
                "OPTIONS": {"DATABASE": "nowhere"},
            }
        }
    }
    with (
        override_settings(OCCUPY=setting),
        pytest.raises(occupy.InvalidBackendError, match="'nowhere'"),
    ):
        occupy.acquire("book:1")


def test_no_occupy_setting_means_the_database_backend_on_default(live_db: None) -> None:
    from django.conf import settings

    from occupy.backends.db import DatabaseBackend
    from occupy.conf import occupy_settings

    try:
        with override_settings():
            del settings.OCCUPY
            occupy_settings.reload()  # deleting a setting sends no setting_changed
            backend = get_backend()
            assert isinstance(backend, DatabaseBackend) and backend.database == "default"
            occupy.release(occupy.acquire("book:1"))
    finally:
        occupy_settings.reload()
