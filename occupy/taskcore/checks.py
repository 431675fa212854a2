"""The system checks of the tasks' options (``occupy.E401`` to ``occupy.E406``) and of
the beat scheduler's settings (``occupy.E407``): every
task of occupy's integrations records itself (:func:`declared`) when it is made, and
``check`` first makes the tasks a worker would make (:func:`_discover`,
:func:`_celery_tasks`)."""

from __future__ import annotations

import importlib
import sys
import weakref
from typing import Any, Protocol

from django.core.checks import CheckMessage, Error, Tags, register
from django.utils.module_loading import module_has_submodule

from occupy.checks import unconfigured_alias
from occupy.taskcore.beat import beat_problems
from occupy.taskcore.options import TaskOptions

__all__ = ["Declared", "check_tasks", "declared"]


class Declared(Protocol):
    """A task (or task class) of an integration, as :func:`declared` records it."""

    def occupy_options(self) -> TaskOptions:
        """Return the task's options as they are now."""


#: The tasks declared so far (classes or instances), by weak reference.
_declared: list[weakref.ref[Any]] = []


def declared(task: Declared) -> None:
    """Record ``task`` (a task, or a task class) for the system checks."""
    _declared[:] = [ref for ref in _declared if ref() is not None]
    _declared.append(weakref.ref(task))


def _discover() -> list[CheckMessage]:
    """Import the ``tasks`` module of every installed app that has one, as Celery's
    autodiscovery does, so that the checks see the tasks declared there; return
    ``occupy.E405`` for each that raised (a task refused when it was declared, say),
    rather than letting ``check`` end in a traceback."""
    from django.apps import apps

    problems: list[CheckMessage] = []
    for config in apps.get_app_configs():
        if not module_has_submodule(config.module, "tasks"):
            continue
        name = f"{config.name}.tasks"
        try:
            importlib.import_module(name)
        except Exception as e:
            problems.append(
                Error(
                    f"{name} raised {type(e).__name__} when imported, so the tasks "
                    f"declared in it cannot run: {e}",
                    hint="Fix what the error names (Celery's autodiscovery and the "
                    "workers import this module too).",
                    obj=name,
                    id="occupy.E405",
                )
            )
    return problems


def _celery_tasks() -> list[CheckMessage]:
    """Have the project's Celery app make its tasks, as ``celery worker`` does when it
    starts: ``@shared_task`` and ``@app.task`` make a task class only when the app is
    finalized, so a task refused when it is made (a key template naming no parameter)
    or whose ``occupy_backend`` is not configured would pass ``check`` and stop or fail
    the worker. Return ``occupy.E406`` when that raised, else the app's beat settings'
    problems (``occupy.E407``). Nothing where Celery was not imported (the project's
    Celery app, imported with its settings, imports it).

    Not in a worker or beat that is starting (:func:`_starting_worker`): there the
    app finalizes itself, right after, and a task refused stops the worker."""
    celery = sys.modules.get("celery")
    if celery is None:
        return []
    app = celery.current_app
    if not _starting_worker(app):
        try:
            app.finalize()
        except Exception as e:
            return [
                Error(
                    f"Celery app {app.main!r} raised {type(e).__name__} when it made its "
                    f"tasks, so its workers cannot start: {e}",
                    hint="Fix what the error names (celery worker makes the same tasks when "
                    "it starts).",
                    obj=str(app.main),
                    id="occupy.E406",
                )
            ]
    return beat_problems(app)


def _starting_worker(app: Any) -> bool:
    """Return whether ``app`` is starting a worker (or beat): its loader's
    ``init_worker()`` ran, which is where Celery's Django fixup runs the system checks
    (it drops what they return) before the worker finalizes the app.

    The checks must not finalize the app there: ``finalize()`` marks the app finalized
    before it makes the tasks, so the error of a task refused would be reported to no
    one and the worker would start without the tasks not yet made (they would be
    unregistered, their messages discarded), instead of exiting with that error."""
    return bool(getattr(app.loader, "worker_initialized", False))


@register(Tags.compatibility)
def check_tasks(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Check the occupy options of every task declared (``occupy.E401`` to ``E404``),
    after importing each installed app's ``tasks`` module (``occupy.E405`` for one that
    raised) and having the project's Celery app make its tasks (``occupy.E406``) and
    read its beat settings (``occupy.E407``)."""
    messages = _discover() + _celery_tasks()
    for ref in list(_declared):
        task = ref()
        if task is None:
            continue
        options = task.occupy_options()
        messages += options.problems()
        messages += unconfigured_alias(
            f"task {options.task}", "occupy_backend", options.backend, check_id="occupy.E401"
        )
    return messages
