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

import math
from collections.abc import Callable
from typing import Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from occupy.exceptions import InvalidBackendError

__all__ = ["DEFAULTS", "occupy_settings"]

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
    "PROBLEM_TYPE_BASE": "about:blank",
}

DEFAULTS: dict[str, Any] = {
    "BACKENDS": {"default": {"BACKEND": DEFAULT_BACKEND}},
    "TTL": 60,
    "TIMEOUT": 10,
    "REST_FRAMEWORK": REST_FRAMEWORK_DEFAULTS,
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
            raise InvalidBackendError(
                f"settings.OCCUPY must be a dict, not {type(value).__name__}."
            )
        unknown = set(value) - set(DEFAULTS)
        if unknown:
            raise InvalidBackendError(
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
        if not isinstance(backends, dict) or "default" not in backends:
            raise InvalidBackendError(
                "settings.OCCUPY['BACKENDS'] must be a dict with a 'default' alias."
            )
        return backends

    @property
    def TTL(self) -> float:
        """Return the default lease lifetime in seconds."""
        return _positive_seconds("OCCUPY['TTL']", self._get("TTL"))

    @property
    def TIMEOUT(self) -> float | None:
        """Return the default wait in seconds (``None``: wait forever)."""
        value = self._get("TIMEOUT")
        if value is None:
            return None
        return _positive_seconds("OCCUPY['TIMEOUT']", value, allow_zero=True)


    @property
    def REST_FRAMEWORK(self) -> dict[str, Any]:
        """Return the HTTP contract's settings, the project's over the defaults."""
        if self._rest_framework is None:
            value = self._get("REST_FRAMEWORK")
            if not isinstance(value, dict):
                raise InvalidBackendError("settings.OCCUPY['REST_FRAMEWORK'] must be a dict.")
            unknown = set(value) - set(REST_FRAMEWORK_DEFAULTS)
            if unknown:
                raise InvalidBackendError(
                    f"settings.OCCUPY['REST_FRAMEWORK'] has unknown keys {sorted(unknown)}; "
                    f"known keys are {sorted(REST_FRAMEWORK_DEFAULTS)}.")
            merged = {**REST_FRAMEWORK_DEFAULTS, **value}
            methods = merged["PRECONDITION_REQUIRED"]
            if isinstance(methods, str) or not all(isinstance(m, str) for m in methods):
                raise InvalidBackendError("settings.OCCUPY['REST_FRAMEWORK']"
                                          "['PRECONDITION_REQUIRED'] must be a list of methods.")
            merged["PRECONDITION_REQUIRED"] = tuple(m.upper() for m in methods)
            for name in ("LEASE_TTL", "LEASE_TTL_MAX"):
                _positive_seconds(f"OCCUPY['REST_FRAMEWORK'][{name!r}]", merged[name])
            merged["WRITE_WAIT"] = _positive_seconds("OCCUPY['REST_FRAMEWORK']['WRITE_WAIT']",
                                                     merged["WRITE_WAIT"], allow_zero=True)
            if merged["WRITE_WAIT"] > 60:
                raise InvalidBackendError(
                    "settings.OCCUPY['REST_FRAMEWORK']['WRITE_WAIT'] is how long a write waits "
                    "for another write in flight: a few seconds at most, not "
                    f"{merged['WRITE_WAIT']!r} (a request would hang for that long).")
            self._rest_framework = merged
        return self._rest_framework


def _positive_seconds(name: str, value: Any, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidBackendError(f"settings.{name} must be a finite number, not {value!r}.")
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidBackendError(f"settings.{name} must be positive, not {value!r}.")
    return float(value)


occupy_settings = OccupySettings()


@receiver(setting_changed)
def _reload_on_change(*, setting: str, **kwargs: Any) -> None:
    if setting in ("OCCUPY", "DATABASES", "CACHES"):
        occupy_settings.reload()
