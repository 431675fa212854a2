"""Celery tasks that run once per key: :class:`OccupyTask` (``django-occupy[celery]``).

``@app.task(base=OccupyTask, occupy_key="report:{account_id}", occupy_ttl=60)`` runs
the body under a lease on the key formatted from the task's arguments (as
``occupy.lock``'s decorator formats it), renewed by the watchdog while the body runs and
released when it returns or raises; the body finds it at ``self.lease`` (its fence for
fenced writes). The invariants:

- **Run exclusion.** Two runs of one key never overlap while their leases hold: the
  second finds the key taken and, by ``occupy_on_busy``, is retried after the holder's
  remaining time (``"retry"``, the default: ``self.retry(countdown=…)``, the worker
  never busy-waits), skipped (``"skip"``, logged) or fails (``"raise"``,
  :class:`~occupy.Occupied`). A worker that dies stops renewing: its key is free again
  within ``occupy_ttl`` of its last renewal. A run whose lease was lost (a store
  outage, a force release) cannot write through a fenced save any more
  (:class:`~occupy.FencedOut`), and its end raises :class:`~occupy.LeaseLost`.
- **Enqueue once** (``occupy_once=True``). ``delay()``/``apply_async()`` first claims
  ``celery-once:<key>`` for the new task id; while that claim lives (the task queued,
  retried or running), another enqueue with the same key sends nothing and returns the
  claiming task's ``AsyncResult``. A queued task's claim lives ``occupy_once_ttl``
  seconds (renewed at each busy retry); a running task's claim is renewed with the run
  lease and released at its end. So a lost message holds the key at most
  ``occupy_once_ttl`` seconds, and a dead worker at most ``occupy_ttl`` seconds.

Owners name the task (``celery:<task name>:<task id>``, :mod:`occupy.owners`), so
``list_locks`` and the admin show which task holds which key. The how-to
``docs/howto/tasks.md`` covers worker death, broker restarts and visibility timeouts.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import string
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from celery import Task
from celery._state import _task_stack
from celery.exceptions import Retry

from occupy import api
from occupy.conf import occupy_settings
from occupy.exceptions import LeaseLost, Occupied, OccupyError, TakeoverRefused
from occupy.keys import fit
from occupy.leases import Lease
from occupy.owners import celery_task_owner, parse_task_owner
from occupy.validation import check_key, check_ttl

__all__ = ["BUSY_CHOICES", "OccupyTask", "once_key"]

logger = logging.getLogger("occupy.celery")

#: What ``occupy_on_busy`` may say.
BUSY_CHOICES = ("retry", "skip", "raise")
#: The prefix of an enqueue claim's key.
ONCE_PREFIX = "celery-once:"


def once_key(key: str) -> str:
    """Return the key of the enqueue claim of tasks whose run key is ``key``."""
    return check_key(fit(ONCE_PREFIX, key))


def _fields(template: str) -> set[str]:
    return {
        field.split(".", 1)[0].split("[", 1)[0]
        for _text, field, _spec, _conv in string.Formatter().parse(template)
        if field is not None
    }


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
    - ``occupy_once``: deduplicate enqueues by key; ``occupy_once_ttl`` (default 600)
      bounds how long a queued task's claim outlives a lost message.
    - ``occupy_backend``: the backend alias (default ``"default"``).
    """

    occupy_key: ClassVar[str | None] = None
    occupy_ttl: ClassVar[float | None] = None
    occupy_on_busy: ClassVar[str] = "retry"
    occupy_busy_retries: ClassVar[int | None] = None
    occupy_once: ClassVar[bool] = False
    occupy_once_ttl: ClassVar[float] = 600
    occupy_backend: ClassVar[str] = "default"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Check the occupy options when the task class is made (``@app.task``)."""
        super().__init_subclass__(**kwargs)
        name = f"{cls.__module__}.{cls.__name__}"
        if cls.occupy_on_busy not in BUSY_CHOICES:
            raise ValueError(
                f"{name}: occupy_on_busy must be one of {BUSY_CHOICES}, not {cls.occupy_on_busy!r}."
            )
        if cls.occupy_ttl is not None:
            check_ttl(cls.occupy_ttl)
        check_ttl(cls.occupy_once_ttl)
        if cls.occupy_busy_retries is not None and (
            not isinstance(cls.occupy_busy_retries, int) or cls.occupy_busy_retries < 0
        ):
            raise ValueError(
                f"{name}: occupy_busy_retries must be None or a whole number >= 0, "
                f"not {cls.occupy_busy_retries!r}."
            )
        template = cls.occupy_key
        if template is None:
            if cls.occupy_once:
                raise ValueError(f"{name}: occupy_once needs an occupy_key.")
            return
        if not isinstance(template, str) or not template:
            raise TypeError(f"{name}: occupy_key must be a non-empty str, not {template!r}.")
        run = cls.__dict__.get("run")
        if run is None:
            return
        params = inspect.signature(inspect.unwrap(getattr(run, "__func__", run))).parameters
        missing = _fields(template) - set(params)
        if missing:
            raise ValueError(
                f"{name}: occupy_key {template!r} names {sorted(missing)}, which the "
                "task has no parameter for."
            )

    @property
    def lease(self) -> Lease | None:
        """Return the run lease of the task running now in this context, or ``None``."""
        return getattr(self.request, "occupy_lease", None)

    def occupy_key_for(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
        """Return the run key of a call with ``args`` and ``kwargs``."""
        template = self.occupy_key
        if template is None:
            raise TypeError(f"{self.name} has no occupy_key.")
        if not _fields(template):
            return check_key(template)
        bound = inspect.signature(self.run).bind(*args, **kwargs)
        bound.apply_defaults()
        return check_key(template.format_map(bound.arguments))

    def _ttl(self) -> float:
        return occupy_settings.TTL if self.occupy_ttl is None else float(self.occupy_ttl)

    # Enqueue ------------------------------------------------------------------------

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
        if not self.occupy_once:
            return super().apply_async(args, kwargs, task_id, *rest, **options)
        key = once_key(self.occupy_key_for(args or (), kwargs or {}))
        task_id = task_id or str(uuid.uuid4())
        claim = None
        for _attempt in range(3):  # a claim that ends between acquire and holder: again
            try:
                claim = api.acquire(
                    key,
                    owner=celery_task_owner(self.name, task_id),
                    ttl=self.occupy_once_ttl,
                    timeout=0,
                    reentrant=False,
                    backend=self.occupy_backend,
                )
                break
            except Occupied as e:
                holding = None if e.holder is None else parse_task_owner(e.holder.owner)
                if holding is None and e.holder is not None:
                    raise  # held by something that is not a task: say so
                if holding is not None and holding.task_id != task_id:
                    logger.info(
                        "not sending %s: %s is queued or running for %r",
                        self.name,
                        holding.task_id,
                        key,
                    )
                    return self.AsyncResult(holding.task_id)
                if holding is not None:  # this very task sent again (a retry)
                    break
        try:
            return super().apply_async(args, kwargs, task_id, *rest, **options)
        except BaseException:
            if claim is not None:
                _release_quietly(claim)
            raise

    # Run ----------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the body under the lease on its key (the worker's tracer calls this)."""
        if self.occupy_key is None:
            return super().__call__(*args, **kwargs)
        if not self.request.called_directly:
            return self._run_occupied(args, kwargs)
        # task(...) in-process: no tracer pushed a request; do what Task.__call__ does.
        _task_stack.push(self)
        self.push_request(args=args, kwargs=kwargs)
        try:
            return self._run_occupied(args, kwargs)
        finally:
            self.pop_request()
            _task_stack.pop()

    def _owner(self) -> str:
        task_id = self.request.id or f"direct-{uuid.uuid4()}"
        return celery_task_owner(self.name, task_id)

    def _run_occupied(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        key = self.occupy_key_for(args, kwargs)
        owner = self._owner()
        ttl = self._ttl()
        # Eager runs (task_always_eager, apply()) retry at once, without a countdown:
        # there "retry" waits for the key instead (up to the TIMEOUT setting).
        waits = self.request.is_eager and self.occupy_on_busy == "retry"
        try:
            lease = api.acquire(
                key,
                owner=owner,
                ttl=ttl,
                timeout=api.DEFAULT if waits else 0,
                renew=True,
                reentrant=False,
                backend=self.occupy_backend,
            )
        except Occupied as e:
            return self._busy(key, owner, e)
        claim = self._adopt_claim(key, owner, ttl, renew=True) if self.occupy_once else None
        self.request.occupy_lease = lease
        raised = True
        retrying = False
        try:
            result = self.run(*args, **kwargs)
            raised = False
            return result
        except Retry:
            retrying = True
            raise
        finally:
            self.request.occupy_lease = None
            if claim is not None and retrying:
                # The body's own self.retry(): the task is queued again, its claim stays
                # (unrenewed, occupy_once_ttl) for the wait; the renewed one ends here.
                self._adopt_claim(key, owner, self.occupy_once_ttl, renew=False)
                with contextlib.suppress(OccupyError):
                    api.release(claim)
            elif claim is not None:
                _release_quietly(claim)
            try:
                api.release(lease)
            except LeaseLost:
                if not raised:
                    raise
                logger.warning("%s lost its lease on %r while it raised", self.name, key)

    def _busy(self, key: str, owner: str, busy: Occupied) -> Any:
        countdown = max(1, busy.retry_after or 1)
        if self.occupy_on_busy == "retry" and not self.request.called_directly:
            if self.occupy_once:  # queued again: keep the claim for the wait
                self._adopt_claim(key, owner, countdown + self.occupy_once_ttl, renew=False)
            limit = self.occupy_busy_retries
            raise self.retry(
                exc=busy,
                countdown=countdown,
                max_retries=self.request.retries + 1 if limit is None else limit,
            )
        if self.occupy_once:
            claim = self._adopt_claim(key, owner, self._ttl(), renew=False)
            if claim is not None:
                _release_quietly(claim)
        if self.occupy_on_busy == "skip":
            logger.info(
                "skipped %s[%s]: %r is held by %r",
                self.name,
                self.request.id,
                key,
                None if busy.holder is None else busy.holder.owner,
            )
            return None
        raise busy

    def _adopt_claim(self, key: str, owner: str, ttl: float, *, renew: bool) -> Lease | None:
        """Take over this task's enqueue claim (or the free key) with ``ttl``; ``None``
        when another task's claim holds it (sent after this one's claim had ended)."""
        claim_key = once_key(key)
        current = api.holder(claim_key, backend=self.occupy_backend)
        try:
            if current is None:
                return api.acquire(
                    claim_key,
                    owner=owner,
                    ttl=ttl,
                    timeout=0,
                    renew=renew,
                    reentrant=False,
                    backend=self.occupy_backend,
                )
            if current.owner != owner:
                return None
            # Only the grant read above is replaced: a claim that changed since is kept.
            return api.takeover(
                claim_key,
                owner=owner,
                ttl=ttl,
                renew=renew,
                reentrant=False,
                backend=self.occupy_backend,
                if_fence=current.fence,
            )
        except (Occupied, TakeoverRefused):
            return None


def _release_quietly(lease: Lease) -> None:
    try:
        api.release(lease)
    except OccupyError as e:  # it ends by its ttl anyway
        logger.warning("could not release %r: %s", lease.key, e)
