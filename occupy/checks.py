"""System checks: this module loops over the configured aliases, and each backend class
checks its own configuration (:meth:`~occupy.backends.base.BaseBackend.check`). Every
id and what it means: docs/reference/checks.md.

Invariant: a check reports, in the same words, the problem that building the backend
would raise (``InvalidBackendError``), or that reading the setting would raise
(``ImproperlyConfigured``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.core.checks import CheckMessage, Error, Tags, register
from django.core.exceptions import ImproperlyConfigured

from occupy.backends import get_backend, load_backend_class
from occupy.backends.base import BaseBackend
from occupy.backends.options import where
from occupy.conf import occupy_settings
from occupy.docs import docs_url
from occupy.exceptions import InvalidBackendError, OccupyError

__all__ = [
    "check_backends",
    "check_settings",
    "check_stores",
    "composite_pk_unsupported",
    "unconfigured_alias",
]

SETTINGS_HINT = f"The OCCUPY setting is described at {docs_url('reference/settings')}."


def _configured() -> tuple[dict[str, Any], list[CheckMessage]]:
    try:
        return occupy_settings.BACKENDS, []
    except ImproperlyConfigured as e:  # InvalidBackendError, or OCCUPY itself is wrong
        return {}, [Error(str(e), hint=SETTINGS_HINT, id="occupy.E002")]


def _classes() -> Iterator[tuple[str, dict[str, Any], type[BaseBackend]]]:
    """Yield ``(alias, config, backend class)`` for every backend that can be loaded."""
    for alias, config in _configured()[0].items():
        if not isinstance(config, dict):
            continue
        try:
            yield alias, config, load_backend_class(config.get("BACKEND"), alias=alias)
        except InvalidBackendError:
            continue


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Check the values of ``settings.OCCUPY`` that are not backends (``occupy.E007``)."""
    messages = _configured()[1]
    if messages:
        return messages
    for name in ("TTL", "TIMEOUT", "REST_FRAMEWORK", "TELEMETRY"):
        try:
            getattr(occupy_settings, name)
        except ImproperlyConfigured as e:
            messages.append(
                Error(str(e), obj=f"OCCUPY[{name!r}]", id="occupy.E007", hint=SETTINGS_HINT)
            )
    return messages


@register(Tags.compatibility)
def check_backends(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Check that every configured backend loads, then let its class check the rest."""
    backends = _configured()[0]
    messages: list[CheckMessage] = []
    for alias, config in backends.items():
        if not isinstance(config, dict):
            messages.append(
                Error(
                    f"{where(alias)} must be a dict, not {type(config).__name__}.", id="occupy.E002"
                )
            )
            continue
        try:
            load_backend_class(config.get("BACKEND"), alias=alias)
        except InvalidBackendError as e:
            messages.append(
                Error(
                    str(e),
                    hint="Use one of occupy.backends.db.DatabaseBackend, "
                    "occupy.backends.redis.RedisBackend, occupy.backends.cache.CacheBackend, "
                    "occupy.backends.file.FileBackend, or your own BaseBackend subclass.",
                    obj=where(alias),
                    id="occupy.E001",
                )
            )
    for alias, config, cls in _classes():
        messages += cls.check(alias, config)
    return messages


@register(Tags.database)
def check_stores(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """Let every backend look into its store (``check --database``; like Django's own
    database checks, these read the store, so they run only when asked)."""
    if not databases:
        return []
    messages: list[CheckMessage] = []
    for alias, _config, _cls in _classes():
        try:
            backend = get_backend(alias)
        except OccupyError:
            continue  # it cannot be built: check_backends reports why
        messages += backend.check_store(databases)
    return messages


def unconfigured_alias(
    owner: type[Any] | str, attribute: str, alias: str, *, check_id: str
) -> list[CheckMessage]:
    """Return the error for ``owner`` (a model or a model admin class, or the name of a
    task) whose ``attribute`` names an occupy backend alias that ``OCCUPY['BACKENDS']``
    does not configure; nothing while the setting itself cannot be read
    (``occupy.E002`` reports that, once, instead of every class that reads it failing
    ``check``)."""
    backends, broken = _configured()
    if broken or alias in backends:
        return []
    name = f"{owner}'s " if isinstance(owner, str) else f"{owner.__name__}."
    return [
        Error(
            f"{name}{attribute} is {alias!r}, which OCCUPY['BACKENDS'] does not "
            f"configure (configured: {sorted(backends)}).",
            hint=f"Set {attribute} to the alias of a configured backend.",
            obj=owner,
            id=check_id,
        )
    ]


def composite_pk_unsupported(model: type[Any], user: type[Any], by: str) -> list[CheckMessage]:
    """Return ``occupy.E301`` when ``model`` has a composite primary key and ``user``
    (an admin or a view class of occupy's) builds on ``by``, which does not support one:
    said at startup rather than as a traceback at request time."""
    if not model._meta.is_composite_pk:
        return []
    return [
        Error(
            f"{user.__name__} serves {model._meta.label}, whose primary key is composite "
            f"(CompositePrimaryKey), which {by} does not support.",
            hint="Use occupy's model side on this model (occupy(), claim(), locked(), "
            "versioned and fenced saves), which supports composite keys; see "
            f"{docs_url('topics/models#composite-primary-keys')}.",
            obj=user,
            id="occupy.E301",
        )
    ]
