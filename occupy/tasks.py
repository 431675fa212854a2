"""Tasks of Django's tasks framework that run once per key: run-exclusion and enqueue-once.

::

    from occupy.tasks import task

    @task(occupy_key="report:{account_id}", occupy_ttl=60)
    def build_report(account_id: int) -> None:
        lease = current_lease()  # its fence, for fenced writes
        ...

``task`` is the framework's ``@task`` decorator with occupy's options; it makes an
:class:`OccupyTask`, a subclass of the framework's ``Task`` that workers run unchanged.
The framework is Django's own ``django.tasks`` (Django 6.0 and later), else
``django_tasks``, its backport package (Django 5.2), as ``django-tasks-db``'s database
backend chooses it.

Invariants:

- **Run-exclusion.** A run's body runs only while the run holds an occupy lease on the key
  formatted from its arguments (``occupy_key``), taken without waiting, kept alive by the
  watchdog while the body runs and released when it returns or raises. A run whose worker
  dies stops renewing: the key is free again within ``occupy_ttl``. A lease lost while the
  body runs (expired, or force-released in the admin) issues a higher fence to the next
  holder: fenced writes of the body (``save(lease=current_lease())``) are refused, and the
  run ends failed with :class:`~occupy.LeaseLost`.
- **Busy.** A run that finds its key held does not run its body: ``"retry"`` enqueues the
  same call again to run after the holder's remaining time (the backend must support
  ``run_after``), ``"skip"`` returns ``None`` (logged), ``"raise"`` fails the run with
  :class:`~occupy.Occupied`.
- **Enqueue-once** (``occupy_once``). An enqueue takes a claim on ``once:<key>`` naming the
  new result's id; another enqueue with the same key while the claim names a queued or
  running result returns that result instead of enqueuing. The claim is bounded: it lives
  ``occupy_once`` seconds (:data:`ONCE_TTL` for ``True``) while the task waits in the
  queue, is renewed with the run's lease once the task runs (so it ends at most
  ``occupy_ttl`` after its worker died), and ends with the run.

The owners these leases carry (``task:<task path>:<result id>``) are built in
:mod:`occupy.owners`; ``list_locks`` and the admin show them. The how-to is
docs/howto/django-tasks.md.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import logging
import string
import time
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from django.utils import timezone

from occupy.api import acquire as _acquire
from occupy.api import holder, release, takeover
from occupy.conf import occupy_settings
from occupy.exceptions import LeaseLost, Occupied, TakeoverRefused
from occupy.leases import Holder, Lease
from occupy.owners import TASK_ENQUEUING, parse_task_owner, task_owner
from occupy.validation import check_ttl

if TYPE_CHECKING:
    from django.tasks.base import Task as _FrameworkTask
    from django.tasks.base import TaskResult
    from typing_extensions import ParamSpec

    P = ParamSpec("P")
else:
    P = TypeVar("P")


def _framework() -> tuple[Any, Any, Any]:
    """Return the tasks framework's ``base``, ``signals`` and ``exceptions`` modules:
    Django's own (6.0 and later), else the backport's."""
    for name in ("django.tasks", "django_tasks"):
        try:
            return (
                importlib.import_module(f"{name}.base"),
                importlib.import_module(f"{name}.signals"),
                importlib.import_module(f"{name}.exceptions"),
            )
        except ImportError:
            continue
    raise ImportError(
        "occupy.tasks needs Django's tasks framework: django.tasks (Django 6.0 and later) "
        "or the django-tasks package (pip install 'django-occupy[tasks]')."
    )


if not TYPE_CHECKING:
    _base, _signals, _exceptions = _framework()
    _FrameworkTask = _base.Task
else:
    from django.tasks import base as _base
    from django.tasks import exceptions as _exceptions
    from django.tasks import signals as _signals
_Status = _base.TaskResultStatus
_task_started = _signals.task_started
_task_finished = _signals.task_finished

__all__ = ["ONCE_TTL", "OccupyTask", "OnBusy", "current_lease", "task"]

logger = logging.getLogger("occupy.tasks")
T = TypeVar("T")
OnBusy = Literal["retry", "skip", "raise"]
_ON_BUSY = ("retry", "skip", "raise")
#: How long an enqueue-once claim lives while its task waits in the queue, for
#: ``occupy_once=True`` (seconds).
ONCE_TTL = 3600.0
#: How long the claim of an enqueue under way lives (one insert into the queue): an
#: enqueuer that dies in between holds the key no longer than this.
ENQUEUING_TTL = 10.0
#: The results a claim no longer stands for.
_FINISHED = {_Status.SUCCESSFUL, _Status.FAILED}

#: The lease the running task's body holds (see current_lease()).
_current: ContextVar[Lease | None] = ContextVar("occupy_task_lease", default=None)
#: The result the worker just started, from the framework's task_started signal.
_started: ContextVar[Any] = ContextVar("occupy_task_started", default=None)


def _note_started(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _started.set(task_result)


def _note_finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
    # So that a later call without a task_started signal never takes this result's id.
    _started.set(None)


_task_started.connect(_note_started, dispatch_uid="occupy.tasks.started")
_task_finished.connect(_note_finished, dispatch_uid="occupy.tasks.finished")


def current_lease() -> Lease:
    """Return the lease the running task's body holds on its key (its ``fence`` for fenced
    writes); raise ``RuntimeError`` outside the body of an :class:`OccupyTask`."""
    lease = _current.get()
    if lease is None:
        raise RuntimeError("current_lease() is called outside the body of an occupy task.")
    return lease


def _fields(template: str) -> set[str]:
    return {
        field.split(".", 1)[0].split("[", 1)[0]
        for _text, field, _spec, _conv in string.Formatter().parse(template)
        if field is not None
    }


@dataclass(frozen=True, kw_only=True)
class OccupyTask(_FrameworkTask[P, T], Generic[P, T]):
    """A task whose runs hold an occupy lease on ``occupy_key`` (formatted from the
    call's arguments), renewed while the body runs; see the module's invariants.

    ``occupy_ttl``: the lease's seconds (default: the ``TTL`` setting);
    ``occupy_on_busy``: ``"retry"``, ``"skip"`` or ``"raise"`` when the key is held;
    ``occupy_once``: ``True`` or the seconds a queued task's claim lives (enqueue-once);
    ``occupy_backend``: the occupy backend alias.
    """

    occupy_key: str = ""
    occupy_ttl: float | None = None
    occupy_on_busy: OnBusy = "retry"
    occupy_once: bool | float = False
    occupy_backend: str = "default"

    def __post_init__(self) -> None:
        super().__post_init__()
        where = f"task {self.module_path}"
        if not isinstance(self.occupy_key, str) or not self.occupy_key:
            raise ValueError(f"{where}: occupy_key must be a non-empty key template.")
        params = list(inspect.signature(self.func).parameters)
        if self.takes_context:
            params = params[1:]
        missing = _fields(self.occupy_key) - set(params)
        if missing:
            raise ValueError(
                f"{where}: occupy_key {self.occupy_key!r} names {sorted(missing)}, which "
                f"the task has no parameter for."
            )
        if self.occupy_ttl is not None:
            check_ttl(self.occupy_ttl)
        if self.occupy_on_busy not in _ON_BUSY:
            raise ValueError(
                f"{where}: occupy_on_busy must be one of {', '.join(_ON_BUSY)}, "
                f"not {self.occupy_on_busy!r}."
            )
        backend = self.get_backend()
        if self.occupy_on_busy == "retry" and not backend.supports_defer:
            raise ValueError(
                f"{where}: occupy_on_busy='retry' enqueues the task again with run_after, "
                f"which task backend {self.backend!r} does not support; use 'skip' or 'raise'."
            )
        if self.occupy_once is not False:
            if not isinstance(self.occupy_once, bool):
                check_ttl(self.occupy_once)
            if not backend.supports_get_result:
                raise ValueError(
                    f"{where}: occupy_once returns the queued task's result, which task "
                    f"backend {self.backend!r} cannot look up (supports_get_result)."
                )

    # The key and the settings ------------------------------------------------------

    @property
    def ttl(self) -> float:
        """Return the seconds a run's lease lives unless renewed."""
        return float(occupy_settings.TTL if self.occupy_ttl is None else self.occupy_ttl)

    @property
    def once_ttl(self) -> float:
        """Return the seconds an enqueue-once claim lives while its task is queued."""
        return ONCE_TTL if self.occupy_once is True else float(self.occupy_once)

    def get_occupy_key(self, args: Sequence[Any], kwargs: dict[str, Any]) -> str:
        """Return the key of a call with ``args`` and ``kwargs`` (without the context)."""
        if not _fields(self.occupy_key):
            return self.occupy_key
        signature = inspect.signature(self.func)
        if self.takes_context:
            bound = signature.bind(None, *args, **kwargs)
        else:
            bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return self.occupy_key.format_map(bound.arguments)

    def get_once_key(self, key: str) -> str:
        """Return the key of the enqueue-once claim for the run key ``key``."""
        return f"once:{key}"

    # Enqueue-once ----------------------------------------------------------------

    def enqueue(self, *args: Any, **kwargs: Any) -> TaskResult[P, T]:
        """Enqueue the task; with ``occupy_once``, return the result of the same key's
        task already queued or running instead of enqueuing another."""
        if self.occupy_once is False:
            return super().enqueue(*args, **kwargs)
        once_key = self.get_once_key(self.get_occupy_key(args, kwargs))
        claim = self._claim(once_key)
        if not isinstance(claim, Lease):
            return claim
        try:
            result = super().enqueue(*args, **kwargs)
        except BaseException:
            self._let_go(claim)
            raise
        self._point(once_key, claim.fence, result.id, self.once_ttl)
        return result

    async def aenqueue(self, *args: Any, **kwargs: Any) -> TaskResult[P, T]:
        """Async twin of :meth:`enqueue`."""
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.enqueue)(*args, **kwargs)

    def _claim(self, once_key: str) -> Lease | TaskResult[P, T]:
        """Take ``once_key`` for an enqueue, or return the result of the task whose claim
        holds it. An enqueue under way elsewhere (one insert) is waited for."""
        owner = task_owner(self.module_path, TASK_ENQUEUING)
        deadline = time.monotonic() + ENQUEUING_TTL + 1
        while True:
            try:
                return _acquire(
                    once_key,
                    owner=owner,
                    ttl=ENQUEUING_TTL,
                    timeout=0,
                    reentrant=False,
                    backend=self.occupy_backend,
                )
            except Occupied as busy:
                current = busy.holder
            if current is None:
                continue
            named = parse_task_owner(current.owner)
            if named is None:
                raise Occupied(
                    f"{once_key!r} is held by {current.owner!r}, which is no task's claim.",
                    key=once_key,
                    holder=current,
                )
            if named.task_id != TASK_ENQUEUING:
                existing = self._existing(named.task_id)
                if existing is not None:
                    return existing
                try:  # the claim outlived its task (finished, pruned): replace it
                    return takeover(
                        once_key,
                        owner=owner,
                        ttl=ENQUEUING_TTL,
                        reentrant=False,
                        backend=self.occupy_backend,
                        if_fence=current.fence,
                    )
                except TakeoverRefused:
                    continue
            if time.monotonic() > deadline:
                raise Occupied(
                    f"An enqueue of {once_key!r} has been under way for over {ENQUEUING_TTL:g} s.",
                    key=once_key,
                    holder=current,
                )
            time.sleep(0.02)

    def _existing(self, result_id: str) -> TaskResult[P, T] | None:
        """Return the queued or running result ``result_id``, or ``None`` if it finished
        or does not exist."""
        try:
            result = self.get_result(result_id)
        except (_exceptions.TaskResultDoesNotExist, _exceptions.TaskResultMismatch):
            return None
        return None if result.status in _FINISHED else result

    def _point(self, once_key: str, fence: int, result_id: object, ttl: float) -> Lease | None:
        """Make the claim whose fence is ``fence`` name ``result_id``; ``None`` if it was
        no longer held (it expired: the bound it documents)."""
        try:
            return takeover(
                once_key,
                owner=task_owner(self.module_path, result_id),
                ttl=ttl,
                reentrant=False,
                backend=self.occupy_backend,
                if_fence=fence,
            )
        except TakeoverRefused:
            logger.warning(
                "the enqueue-once claim on %r ended before it named %s", once_key, result_id
            )
            return None

    def _mine(self, once_key: str, result_id: str) -> Holder | None:
        """Return the claim on ``once_key`` if it names ``result_id``."""
        current = holder(once_key, backend=self.occupy_backend)
        if current is None:
            return None
        named = parse_task_owner(current.owner)
        return current if named is not None and named.task_id == result_id else None

    def _drop(self, once_key: str, result_id: str) -> None:
        """End the claim on ``once_key`` if it still names ``result_id`` (taken over on
        its fence, then released: a claim naming another result is left alone)."""
        current = self._mine(once_key, result_id)
        if current is None:
            return
        with contextlib.suppress(TakeoverRefused):
            self._let_go(
                takeover(
                    once_key,
                    owner=current.owner,
                    ttl=self.ttl,
                    reentrant=False,
                    backend=self.occupy_backend,
                    if_fence=current.fence,
                )
            )

    def _let_go(self, claim: Lease | None) -> None:
        if claim is None:
            return
        try:
            release(claim)
        except LeaseLost:
            logger.info("the enqueue-once claim on %r had already ended", claim.key)

    # Run-exclusion ---------------------------------------------------------------

    def call(self, *args: Any, **kwargs: Any) -> T:
        """Run the body under the lease on its key; see ``occupy_on_busy`` for a held key."""
        plain = args[1:] if self.takes_context else args
        key = self.get_occupy_key(plain, kwargs)
        result_id = self._result_id(args)
        owner = task_owner(self.module_path, result_id)
        try:
            lease = _acquire(
                key, owner=owner, ttl=self.ttl, timeout=0, renew=True, backend=self.occupy_backend
            )
        except Occupied as busy:
            self._busy(busy, key, result_id, plain, kwargs)
            return None  # type: ignore[return-value]
        claim = None
        finished = False
        token = _current.set(lease)
        try:
            claim = self._adopt(key, result_id)
            value = super().call(*args, **kwargs)
            finished = True
            return value
        finally:
            _current.reset(token)
            self._let_go(claim)
            try:
                release(lease)
            except LeaseLost:
                if finished:
                    raise
                logger.warning("task %r lost its lease on %r while it raised", owner, key)

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

    def _adopt(self, key: str, result_id: str) -> Lease | None:
        """Hold this run's enqueue-once claim with the run (renewed, ``occupy_ttl``)."""
        if self.occupy_once is False:
            return None
        once_key = self.get_once_key(key)
        current = self._mine(once_key, result_id)
        if current is None:
            return None
        try:
            return takeover(
                once_key,
                owner=current.owner,
                ttl=self.ttl,
                renew=True,
                reentrant=False,
                backend=self.occupy_backend,
                if_fence=current.fence,
            )
        except TakeoverRefused:
            return None

    def _busy(
        self,
        busy: Occupied,
        key: str,
        result_id: str,
        args: Sequence[Any],
        kwargs: dict[str, Any],
    ) -> None:
        """Do what ``occupy_on_busy`` says for a run that found ``key`` held."""
        held_by = busy.holder.owner if busy.holder is not None else "someone"
        once_key = self.get_once_key(key)
        if self.occupy_on_busy == "retry":
            delay = max(float(busy.retry_after or 0), 0.1)
            later = self.using(run_after=timezone.now() + timedelta(seconds=delay))
            again = _FrameworkTask.enqueue(later, *args, **kwargs)
            logger.info(
                "task %s: %r is held by %r; enqueued again as %s in %.1f s",
                self.module_path, key, held_by, again.id, delay,
            )  # fmt: skip
            if self.occupy_once is not False:
                current = self._mine(once_key, result_id)
                if current is not None:
                    ttl = max(self.once_ttl, delay + self.ttl)
                    self._point(once_key, current.fence, again.id, ttl)
            return None
        if self.occupy_once is not False:
            self._drop(once_key, result_id)
        if self.occupy_on_busy == "skip":
            logger.info("task %s skipped: %r is held by %r", self.module_path, key, held_by)
            return None
        raise busy


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
