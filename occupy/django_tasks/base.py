""":class:`OccupyTask` and ``@task``: the adapter of Django's tasks framework on
:mod:`occupy.taskcore` (see :mod:`occupy.django_tasks`).

What is the framework's here:

- ``"retry"`` enqueues the same call again with ``run_after`` the holder's remaining
  time (the task backend must support ``run_after``: a task refused at declaration
  otherwise), and the busy run returns ``None``; its enqueue-once claim moves to the
  task it enqueued.
- **Enqueue-once** (``occupy_once``) returns the framework's result of the task whose
  claim holds the key, looked up with ``get_result`` (the task backend must support it);
  a claim naming a result that finished or no longer exists is replaced. The result id
  is only known once the task is enqueued: the claim first names :data:`ENQUEUING`
  (bounded by :data:`ENQUEUING_TTL`), then the new result.
- The owners are ``task:<task path>:<result id>`` (:mod:`occupy.owners`).
"""

from __future__ import annotations

import functools
import importlib
import logging
import time
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import timedelta
from types import ModuleType
from typing import TYPE_CHECKING, Any, Generic, Literal, ParamSpec, TypeVar

from django.utils import timezone

from occupy import taskcore
from occupy.exceptions import Occupied
from occupy.extras import require
from occupy.keys import KeyTemplate
from occupy.leases import Holder, Lease
from occupy.owners import TASK_ENQUEUING, task_owner
from occupy.taskcore import KeyedTask, TaskOptions


def _framework() -> tuple[ModuleType, ModuleType, ModuleType]:
    """Return the tasks framework's ``base``, ``signals`` and ``exceptions`` modules:
    Django's own (6.0 and later), else the backport's, else raise ``ImportError``
    naming the extra."""
    try:
        importlib.import_module("django.tasks")
        name = "django.tasks"
    except ImportError:
        require(
            "django_tasks",
            feature="occupy.django_tasks on Django 5.2 (Django 6 has django.tasks)",
            extra="tasks",
            package="the django-tasks backport",
        )
        name = "django_tasks"
    return tuple(
        importlib.import_module(f"{name}.{part}") for part in ("base", "signals", "exceptions")
    )  # type: ignore[return-value]


_base, _signals, _exceptions = _framework()

if TYPE_CHECKING:
    from django.tasks.base import Task as _FrameworkTask
    from django.tasks.base import TaskResult
else:
    # Django's own Task is not generic (the backport's is): never subscripted here.
    _FrameworkTask = _base.Task

__all__ = ["ENQUEUING_TTL", "OccupyTask", "OnBusy", "current_lease", "task"]

logger = logging.getLogger("occupy.tasks")
P = ParamSpec("P")
T = TypeVar("T")
OnBusy = Literal["retry", "skip", "raise"]
#: How long the claim of an enqueue under way lives (one insert into the queue): an
#: enqueuer that dies in between holds the key no longer than this.
ENQUEUING_TTL = 10.0
#: The results a claim no longer stands for.
_FINISHED = {_base.TaskResultStatus.SUCCESSFUL, _base.TaskResultStatus.FAILED}

#: The result the worker just started, from the framework's task_started signal.
_started: ContextVar[Any] = ContextVar("occupy_task_started", default=None)


def _note_started(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _started.set(task_result)


def _note_finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
    # So that a later call without a task_started signal never takes this result's id.
    _started.set(None)


_signals.task_started.connect(_note_started, dispatch_uid="occupy.django_tasks.started")
_signals.task_finished.connect(_note_finished, dispatch_uid="occupy.django_tasks.finished")


def current_lease() -> Lease:
    """Return the lease the running task's body holds on its key (its ``fence`` for fenced
    writes); raise ``RuntimeError`` outside the body of an :class:`OccupyTask`."""
    lease = taskcore.current_lease()
    if lease is None:
        raise RuntimeError("current_lease() is called outside the body of an occupy task.")
    return lease


@dataclass(frozen=True, kw_only=True)
class OccupyTask(_FrameworkTask, Generic[P, T]):  # type: ignore[type-arg]
    """A task whose runs hold an occupy lease on ``occupy_key`` (formatted from the
    call's arguments), renewed while the body runs; see :mod:`occupy.taskcore`.

    ``occupy_ttl``: the lease's seconds (default: the ``TTL`` setting);
    ``occupy_on_busy``: ``"retry"``, ``"skip"`` or ``"raise"`` when the key is held;
    ``occupy_once``: ``True`` or the seconds a queued task's claim lives (enqueue-once);
    ``occupy_backend``: the occupy backend alias. Wrong values raise ``ValueError``
    naming the task; the backend alias is ``manage.py check``'s (``occupy.E401``).
    """

    occupy_key: str = ""
    occupy_ttl: float | None = None
    occupy_on_busy: OnBusy = "retry"
    occupy_once: bool | float = False
    occupy_backend: str = "default"

    def __post_init__(self) -> None:
        super().__post_init__()
        options = self.occupy_options()
        options.validate()
        where = f"task {options.task}"
        template = KeyTemplate(
            self.occupy_key, self.func, where=where, skip=int(self.takes_context)
        )
        backend = self.get_backend()
        if self.occupy_on_busy == "retry" and not backend.supports_defer:
            raise ValueError(
                f"{where}: occupy_on_busy='retry' enqueues the task again with run_after, "
                f"which task backend {self.backend!r} does not support; use 'skip' or 'raise'."
            )
        if self.occupy_once is not False and not backend.supports_get_result:
            raise ValueError(
                f"{where}: occupy_once returns the queued task's result, which task "
                f"backend {self.backend!r} cannot look up (supports_get_result)."
            )
        object.__setattr__(self, "_occupy", KeyedTask(options, template))
        taskcore.declared(self)

    def occupy_options(self) -> TaskOptions:
        """Return the task's occupy options."""
        return TaskOptions(
            task=self.module_path,
            key=self.occupy_key,
            ttl=self.occupy_ttl,
            on_busy=self.occupy_on_busy,
            once=self.occupy_once,
            backend=self.occupy_backend,
        )

    def get_occupy_key(self, args: Sequence[Any], kwargs: dict[str, Any]) -> str:
        """Return the run key of a call with ``args`` and ``kwargs`` (without the context)."""
        return self._core.run_key(args, kwargs)

    @property
    def _core(self) -> KeyedTask:
        core: KeyedTask = self.__dict__["_occupy"]
        return core

    # Enqueue-once ----------------------------------------------------------------

    def enqueue(self, *args: Any, **kwargs: Any) -> TaskResult[P, T]:
        """Enqueue the task; with ``occupy_once``, return the result of the same task
        and key already queued or running instead of enqueuing another."""
        if self.occupy_once is False:
            return super().enqueue(*args, **kwargs)
        core = self._core
        key = core.once_key(core.run_key(args, kwargs))
        enqueuing = task_owner(self.module_path, TASK_ENQUEUING)
        deadline = time.monotonic() + ENQUEUING_TTL + 1
        claim: Lease | None = None
        while claim is None:
            got = core.claim(key, enqueuing, ENQUEUING_TTL)
            if isinstance(got, Lease):
                claim = got
            else:
                claim, existing = self._stale(key, got, enqueuing, deadline)
                if existing is not None:
                    return existing
        try:
            result = super().enqueue(*args, **kwargs)
        except BaseException:
            core.let_go(claim)
            raise
        if (
            core.replace(
                key, task_owner(self.module_path, result.id), core.options.once_ttl, claim.fence
            )
            is None
        ):
            logger.warning("the enqueue-once claim on %r ended before it named %s", key, result.id)
        return result

    async def aenqueue(self, *args: Any, **kwargs: Any) -> TaskResult[P, T]:
        """Async twin of :meth:`enqueue`."""
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.enqueue)(*args, **kwargs)

    def _stale(
        self, key: str, current: Holder, enqueuing: str, deadline: float
    ) -> tuple[Lease | None, TaskResult[P, T] | None]:
        """For the claim ``key`` held by ``current``: return the result it names while
        that is queued or running, else replace it (a claim whose task finished or is
        gone) and return the replacement; ``(None, None)`` to try again."""
        named = taskcore.claimant(current)
        if named.task_id == TASK_ENQUEUING:  # an enqueue under way elsewhere: one insert
            if time.monotonic() > deadline:
                raise Occupied(
                    f"An enqueue of {key!r} has been under way for over {ENQUEUING_TTL:g} s.",
                    key=key,
                    holder=current,
                )
            time.sleep(0.02)
            return None, None
        try:
            existing = self.get_result(named.task_id)
        except (_exceptions.TaskResultDoesNotExist, _exceptions.TaskResultMismatch):
            existing = None
        if existing is not None and existing.status not in _FINISHED:
            return None, existing
        return self._core.replace(key, enqueuing, ENQUEUING_TTL, current.fence), None

    # Run-exclusion ---------------------------------------------------------------

    def call(self, *args: Any, **kwargs: Any) -> T:
        """Run the body under the lease on its key; see ``occupy_on_busy`` for a held key."""
        plain = args[1:] if self.takes_context else args
        core = self._core
        owner = task_owner(self.module_path, self._result_id(args))
        return core.run(  # type: ignore[return-value]  # None when busy
            core.run_key(plain, kwargs),
            owner,
            functools.partial(super().call, *args, **kwargs),
            requeue=functools.partial(self._requeue, plain, kwargs),
        )

    async def acall(self, *args: Any, **kwargs: Any) -> T:
        """Async twin of :meth:`call` (the lease is taken and renewed in a thread)."""
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.call)(*args, **kwargs)

    def _result_id(self, args: Sequence[Any]) -> str:
        """Return the id of the result being run: from the context, or from the
        framework's ``task_started`` signal (``"-"`` when run directly)."""
        started = args[0].task_result if self.takes_context and args else _started.get()
        if started is None or started.task.module_path != self.module_path:
            return "-"
        return str(started.id)

    def _requeue(
        self, args: Sequence[Any], kwargs: dict[str, Any], busy: Occupied, delay: float
    ) -> str:
        """Enqueue the same call to run in ``delay`` seconds; return its run's owner."""
        later = self.using(run_after=timezone.now() + timedelta(seconds=delay))
        again = _FrameworkTask.enqueue(later, *args, **kwargs)
        return task_owner(self.module_path, again.id)


def task(
    function: Callable[..., Any] | None = None,
    *,
    occupy_key: str,
    occupy_ttl: float | None = None,
    occupy_on_busy: OnBusy = "retry",
    occupy_once: bool | float = False,
    occupy_backend: str = "default",
    **task_options: Any,
) -> Any:
    """Return the framework's ``@task`` decorator making an :class:`OccupyTask`.

    ``task_options`` are the framework's (``priority``, ``queue_name``, ``backend``,
    ``takes_context``); the ``occupy_*`` options are :class:`OccupyTask`'s.
    """

    # The framework's defaults, which its own decorator passes (Django 6.0's Task has
    # no defaults of its own).
    options = {
        "priority": _base.DEFAULT_TASK_PRIORITY,
        "queue_name": _base.DEFAULT_TASK_QUEUE_NAME,
        "backend": _base.DEFAULT_TASK_BACKEND_ALIAS,
        "takes_context": False,
        "run_after": None,
        **task_options,
    }

    def wrap(func: Callable[..., Any]) -> OccupyTask[Any, Any]:
        return OccupyTask(
            func=func,
            occupy_key=occupy_key,
            occupy_ttl=occupy_ttl,
            occupy_on_busy=occupy_on_busy,
            occupy_once=occupy_once,
            occupy_backend=occupy_backend,
            **options,
        )

    return wrap if function is None else wrap(function)
