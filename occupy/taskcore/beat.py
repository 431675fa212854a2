"""The settings of occupy's Celery beat schedulers, read in one place: by the scheduler
when it starts (:mod:`occupy.celery.beat`) and by ``manage.py check``
(``occupy.E407``), in the same words.

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

from occupy.checks import alias_problem
from occupy.validation import check_key, check_ttl

__all__ = ["BEAT_TTL", "BeatSettings", "beat_problems", "beat_settings"]

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


def beat_problems(app: Any) -> list[CheckMessage]:
    """Return ``occupy.E407`` for each beat setting of ``app`` that the scheduler would
    refuse when it starts: a key or ttl it cannot use, or a backend alias
    ``OCCUPY["BACKENDS"]`` does not configure. Nothing for an app that neither sets them
    nor names occupy's scheduler as its ``beat_scheduler``."""
    conf = app.conf
    names = ("occupy_beat_key", "occupy_beat_ttl", "occupy_beat_backend")
    if all(conf.get(name) is None for name in names) and "occupy" not in str(
        conf.get("beat_scheduler") or ""
    ):
        return []
    hint = "Fix the setting: occupy's beat scheduler refuses to start with it."
    try:
        settings = beat_settings(app)
    except (TypeError, ValueError) as e:
        return [Error(str(e), hint=hint, obj=str(app.main), id="occupy.E407")]
    problem = alias_problem(
        f"Celery app {app.main}", _name(app, "occupy_beat_backend"), settings.backend
    )
    if problem is None:
        return []
    return [Error(problem, hint=hint, obj=str(app.main), id="occupy.E407")]
