"""Celery tasks that run once per key: :class:`OccupyTask` (``django-occupy[celery]``).

``@app.task(base=OccupyTask, occupy_key="report:{account_id}", occupy_ttl=60)`` runs
the body under a lease on the key formatted from the task's arguments (as
``occupy.lock``'s decorator formats it), renewed by the watchdog while the body runs and
released when it returns or raises; the body finds it at ``self.lease`` (its fence for
fenced writes). This module is an adapter on :mod:`occupy.taskcore`, whose invariants
it keeps (run-exclusion, busy runs, enqueue-once per task and key); what is Celery's:

- ``"retry"`` is ``self.retry(countdown=<the holder's remaining time>)``: the worker
  never busy-waits, and busy retries do not count against ``max_retries`` unless
  ``occupy_busy_retries`` says how many. An eager run (``apply()``,
  ``task_always_eager``), where Celery retries at once, waits for the key instead (up
  to the ``TIMEOUT`` setting); a task called directly raises
  :class:`~occupy.Occupied`.
- **Enqueue once** (``occupy_once``): ``delay()``/``apply_async()`` first claim
  :func:`occupy.taskcore.once_key` of the task's name and run key for the new task id;
  while the claim lives (the task queued, retried or running), another enqueue of the
  same task with the same key sends nothing and returns the claiming task's
  ``AsyncResult``; the same task sent again with its own id (a retry) is let through.

Owners name the task (``celery:<task name>:<task id>``, :mod:`occupy.owners`), so
``list_locks`` and the admin show which task holds which key. The how-to
``docs/howto/tasks.md`` covers worker death, broker restarts and visibility timeouts.
"""

from __future__ import annotations

from occupy.extras import require

require("celery", feature="occupy.celery", extra="celery")

import functools  # noqa: E402
import logging  # noqa: E402
import uuid  # noqa: E402
from collections.abc import Mapping, Sequence  # noqa: E402
from typing import Any, ClassVar  # noqa: E402

from celery import Task  # noqa: E402
from celery.exceptions import Retry  # noqa: E402

from occupy.keys import KeyTemplate  # noqa: E402
from occupy.leases import Lease  # noqa: E402
from occupy.owners import celery_task_owner  # noqa: E402
from occupy.taskcore import (  # noqa: E402
    KeyedTask,
    TaskOptions,
    claimant,
    current_lease,
    declared,
)

__all__ = ["OccupyTask"]

logger = logging.getLogger("occupy.celery")


class OccupyTask(Task):  # type: ignore[misc]  # Celery ships no type hints
    """A Celery task whose runs hold a lease on ``occupy_key`` (see the module docstring).

    Task options (class attributes, or keyword arguments of ``@app.task``):

    - ``occupy_key``: the key template, formatted with the task's arguments by name
      (``"report:{account_id}"``); ``None`` (default) leaves the task unlocked.
    - ``occupy_ttl``: seconds the run lease lives without renewal (default: the
      ``OCCUPY`` ``TTL`` setting): how long a dead worker keeps the key.
    - ``occupy_on_busy``: ``"retry"`` (default), ``"skip"`` or ``"raise"``.
    - ``occupy_busy_retries``: how many times ``"retry"`` retries; ``None`` (default)
      retries until the key is free, without counting against ``max_retries``.
    - ``occupy_once``: ``True`` or the seconds a queued task's claim lives
      (``True``: :data:`occupy.taskcore.ONCE_TTL`): deduplicate enqueues by key.
    - ``occupy_backend``: the backend alias (default ``"default"``).

    Wrong values fail when the task is made (``ValueError`` naming the task); values
    set later (``task_annotations``) and the backend alias are ``manage.py check``'s.
    """

    occupy_key: ClassVar[str | None] = None
    occupy_ttl: ClassVar[float | None] = None
    occupy_on_busy: ClassVar[str] = "retry"
    occupy_busy_retries: ClassVar[int | None] = None
    occupy_once: ClassVar[bool | float] = False
    occupy_backend: ClassVar[str] = "default"
    #: The task's KeyedTask for its options when last used (see _occupy()).
    _occupy_cached: ClassVar[KeyedTask | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Check the occupy options when the task class is made (``@app.task``)."""
        super().__init_subclass__(**kwargs)
        options = cls.occupy_options()
        options.validate()
        retries = cls.occupy_busy_retries
        if retries is not None and (
            not isinstance(retries, int) or isinstance(retries, bool) or retries < 0
        ):
            raise ValueError(
                f"task {options.task}: occupy_busy_retries must be None or a whole number "
                f">= 0, not {retries!r}."
            )
        if options.key is not None and "run" in cls.__dict__:
            cls._occupy_template(options)
        declared(cls)

    @classmethod
    def occupy_options(cls) -> TaskOptions:
        """Return the task's occupy options as they are now."""
        return TaskOptions(
            task=cls.name or f"{cls.__module__}.{cls.__qualname__}",
            key=cls.occupy_key,
            ttl=cls.occupy_ttl,
            on_busy=cls.occupy_on_busy,
            once=cls.occupy_once,
            backend=cls.occupy_backend,
        )

    @classmethod
    def _occupy_template(cls, options: TaskOptions) -> KeyTemplate:
        run = cls.__dict__.get("run") or cls.run
        # A bound task's run takes the task first; an unbound one is a staticmethod.
        func = getattr(run, "__func__", run)
        skip = 0 if isinstance(run, staticmethod) else 1
        assert options.key is not None
        return KeyTemplate(options.key, func, where=f"task {options.task}", skip=skip)

    def _occupy(self) -> KeyedTask:
        """Return the task's :class:`~occupy.taskcore.KeyedTask` for its options now."""
        cls = type(self)
        options = cls.occupy_options()
        cached = cls.__dict__.get("_occupy_cached")
        if cached is None or cached.options != options:
            options.validate()
            template = None if options.key is None else cls._occupy_template(options)
            cached = KeyedTask(options, template)
            cls._occupy_cached = cached
        return cached

    @property
    def lease(self) -> Lease | None:
        """Return the run lease of this task's body running in this context, or ``None``."""
        return current_lease(self.name)

    def occupy_key_for(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
        """Return the run key of a call with ``args`` and ``kwargs``."""
        return self._occupy().run_key(args, kwargs)

    def apply_async(
        self,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        task_id: str | None = None,
        *rest: Any,
        **options: Any,
    ) -> Any:
        """Send the task; with ``occupy_once``, only if no task of its key is queued or
        running, else return that task's ``AsyncResult`` (see the module docstring)."""
        if self.occupy_once is False:
            return super().apply_async(args, kwargs, task_id, *rest, **options)
        core = self._occupy()
        key = core.once_key(core.run_key(args or (), kwargs or {}))
        task_id = task_id or str(uuid.uuid4())
        got = core.claim(key, celery_task_owner(self.name, task_id), core.options.once_ttl)
        claim = None
        if isinstance(got, Lease):
            claim = got
        elif (queued := claimant(got).task_id) != task_id:  # else: this very task, retried
            logger.info("not sending %s: %s is queued or running for %r", self.name, queued, key)
            return self.AsyncResult(queued)
        try:
            return super().apply_async(args, kwargs, task_id, *rest, **options)
        except BaseException:
            core.let_go(claim)
            raise

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the body (Celery's own ``__call__``) under the lease on its key."""
        call = functools.partial(super().__call__, *args, **kwargs)
        if self.occupy_key is None:
            return call()
        core = self._occupy()
        request = self.request
        owner = celery_task_owner(self.name, request.id or f"direct-{uuid.uuid4()}")
        return core.run(
            core.run_key(args, kwargs),
            owner,
            call,
            requeue=None if request.called_directly else self._retry_busy,
            # Eager runs retry at once, without a countdown: there "retry" waits instead.
            wait=bool(request.is_eager) and self.occupy_on_busy == "retry",
            requeued=(Retry,),
        )

    def _retry_busy(self, busy: Exception, delay: float) -> str:
        """Retry the running task after ``delay`` seconds (raises Celery's ``Retry``)."""
        limit = self.occupy_busy_retries
        raise self.retry(
            exc=busy,
            countdown=delay,
            max_retries=self.request.retries + 1 if limit is None else limit,
        )
