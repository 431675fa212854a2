"""The settings of occupy's Celery beat schedulers, read in one place: by the scheduler
when it starts (:mod:`occupy.celery.beat`) and by ``manage.py check``
(``occupy.E407``, and ``occupy.W407`` for one misspelled), in the same words.

They are Celery settings, read from the app's configuration: ``occupy_beat_key``
(default ``"celery-beat:<app name>"``), ``occupy_beat_ttl`` (default
:data:`BEAT_TTL` seconds) and ``occupy_beat_backend`` (default ``"default"``); in a
Django project configured with ``namespace="CELERY"`` they are spelled
``CELERY_OCCUPY_BEAT_KEY``, ``CELERY_OCCUPY_BEAT_TTL`` and ``CELERY_OCCUPY_BEAT_BACKEND``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.core.checks import CheckMessage, Error
from django.core.checks import Warning as CheckWarning

from occupy.checks import alias_problem
from occupy.validation import check_key, check_ttl

__all__ = ["BEAT_TTL", "SETTINGS", "BeatSettings", "beat_problems", "beat_settings"]

#: How long the beat lease outlives an instance that stopped renewing it, by default
#: (seconds): the longest that due ticks go unsent after the sender dies.
BEAT_TTL = 30.0


@dataclass(frozen=True)
class BeatSettings:
    """What the beat scheduler's lease is on (``key``), for how long (``ttl``), in
    which backend (``backend``, an alias of ``OCCUPY["BACKENDS"]``)."""

    key: str
    ttl: float
    backend: str


def _name(app: Any, setting: str) -> str:
    """Return ``setting`` as the project spells it: with the app's configuration
    namespace (``CELERY_OCCUPY_BEAT_TTL``), or Celery's own lower-case name."""
    namespace = getattr(app, "namespace", None)
    return f"{namespace}_{setting.upper()}" if namespace else setting


def beat_settings(app: Any) -> BeatSettings:
    """Return the beat settings of the Celery app ``app``; raise ``TypeError`` or
    ``ValueError`` naming the setting whose value the scheduler cannot use (the alias is
    checked where it is used: :func:`occupy.backends.get_backend`)."""
    conf: Mapping[str, Any] = app.conf
    key = conf.get("occupy_beat_key")
    ttl = conf.get("occupy_beat_ttl")
    return BeatSettings(
        key=check_key(
            f"celery-beat:{app.main or 'celery'}" if key is None else key,
            name=_name(app, "occupy_beat_key"),
        ),
        ttl=check_ttl(BEAT_TTL if ttl is None else ttl, name=_name(app, "occupy_beat_ttl")),
        backend=conf.get("occupy_beat_backend") or "default",
    )


#: The Celery settings occupy reads, as Celery names them.
SETTINGS = ("occupy_beat_key", "occupy_beat_ttl", "occupy_beat_backend")


def _unknown(app: Any) -> list[str]:
    """Return the settings of ``app`` that start with ``occupy_`` (after the app's
    namespace) and that occupy does not read: a misspelled one would be ignored."""
    namespace = getattr(app, "namespace", None)
    unknown = []
    for key in app.conf:
        name = str(key)
        if namespace and name.upper().startswith(f"{namespace.upper()}_"):
            name = name[len(namespace) + 1 :]
        if name.lower().startswith("occupy_") and name.lower() not in SETTINGS:
            unknown.append(str(key))
    return sorted(unknown)


def beat_problems(app: Any) -> list[CheckMessage]:
    """Return ``occupy.E407`` for each beat setting of ``app`` that the scheduler would
    refuse when it starts: a key or ttl it cannot use, or a backend alias
    ``OCCUPY["BACKENDS"]`` does not configure (only where one is set, or the app's
    ``beat_scheduler`` names occupy's); and ``occupy.W407`` for a setting named like
    occupy's that occupy does not read (a misspelling, ignored otherwise)."""
    hint = "Fix the setting: occupy's beat scheduler refuses to start with it."
    messages: list[CheckMessage] = [
        CheckWarning(
            f"Celery app {app.main} has the setting {name}, which occupy does not read; "
            f"its settings are {', '.join(_name(app, known) for known in SETTINGS)}.",
            hint="Correct or remove the setting: as it is, nothing uses it.",
            obj=str(app.main),
            id="occupy.W407",
        )
        for name in _unknown(app)
    ]
    conf = app.conf
    if all(conf.get(name) is None for name in SETTINGS) and "occupy" not in str(
        conf.get("beat_scheduler") or ""
    ):
        return messages
    try:
        settings = beat_settings(app)
    except (TypeError, ValueError) as e:
        return [*messages, Error(str(e), hint=hint, obj=str(app.main), id="occupy.E407")]
    problem = alias_problem(
        f"Celery app {app.main}", _name(app, "occupy_beat_backend"), settings.backend
    )
    if problem is not None:
        messages.append(Error(problem, hint=hint, obj=str(app.main), id="occupy.E407"))
    return messages
