"""The one place that reads the ``OCCUPY`` setting.

Like DRF's ``api_settings``: a namespaced dict with defaults, read lazily, cached, and
reloaded when a test changes it with ``override_settings``.

    OCCUPY = {
        "BACKENDS": {"default": {"BACKEND": "occupy.backends.db.DatabaseBackend"}},
        "TTL": 60,          # seconds a lease lives unless extended
        "TIMEOUT": 10,      # seconds to wait for a held key (0: do not wait, None: forever)
    }

No ``OCCUPY`` at all means the database backend on the ``default`` database.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from occupy.exceptions import InvalidBackendError
from occupy.validation import check_timeout, check_ttl, check_write_wait

__all__ = ["DEFAULTS", "occupy_settings"]

_T = TypeVar("_T")

DEFAULT_BACKEND = "occupy.backends.db.DatabaseBackend"

#: The HTTP contract's settings (``OCCUPY["REST_FRAMEWORK"]``), each overridable alone.
REST_FRAMEWORK_DEFAULTS: dict[str, Any] = {
    "PRECONDITION_REQUIRED": ("PUT", "PATCH", "DELETE"),
    "LEASE_HEADER": "Occupy-Lease",
    "CLIENT_HEADER": "Occupy-Client",
    "LEASE_TTL": 120,
    "LEASE_TTL_MAX": 600,
    # How long a write without an edit lease waits for another request's write in
    # flight (first come, first served) before answering 423.
    "WRITE_WAIT": 2,
    # The longest wait a lease request's `Prefer: wait=N` is granted, in whole seconds
    # (a waiting request holds a worker for that long).
    "LEASE_WAIT_MAX": 10,
    "PROBLEM_TYPE_BASE": "about:blank",
}
#: The longest ``LEASE_WAIT_MAX`` accepted: beyond it, workers' own timeouts (30 s in
#: gunicorn) would end the request first.
LEASE_WAIT_LIMIT = 30

#: What the OpenTelemetry instrumentation records (``OCCUPY["TELEMETRY"]``).
TELEMETRY_DEFAULTS: dict[str, Any] = {
    # A dotted path to a function key -> family (the only part of a key that reaches a
    # metric or span attribute); None: the part before the first ":".
    "KEY_FAMILY": None,
    # An acquire that waited at least this long (seconds) gets a span of its own; a
    # shorter wait is in the wait histogram only.
    "WAIT_SPAN_THRESHOLD": 0.001,
    # One span per section (acquire to release) of every lease this process holds,
    # besides the spans of waits and failures.
    "TRACE_EVERY_SECTION": False,
}

DEFAULTS: dict[str, Any] = {
    "BACKENDS": {"default": {"BACKEND": DEFAULT_BACKEND}},
    "TTL": 60,
    "TIMEOUT": 10,
    "REST_FRAMEWORK": REST_FRAMEWORK_DEFAULTS,
    "TELEMETRY": TELEMETRY_DEFAULTS,
}


class OccupySettings:
    """Validated, cached view of ``settings.OCCUPY`` merged over :data:`DEFAULTS`."""

    def __init__(self) -> None:
        self._cache: dict[str, Any] = {}
        self._rest_framework: dict[str, Any] | None = None
        self._reload_hooks: list[Callable[[], None]] = []

    def on_reload(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` whenever the settings are reloaded (to drop built backends)."""
        self._reload_hooks.append(hook)

    def reload(self) -> None:
        """Forget what was read; the next access reads ``settings.OCCUPY`` again."""
        self._cache.clear()
        self._rest_framework = None
        for hook in self._reload_hooks:
            hook()

    @property
    def user_settings(self) -> dict[str, Any]:
        """Return ``settings.OCCUPY`` as the project wrote it (``{}`` when absent)."""
        value = getattr(django_settings, "OCCUPY", None) or {}
        if not isinstance(value, dict):
            raise ImproperlyConfigured(
                f"settings.OCCUPY must be a dict, not {type(value).__name__}."
            )
        unknown = set(value) - set(DEFAULTS)
        if unknown:
            raise ImproperlyConfigured(
                f"settings.OCCUPY has unknown keys {sorted(unknown)}; "
                f"known keys are {sorted(DEFAULTS)}."
            )
        return value

    def _get(self, name: str) -> Any:
        if name not in self._cache:
            self._cache[name] = self.user_settings.get(name, DEFAULTS[name])
        return self._cache[name]

    @property
    def BACKENDS(self) -> dict[str, dict[str, Any]]:
        """Return the backend configurations by alias."""
        backends = self._get("BACKENDS")
        if not isinstance(backends, dict):
            raise InvalidBackendError(
                "settings.OCCUPY['BACKENDS'] must be a dict with a 'default' alias, not "
                f"{type(backends).__name__}."
            )
        if "default" not in backends:
            raise InvalidBackendError(
                "settings.OCCUPY['BACKENDS'] must have a 'default' alias; it has "
                f"{sorted(map(str, backends))}."
            )
        return backends

    @property
    def TTL(self) -> float:
        """Return the default lease lifetime in seconds."""
        return _seconds(check_ttl, "OCCUPY['TTL']", self._get("TTL"))

    @property
    def TIMEOUT(self) -> float | None:
        """Return the default wait in seconds (``None``: wait forever)."""
        return _seconds(check_timeout, "OCCUPY['TIMEOUT']", self._get("TIMEOUT"))

    def _section(self, name: str, defaults: dict[str, Any]) -> dict[str, Any]:
        """Return ``OCCUPY[name]``, a dict of optional keys, merged over ``defaults``;
        raise ``ImproperlyConfigured`` for a value that is not a dict or has a key not
        in them."""
        value = self._get(name)
        if not isinstance(value, dict):
            raise ImproperlyConfigured(f"settings.OCCUPY[{name!r}] must be a dict.")
        unknown = set(value) - set(defaults)
        if unknown:
            raise ImproperlyConfigured(
                f"settings.OCCUPY[{name!r}] has unknown keys {sorted(unknown)}; "
                f"known keys are {sorted(defaults)}."
            )
        return {**defaults, **value}

    @property
    def REST_FRAMEWORK(self) -> dict[str, Any]:
        """Return the HTTP contract's settings, the project's over the defaults."""
        if self._rest_framework is None:
            merged = self._section("REST_FRAMEWORK", REST_FRAMEWORK_DEFAULTS)
            methods = merged["PRECONDITION_REQUIRED"]
            if isinstance(methods, str) or not all(isinstance(m, str) for m in methods):
                raise ImproperlyConfigured(
                    "settings.OCCUPY['REST_FRAMEWORK']"
                    "['PRECONDITION_REQUIRED'] must be a list of methods."
                )
            merged["PRECONDITION_REQUIRED"] = tuple(m.upper() for m in methods)
            for name in ("LEASE_TTL", "LEASE_TTL_MAX"):
                _seconds(check_ttl, f"OCCUPY['REST_FRAMEWORK'][{name!r}]", merged[name])
            merged["WRITE_WAIT"] = _seconds(
                check_write_wait, "OCCUPY['REST_FRAMEWORK']['WRITE_WAIT']", merged["WRITE_WAIT"]
            )
            cap = merged["LEASE_WAIT_MAX"]
            if (
                isinstance(cap, bool)
                or not isinstance(cap, int)
                or not 0 <= cap <= LEASE_WAIT_LIMIT
            ):
                raise ImproperlyConfigured(
                    "settings.OCCUPY['REST_FRAMEWORK']['LEASE_WAIT_MAX'] is the longest a lease "
                    "request may wait with 'Prefer: wait=N', in whole seconds from 0 (no "
                    f"waiting) to {LEASE_WAIT_LIMIT}, not {cap!r}."
                )
            if merged["LEASE_TTL"] > merged["LEASE_TTL_MAX"]:
                raise ImproperlyConfigured(
                    "settings.OCCUPY['REST_FRAMEWORK']['LEASE_TTL'] "
                    f"({merged['LEASE_TTL']!r} s) is above LEASE_TTL_MAX "
                    f"({merged['LEASE_TTL_MAX']!r} s): a lease asked for without a ttl would "
                    "outlive the longest one allowed. Lower LEASE_TTL or raise LEASE_TTL_MAX."
                )
            self._rest_framework = merged
        return self._rest_framework

    @property
    def TELEMETRY(self) -> dict[str, Any]:
        """Return the telemetry settings, the project's over the defaults."""
        # Not under "TELEMETRY", where _get caches the project's own value.
        if "TELEMETRY merged" not in self._cache:
            merged = self._section("TELEMETRY", TELEMETRY_DEFAULTS)
            _key_family(merged["KEY_FAMILY"])
            threshold = merged["WAIT_SPAN_THRESHOLD"]
            if (
                isinstance(threshold, bool)
                or not isinstance(threshold, int | float)
                or not threshold >= 0
            ):
                raise ImproperlyConfigured(
                    "settings.OCCUPY['TELEMETRY']['WAIT_SPAN_THRESHOLD'] must be a number of "
                    "seconds, 0 or more (0: a span for every acquire that waited; infinity: "
                    f"none), not {threshold!r}."
                )
            if not isinstance(merged["TRACE_EVERY_SECTION"], bool):
                raise ImproperlyConfigured(
                    "settings.OCCUPY['TELEMETRY']['TRACE_EVERY_SECTION'] must be True or False, "
                    f"not {merged['TRACE_EVERY_SECTION']!r}."
                )
            self._cache["TELEMETRY merged"] = merged
        return self._cache["TELEMETRY merged"]  # type: ignore[no-any-return]


def _key_family(path: Any) -> None:
    """Raise ``ImproperlyConfigured`` unless ``path`` is ``None`` or the dotted path of a
    callable (``OCCUPY["TELEMETRY"]["KEY_FAMILY"]``)."""
    name = "settings.OCCUPY['TELEMETRY']['KEY_FAMILY']"
    if path is None:
        return
    if not isinstance(path, str):
        raise ImproperlyConfigured(
            f"{name} must be the dotted path of a function (key -> family) or None, not {path!r}."
        )
    try:
        found = import_string(path)
    except ImportError as e:
        if not _is_module(path):
            raise ImproperlyConfigured(f"{name} = {path!r} cannot be imported: {e}") from e
        found = None  # a module its package does not import: not "does not define" it
    if found is None or isinstance(found, ModuleType):
        raise ImproperlyConfigured(
            f"{name} = {path!r} is a module: name a function in it (key -> family), "
            f"such as '{path}.<function>'."
        )
    if not callable(found):
        raise ImproperlyConfigured(
            f"{name} = {path!r} is of type {type(found).__name__}, not a function: it must name a "
            "function that takes a key and returns its family."
        )


def _is_module(path: str) -> bool:
    """Return whether ``path`` names an importable module."""
    try:
        return importlib.util.find_spec(path) is not None
    except (ImportError, ValueError):
        return False


def _seconds(check: Callable[..., _T], name: str, value: Any) -> _T:
    """Return ``value`` checked by the rule for durations (``occupy.validation``), or
    raise ``ImproperlyConfigured`` naming the setting."""
    try:
        return check(value, name=f"settings.{name}")
    except (TypeError, ValueError) as e:
        raise ImproperlyConfigured(str(e)) from e


occupy_settings = OccupySettings()


@receiver(setting_changed)
def _reload_on_change(*, setting: str, **kwargs: Any) -> None:
    if setting in ("OCCUPY", "DATABASES", "CACHES"):
        occupy_settings.reload()
