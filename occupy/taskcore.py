"""The core of occupy's task integrations: one run per key, one enqueue per key.

:mod:`occupy.celery` (Celery) and :mod:`occupy.django_tasks` (Django's tasks framework)
are thin adapters on this module: they read the same options (:class:`TaskOptions`:
``occupy_key``, ``occupy_ttl``, ``occupy_on_busy``, ``occupy_once``,
``occupy_backend``), raise the same errors, and leave every decision about keys,
claims and busy runs to :class:`KeyedTask`. The invariants:

- **Run-exclusion.** A run's body runs only while the run holds a lease on its run key
  (the ``occupy_key`` template formatted with the call's arguments by name, as
  ``@occupy.lock`` formats it: :class:`~occupy.keys.KeyTemplate`), renewed by the
  watchdog while the body runs and released when it returns or raises. A worker that
  dies stops renewing: the key is free again within ``occupy_ttl``. A lease lost while
  the body runs fences the body's fenced writes out, and the run ends with
  :class:`~occupy.LeaseLost`.
- **Busy.** A run that finds its key held runs nothing: ``"retry"`` has the framework
  run the call again after the holder's remaining time, ``"skip"`` returns ``None``
  (logged), ``"raise"`` raises :class:`~occupy.Occupied`.
- **Enqueue-once, per task and key.** An enqueue of a task with ``occupy_once`` claims
  the key :func:`once_key` of its task's name and its run key for the new task; while
  the claim names a task that is queued, waiting for a retry or running, another
  enqueue of the same task and run key returns that task instead of enqueuing one.
  Two different tasks never share a claim, whatever their keys. A queued task's claim
  lives ``occupy_once`` seconds (:data:`ONCE_TTL` for ``True``); the run takes it over,
  renews it with its lease (so a dead worker's claim ends within ``occupy_ttl``) and
  ends it with the run.

The owners these leases carry name the task (:mod:`occupy.owners`), so ``list_locks``
and the admin show which task holds which key. The how-tos: docs/howto/tasks.md
(Celery) and docs/howto/django-tasks.md.
"""

from __future__ import annotations

import importlib
import logging
import weakref
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from django.core.checks import CheckMessage, Error, Tags, register
from django.utils.module_loading import module_has_submodule

from occupy import api
from occupy.checks import unconfigured_alias
from occupy.conf import occupy_settings
from occupy.exceptions import LeaseLost, Occupied, OccupyError, TakeoverRefused
from occupy.keys import KeyTemplate, fit
from occupy.leases import Holder, Lease
from occupy.owners import TaskOwner, parse_task_owner
from occupy.validation import duration_problem

__all__ = [
    "ONCE_PREFIX",
    "ONCE_TTL",
    "ON_BUSY",
    "KeyedTask",
    "TaskOptions",
    "check_tasks",
    "claimant",
    "current_lease",
    "declared",
    "once_key",
]

logger = logging.getLogger("occupy.tasks")
T = TypeVar("T")

#: What ``occupy_on_busy`` may say.
ON_BUSY = ("retry", "skip", "raise")
#: The prefix of every enqueue-once claim's key.
ONCE_PREFIX = "once:"
#: How long an enqueue-once claim lives while its task waits in the queue, for
#: ``occupy_once=True`` (seconds).
ONCE_TTL = 3600.0

#: The leases of the task bodies running in this context, innermost last: (task, lease).
_running: ContextVar[tuple[tuple[str, Lease], ...]] = ContextVar("occupy_task_runs", default=())


def once_key(task: str, run_key: str) -> str:
    """Return the key of the enqueue-once claim of task ``task`` for its run key
    ``run_key``: ``once:<task>:<run key>``, shortened (:func:`occupy.keys.fit`) to
    :data:`~occupy.validation.MAX_KEY_LENGTH` characters when longer, so that it is a
    valid key for every valid run key and every task name."""
    return fit(ONCE_PREFIX, f"{task}:{run_key}")


def claimant(claim: Holder) -> TaskOwner:
    """Return the task a claim that :meth:`KeyedTask.claim` returned names."""
    named = parse_task_owner(claim.owner)
    if named is None:
        raise ValueError(f"{claim.owner!r} is no task's owner.")
    return named


def current_lease(task: str | None = None) -> Lease | None:
    """Return the lease of the innermost task body running in this context (of task
    ``task`` if given), or ``None``."""
    for name, lease in reversed(_running.get()):
        if task is None or name == task:
            return lease
    return None


@dataclass(frozen=True)
class TaskOptions:
    """A task's occupy options, as both integrations spell them (``occupy_<name>``).

    ``task`` is the task's name as owners, once-keys and errors give it (Celery's task
    name; the framework's dotted path of the function).
    """

    task: str
    key: str | None
    ttl: float | None = None
    on_busy: str = "retry"
    once: bool | float = False
    backend: str = "default"

    def problems(self) -> list[CheckMessage]:
        """Return the check errors of the options whose value is wrong, whatever the
        settings (the backend alias is :func:`check_tasks`'s)."""
        out: list[CheckMessage] = []
        if self.ttl is not None and (why := duration_problem(self.ttl)) is not None:
            out.append(
                Error(
                    f"task {self.task}: occupy_ttl {why}.",
                    hint="Give occupy_ttl in seconds (how long a dead worker keeps the key), "
                    "or None for OCCUPY['TTL'].",
                    obj=self.task,
                    id="occupy.E402",
                )
            )
        if self.on_busy not in ON_BUSY:
            out.append(
                Error(
                    f"task {self.task}: occupy_on_busy must be one of {', '.join(ON_BUSY)}, "
                    f"not {self.on_busy!r}.",
                    hint="Say what a run does when another run holds its key.",
                    obj=self.task,
                    id="occupy.E403",
                )
            )
        once = self.once
        why = None if once is False or once is True else duration_problem(once)
        if why is not None or (once is not False and self.key is None):
            out.append(
                Error(
                    f"task {self.task}: occupy_once {why}."
                    if why is not None
                    else f"task {self.task}: occupy_once needs an occupy_key.",
                    hint="Give occupy_once False, True, or the seconds a queued task's claim "
                    "lives, and an occupy_key.",
                    obj=self.task,
                    id="occupy.E404",
                )
            )
        return out

    def validate(self) -> None:
        """Raise ``ValueError`` with the first of :meth:`problems`, if any."""
        problems = self.problems()
        if problems:
            raise ValueError(problems[0].msg)

    @property
    def lease_ttl(self) -> float:
        """Return the seconds a run's lease lives unless renewed."""
        return float(occupy_settings.TTL if self.ttl is None else self.ttl)

    @property
    def once_ttl(self) -> float:
        """Return the seconds an enqueue-once claim lives while its task is queued."""
        return ONCE_TTL if self.once is True else float(self.once)


class Declared(Protocol):
    """A task (or task class) of an integration, as :func:`declared` records it."""

    def occupy_options(self) -> TaskOptions:
        """Return the task's options as they are now."""


class KeyedTask:
    """The keys, claims and runs of one task on its backend (see the module docstring).

    ``template`` is the ``occupy_key`` bound to the task's function; every store call
    goes to the backend ``options.backend``.
    """

    def __init__(self, options: TaskOptions, template: KeyTemplate | None) -> None:
        self.options = options
        self.template = template

    # Keys ---------------------------------------------------------------------------

    def run_key(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
        """Return the run key of a call (``ValueError`` naming the task and template)."""
        if self.template is None:
            raise TypeError(f"task {self.options.task} has no occupy_key.")
        return self.template.format(args, kwargs)

    def once_key(self, run_key: str) -> str:
        """Return this task's enqueue-once key for ``run_key``."""
        return once_key(self.options.task, run_key)

    # The store --------------------------------------------------------------------

    def take(
        self, key: str, owner: str, ttl: float, *, timeout: float | None = 0, renew: bool = False
    ) -> Lease:
        """Take ``key`` for ``owner`` (never re-entrant: each run and claim is its own)."""
        return api.acquire(
            key,
            owner=owner,
            ttl=ttl,
            timeout=timeout,
            renew=renew,
            reentrant=False,
            using=self.options.backend,
        )

    def replace(
        self, key: str, owner: str, ttl: float, fence: int, *, renew: bool = False
    ) -> Lease | None:
        """Replace the grant of ``key`` whose fence is ``fence`` by one for ``owner``;
        ``None`` when that grant is no longer the key's."""
        try:
            return api.takeover(
                key,
                owner=owner,
                ttl=ttl,
                renew=renew,
                reentrant=False,
                using=self.options.backend,
                if_fence=fence,
            )
        except TakeoverRefused:
            return None

    def holder(self, key: str) -> Holder | None:
        """Return who holds ``key`` now."""
        return api.holder(key, using=self.options.backend)

    @staticmethod
    def let_go(lease: Lease | None) -> None:
        """Release ``lease`` if there is one; one that ended already, or a store that
        does not answer, is logged (the lease ends by its ttl anyway)."""
        if lease is None or lease.released:
            return
        try:
            api.release(lease)
        except OccupyError as e:
            logger.info(
                "the claim on %r had already ended or could not be released: %s", lease.key, e
            )

    # Enqueue-once -----------------------------------------------------------------

    def claim(self, key: str, owner: str, ttl: float) -> Lease | Holder:
        """Take the enqueue-once claim ``key`` for ``owner``, or return the holder of the
        task's claim that holds it (its owner names the task: :func:`claimant`); raise
        :class:`~occupy.Occupied` when it is held by an owner that is no task's."""
        while True:
            try:
                return self.take(key, owner, ttl)
            except Occupied as busy:
                current = busy.holder
            if current is None:
                continue  # it ended between the attempt and the answer
            if parse_task_owner(current.owner) is None:
                raise Occupied(
                    f"The enqueue-once claim {key!r} is held by {current.owner!r}, "
                    "which is no task's claim.",
                    key=key,
                    holder=current,
                )
            return current

    def adopt(self, key: str, owner: str, ttl: float, *, renew: bool) -> Lease | None:
        """Hold the claim ``key`` for ``owner`` with ``ttl``: taken over if it names
        ``owner``, taken if it is free, ``None`` if another task's claim holds it."""
        current = self.holder(key)
        if current is None:
            try:
                return self.take(key, owner, ttl, renew=renew)
            except Occupied:
                return None
        if current.owner != owner:
            return None
        return self.replace(key, owner, ttl, current.fence, renew=renew)

    def drop(self, key: str, owner: str) -> None:
        """End the claim ``key`` if it names ``owner`` (another task's is left alone)."""
        current = self.holder(key)
        if current is not None and current.owner == owner:
            self.let_go(self.replace(key, owner, self.options.lease_ttl, current.fence))

    # Runs -------------------------------------------------------------------------

    def run(
        self,
        key: str,
        owner: str,
        body: Callable[[], T],
        *,
        requeue: Callable[[Occupied, float], str] | None,
        wait: bool = False,
        requeued: tuple[type[BaseException], ...] = (),
    ) -> T | None:
        """Run ``body`` under the lease on ``key`` for ``owner``, or do what
        ``occupy_on_busy`` says when ``key`` is held.

        ``requeue(busy, delay)`` has the framework run the same call again in ``delay``
        seconds (``busy``: the :class:`~occupy.Occupied` that made it wait) and returns
        the owner of that run (it may raise, as Celery's
        ``self.retry()`` does); ``None`` where the call cannot be run again (called
        directly), where ``"retry"`` raises. ``wait``: wait for the key, up to the
        ``TIMEOUT`` setting, instead of ``"retry"`` (Celery's eager runs). An exception
        of ``requeued`` from the body means the framework runs the call again: its
        enqueue-once claim stays, for ``occupy_once``'s bound, instead of ending.
        """
        options = self.options
        try:
            lease = self.take(
                key, owner, options.lease_ttl, timeout=api.DEFAULT if wait else 0, renew=True
            )
        except Occupied as busy:
            self._busy(busy, key, owner, requeue)
            return None
        claim_key = self.once_key(key) if options.once is not False else None
        claim = (
            None
            if claim_key is None
            else self.adopt(claim_key, owner, options.lease_ttl, renew=True)
        )
        token = _running.set((*_running.get(), (options.task, lease)))
        finished = again = False
        try:
            value = body()
            finished = True
            return value
        except requeued:
            again = True
            raise
        finally:
            _running.reset(token)
            if claim is not None and claim_key is not None and again:
                # Queued again: an unrenewed claim for the wait replaces the renewed one
                # (whose release below then finds it replaced, and only stops renewing).
                self.adopt(claim_key, owner, options.once_ttl, renew=False)
            self.let_go(claim)
            try:
                api.release(lease)
            except LeaseLost:
                if finished:
                    raise
                logger.warning("task %s lost its lease on %r while it raised", owner, key)

    def _busy(
        self,
        busy: Occupied,
        key: str,
        owner: str,
        requeue: Callable[[Occupied, float], str] | None,
    ) -> None:
        """Do what ``occupy_on_busy`` says for a run of ``owner`` that found ``key`` held."""
        options = self.options
        held_by = "someone" if busy.holder is None else busy.holder.owner
        claim_key = self.once_key(key) if options.once is not False else None
        if options.on_busy == "retry" and requeue is not None:
            delay = max(float(busy.retry_after or 0), 1.0)
            ttl = delay + max(options.once_ttl, options.lease_ttl)
            claim = None if claim_key is None else self.adopt(claim_key, owner, ttl, renew=False)
            again = requeue(busy, delay)  # Celery's raises: the claim already covers the wait
            logger.info(
                "task %s: %r is held by %s; runs again in %.0f s as %s",
                options.task,
                key,
                held_by,
                delay,
                again,
            )
            if claim is not None and claim_key is not None and again != owner:
                self.replace(claim_key, again, ttl, claim.fence)
            return
        if claim_key is not None:
            self.drop(claim_key, owner)
        if options.on_busy == "skip":
            logger.info("task %s skipped: %r is held by %s", owner, key, held_by)
            return
        raise busy


#: The tasks declared so far (classes or instances), by weak reference.
_declared: list[weakref.ref[Any]] = []


def declared(task: Declared) -> None:
    """Record ``task`` (a task, or a task class) for the system checks."""
    _declared[:] = [ref for ref in _declared if ref() is not None]
    _declared.append(weakref.ref(task))


def _discover() -> None:
    """Import the ``tasks`` module of every installed app that has one, as Celery's
    autodiscovery does, so that the checks see the tasks declared there."""
    from django.apps import apps

    for config in apps.get_app_configs():
        if module_has_submodule(config.module, "tasks"):
            importlib.import_module(f"{config.name}.tasks")


@register(Tags.compatibility)
def check_tasks(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Check the occupy options of every task declared (``occupy.E401`` to ``E404``),
    after importing each installed app's ``tasks`` module."""
    _discover()
    messages: list[CheckMessage] = []
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
