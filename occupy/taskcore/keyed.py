"""A task's keys, claims and runs on its backend: :class:`KeyedTask` (see
:mod:`occupy.taskcore` for the invariants)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, TypeVar

from occupy import api
from occupy.exceptions import LeaseLost, Occupied, OccupyError, TakeoverRefused
from occupy.keys import KeyTemplate
from occupy.leases import Holder, Lease
from occupy.owners import TaskOwner, parse_task_owner
from occupy.taskcore.options import TaskOptions, once_key

__all__ = ["KeyedTask", "claimant", "current_lease"]

logger = logging.getLogger("occupy.tasks")
T = TypeVar("T")

#: The leases of the task bodies running in this context, innermost last: (task, lease).
_running: ContextVar[tuple[tuple[str, Lease], ...]] = ContextVar("occupy_task_runs", default=())


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
            backend=self.options.backend,
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
                backend=self.options.backend,
                if_fence=fence,
            )
        except TakeoverRefused:
            return None

    def holder(self, key: str) -> Holder | None:
        """Return who holds ``key`` now."""
        return api.holder(key, backend=self.options.backend)

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
                logger.warning("task %r lost its lease on %r while it raised", owner, key)

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
                "task %r: %r is held by %r; runs again in %.0f s as %s",
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
            logger.info("task %r skipped: %r is held by %r", owner, key, held_by)
            return
        raise busy
