"""System checks: this module loops over the configured aliases, and each backend class
checks its own configuration (:meth:`~occupy.backends.base.BaseBackend.check`). Every
id and what it means: docs/reference/checks.md.

Invariant: a check reports, in the same words, the problem that building the backend
would raise (``InvalidBackendError``), or that reading the setting would raise
(``ImproperlyConfigured``), or that a view or model admin of occupy's meets when it
reads the attribute to lock (:class:`~occupy.Misconfigured`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from django.core.checks import CheckMessage, Error, Tags, register
from django.core.checks import Warning as CheckWarning
from django.core.exceptions import ImproperlyConfigured

from occupy.backends import get_backend, load_backend_class
from occupy.backends.base import BaseBackend
from occupy.backends.options import where
from occupy.conf import occupy_settings
from occupy.docs import docs_url
from occupy.exceptions import InvalidBackendError, Misconfigured, OccupyError

__all__ = [
    "Rule",
    "alias_problem",
    "attribute_errors",
    "backend_mismatch",
    "check_backends",
    "check_settings",
    "check_stores",
    "checked_attribute",
    "composite_pk_unsupported",
    "misconfigured",
    "optional",
    "settings_misconfigured",
    "unconfigured_alias",
]

logger = logging.getLogger("occupy.checks")

#: The rule an attribute's value follows: called with the value and ``name=``, it
#: returns the value (in seconds) or raises ``TypeError``/``ValueError`` naming it, as
#: :func:`occupy.validation.check_ttl` does.
Rule = Callable[..., Any]

#: The problems :func:`misconfigured` has logged in this process (each is logged once).
_logged: set[str] = set()

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


def _name(owner: Any) -> str:
    """Return the name of ``owner``, a class or an instance of one."""
    return owner.__name__ if isinstance(owner, type) else type(owner).__name__


def alias_problem(owner: Any, attribute: str, alias: str) -> str | None:
    """Return the sentence saying that ``owner`` (a model, view or model admin, or its
    class, or the name of a task) names with ``attribute`` an occupy backend alias that
    ``OCCUPY['BACKENDS']`` does not configure, or ``None``; ``None`` too while the
    setting itself cannot be read (``occupy.E002`` reports that, once, instead of every
    class that reads it)."""
    backends, broken = _configured()
    if broken or alias in backends:
        return None
    name = f"{owner}'s " if isinstance(owner, str) else f"{_name(owner)}."
    return (
        f"{name}{attribute} is {alias!r}, which OCCUPY['BACKENDS'] does not "
        f"configure (configured: {sorted(backends)})."
    )


def unconfigured_alias(
    owner: Any, attribute: str, alias: str, *, check_id: str
) -> list[CheckMessage]:
    """Return the error ``check_id`` for ``owner`` (a model or view class, a model
    admin, or the name of a task) whose ``attribute`` names an occupy backend alias that
    ``OCCUPY['BACKENDS']`` does not configure (see :func:`alias_problem`)."""
    problem = alias_problem(owner, attribute, alias)
    if problem is None:
        return []
    return [
        Error(
            problem,
            hint=f"Set {attribute} to the alias of a configured backend.",
            obj=owner if isinstance(owner, (type, str)) else type(owner),
            id=check_id,
        )
    ]


def backend_mismatch(
    owner: Any, alias: str | None, model: type[Any] | None, model_alias: str
) -> list[CheckMessage]:
    """Return ``occupy.W303`` when ``owner`` (a view class or a model admin of
    occupy's) names an ``occupy_backend``, ``alias``, other than ``model_alias``, the
    one that locks ``model``'s objects everywhere else: one object's key held in two
    stores, where a lock in one excludes nothing in the other. Nothing while the
    setting itself cannot be read (``occupy.E002`` says that)."""
    if alias is None or model is None or alias == model_alias or _configured()[1]:
        return []
    name, label = _name(owner), model._meta.label
    return [
        CheckWarning(
            f"{name}.occupy_backend is {alias!r}, but {label}'s objects are locked in "
            f"{model_alias!r} (the model's occupy_backend, else 'default': obj.occupy(), "
            "claim(), occupy's other views and admins): the same key would be held in two "
            "stores, and a lock in one excludes nothing in the other.",
            hint=f"Remove occupy_backend from {name}, which then follows the model, or "
            f"set occupy_backend = {alias!r} on {model.__name__} instead.",
            obj=owner if isinstance(owner, type) else type(owner),
            id="occupy.W303",
        )
    ]


def optional(rule: Rule) -> Rule:
    """Return ``rule`` that also accepts ``None`` (an attribute left to its setting)."""

    def check(value: Any, *, name: str) -> Any:
        return None if value is None else rule(value, name=name)

    return check


def _problem(owner: Any, attribute: str, rule: Rule) -> tuple[Any, str | None]:
    try:
        return rule(getattr(owner, attribute), name=f"{_name(owner)}.{attribute}"), None
    except (TypeError, ValueError) as e:
        return None, str(e)


def attribute_errors(owner: Any, rules: Mapping[str, Rule]) -> list[CheckMessage]:
    """Return ``occupy.E304`` for each attribute of ``owner`` (a view class or a model
    admin of occupy's) whose value its rule in ``rules`` refuses."""
    return [
        Error(
            problem,
            hint=f"Set {attribute} to a number of seconds in range, or leave it out for "
            "the default.",
            obj=owner if isinstance(owner, type) else type(owner),
            id="occupy.E304",
        )
        for attribute, rule in rules.items()
        if (problem := _problem(owner, attribute, rule)[1]) is not None
    ]


def checked_attribute(owner: Any, attribute: str, rule: Rule) -> Any:
    """Return ``owner``'s ``attribute`` as ``rule`` reads it; raise
    :class:`~occupy.Misconfigured` with the words of :func:`attribute_errors`."""
    value, problem = _problem(owner, attribute, rule)
    if problem is not None:
        raise misconfigured(problem)
    return value


def misconfigured(problem: str) -> Misconfigured:
    """Return the :class:`~occupy.Misconfigured` error saying ``problem``, logged once
    per process: a request answers it as the store being unavailable, so the log (and
    ``manage.py check``) is where an operator reads why."""
    if problem not in _logged:
        _logged.add(problem)
        logger.error("%s Run manage.py check for every such problem.", problem)
    return Misconfigured(problem)


def settings_misconfigured(exc: Exception) -> Misconfigured | None:
    """Return the :func:`misconfigured` error that answers ``exc`` where a request met
    it, when ``exc`` is an ``ImproperlyConfigured`` (not already a
    :class:`~occupy.Misconfigured`) and occupy's own settings are what is wrong (a
    server that skips ``manage.py check`` serves with them); else ``None``, and ``exc``
    goes on as Django would handle it. Only the error path pays for reading them."""
    if isinstance(exc, Misconfigured) or not isinstance(exc, ImproperlyConfigured):
        return None
    try:
        for name in ("TTL", "TIMEOUT", "REST_FRAMEWORK", "TELEMETRY"):
            getattr(occupy_settings, name)
        for alias in occupy_settings.BACKENDS:
            get_backend(alias)
    except ImproperlyConfigured as e:
        return misconfigured(str(e))
    return None


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
