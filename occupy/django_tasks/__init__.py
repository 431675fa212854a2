"""Tasks of Django's tasks framework that run once per key: run-exclusion and enqueue-once.

::

    from occupy.django_tasks import current_lease, task

    @task(occupy_key="report:{account_id}", occupy_ttl=60)
    def build_report(account_id: int) -> None:
        lease = current_lease()  # its fence, for fenced writes
        ...

``task`` is the framework's ``@task`` decorator with occupy's options (the same as
:mod:`occupy.celery`'s: ``occupy_key``, ``occupy_ttl``, ``occupy_on_busy``,
``occupy_once``, ``occupy_backend``); it makes an :class:`OccupyTask`, a subclass of the
framework's ``Task`` that workers run unchanged. The framework is Django's own
``django.tasks`` (Django 6.0 and later), else ``django_tasks``, its backport package
(Django 5.2, ``pip install "django-occupy[tasks]"``).

This module imports without either: Celery's and Huey's autodiscovery of
``<app>.tasks`` never imports it, and its names are loaded from
:mod:`occupy.django_tasks.base` when first used, which raises an ``ImportError`` naming
the extra where the framework is missing. The invariants are
:mod:`occupy.taskcore`'s; the how-to is docs/howto/django-tasks.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from occupy.django_tasks.base import ENQUEUING_TTL, OccupyTask, current_lease, task

__all__ = ["ENQUEUING_TTL", "OccupyTask", "current_lease", "task"]


def __getattr__(name: str) -> Any:
    """Load the integration on first use (``ImportError`` naming the extra without the
    framework)."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from occupy.django_tasks import base

    value = getattr(base, name)
    globals()[name] = value
    return value
