"""The key family: the only part of a key that reaches an attribute. Its function is
called once per key, checked by ``check``, and never fails a lock."""

from __future__ import annotations

import logging
import uuid
from collections import Counter

import pytest
from django.conf import settings
from django.test import override_settings

import occupy
from occupy import telemetry
from occupy.checks import check_settings
from tests.support.aliases import backend_params
from tests.support.telemetry import Recorded

#: Not a function: ``check`` must say so.
NOT_A_FUNCTION = 42

calls: Counter[str] = Counter()


def counting_family(key: str) -> str:
    """Count the calls per key (a test's own hook); the family is the part before ':'."""
    calls[key] += 1
    return key.partition(":")[0]


def failing_family(key: str) -> str:
    """Fail as a buggy hook would."""
    raise KeyError("no tenant in this key")


def not_a_str_family(key: str) -> None:
    """Return nothing, as a hook missing its return would."""


def tenant_family(key: str) -> str:
    """Map ``tenant-<id>/<family>:<id>`` to ``<family>-<id>`` (a test's own hook)."""
    tenant, _, rest = key.partition("/")
    return f"{rest.partition(':')[0]}-{tenant.removeprefix('tenant-')}"


def _telemetry(**values: object) -> override_settings:
    return override_settings(OCCUPY={**settings.OCCUPY, "TELEMETRY": values})


def _at_once(otel: Recorded, family: str) -> float:
    return otel.total(
        "occupy.lock.acquires",
        **{"occupy.key.family": family, "occupy.outcome": "granted_at_once"},
    )


def test_the_key_family_setting_names_the_function(otel: Recorded, live_db: None) -> None:
    tenant = uuid.uuid4().hex[:8]
    with (
        _telemetry(KEY_FAMILY="tests.telemetry.test_family.tenant_family"),
        occupy.lock(f"tenant-{tenant}/report:9", backend="memory"),
    ):
        pass
    assert _at_once(otel, f"report-{tenant}") == 1


def test_a_key_without_a_colon_is_family_other(otel: Recorded, live_db: None) -> None:
    assert telemetry.family("report-2026-11-26") == "other"
    assert telemetry.family("library.book:3") == "library.book"


def test_the_family_function_is_called_once_per_key(
    otel: Recorded, family: str, live_db: None
) -> None:
    first, second = f"{family}:1", f"{family}:2"
    calls.clear()
    with _telemetry(KEY_FAMILY="tests.telemetry.test_family.counting_family"):
        for _ in range(5):
            for key in (first, second):
                with occupy.lock(key, backend="memory"):
                    pass
        holder = occupy.acquire(first, owner="ann", backend="memory")
        with pytest.raises(occupy.Occupied):  # a refusal reads the family too
            occupy.acquire(first, owner="bob", timeout=0, backend="memory")
        occupy.release(holder)
    assert calls == {first: 1, second: 1}
    assert _at_once(otel, family) == 11


def test_a_new_key_family_setting_regroups_keys_seen_before(otel: Recorded, live_db: None) -> None:
    # A key's attributes are cached: a reload of the settings must forget them.
    tenant = uuid.uuid4().hex[:8]
    key = f"tenant-{tenant}/report:9"
    with occupy.lock(key, backend="memory"):
        pass
    with (
        _telemetry(KEY_FAMILY="tests.telemetry.test_family.tenant_family"),
        occupy.lock(key, backend="memory"),
    ):
        pass
    with occupy.lock(key, backend="memory"):
        pass
    assert _at_once(otel, f"tenant-{tenant}/report") == 2
    assert _at_once(otel, f"report-{tenant}") == 1


@pytest.mark.parametrize("hook", ["failing_family", "not_a_str_family"])
@pytest.mark.parametrize("alias", backend_params(["memory", "redis"]))
def test_a_family_function_that_fails_never_fails_a_lock(
    otel: Recorded, family: str, hook: str, alias: str, caplog, live_db: None
) -> None:
    with (
        caplog.at_level(logging.ERROR, logger="occupy.telemetry"),
        _telemetry(KEY_FAMILY=f"tests.telemetry.test_family.{hook}"),
    ):
        for number in range(3):
            with occupy.lock(f"{family}:{number}", backend=alias) as lease:
                assert lease.key == f"{family}:{number}"
        holder = occupy.acquire(f"{family}:0", owner="ann", backend=alias)
        with pytest.raises(occupy.LockTimeout):  # a wait reads the family on its own path
            occupy.acquire(f"{family}:0", owner="bob", timeout=0.1, backend=alias)
        occupy.release(holder)
    failures = [r for r in caplog.records if "KEY_FAMILY" in r.getMessage()]
    assert len(failures) == 1, [r.getMessage() for r in failures]  # logged once
    assert f"{family}:" not in failures[0].getMessage()
    assert _at_once(otel, family) == 4  # recorded under the default family instead


def test_a_key_family_that_is_not_a_function_never_fails_a_lock(
    otel: Recorded, family: str, caplog, live_db: None
) -> None:
    with (
        caplog.at_level(logging.ERROR, logger="occupy.telemetry"),
        _telemetry(KEY_FAMILY="tests.telemetry.test_family.NOT_A_FUNCTION"),
    ):
        with occupy.lock(f"{family}:1", backend="memory"):
            pass
        with occupy.lock(f"{family}:2", backend="memory"):
            pass
    assert len([r for r in caplog.records if "KEY_FAMILY" in r.getMessage()]) == 1
    assert _at_once(otel, family) == 2


@pytest.mark.parametrize(
    ("values", "says"),
    [
        (
            {"KEY_FAMILY": "tests.telemetry.test_family.NOT_A_FUNCTION"},
            "is of type int, not a function",
        ),
        ({"KEY_FAMILY": "tests.telemetry.test_family.nowhere"}, "cannot be imported"),
        ({"KEY_FAMILY": 3}, "must be the dotted path of a function"),
        ({"WAIT_SPAN_THRESHOLD": -1}, "0 or more"),
        ({"WAIT_SPAN_THRESHOLD": "1ms"}, "must be a number of seconds"),
        ({"WAIT_SPAN_THRESHOLD": None}, "must be a number of seconds"),
        ({"TRACE_EVERY_SECTION": "yes"}, "must be True or False"),
        ({"TRACE_ALL": True}, "unknown keys ['TRACE_ALL']"),
    ],
)
def test_check_reports_each_wrong_telemetry_setting(values: dict[str, object], says: str) -> None:
    with _telemetry(**values):
        messages = check_settings()
    assert [m.id for m in messages] == ["occupy.E007"]
    assert says in messages[0].msg
    assert messages[0].hint and "settings" in messages[0].hint


def test_check_accepts_the_telemetry_settings() -> None:
    with _telemetry(
        KEY_FAMILY="tests.telemetry.test_family.tenant_family",
        WAIT_SPAN_THRESHOLD=0.25,
        TRACE_EVERY_SECTION=True,
    ):
        assert check_settings() == []
    with _telemetry(WAIT_SPAN_THRESHOLD=float("inf")):
        assert check_settings() == []
