"""``retry_on_conflict``: re-run a read-modify-write that lost an optimistic race."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import math
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast, overload

from occupy.exceptions import VersionConflict

__all__ = ["retry_on_conflict"]

logger = logging.getLogger("occupy.retry")
F = TypeVar("F", bound=Callable[..., Any])


@overload
def retry_on_conflict(func: F, /, *, attempts: int = 3, backoff: float = 0.05) -> F: ...


@overload
def retry_on_conflict(
    func: None = None, /, *, attempts: int = 3, backoff: float = 0.05
) -> Callable[[F], F]: ...


def retry_on_conflict(
    func: F | None = None, /, *, attempts: int = 3, backoff: float = 0.05
) -> F | Callable[[F], F]:
    """Re-run the decorated function when it raises :class:`~occupy.VersionConflict`.

    The function must load the row itself and re-apply its change, so that each run
    starts from fresh data; after ``attempts`` runs in all, the last conflict is
    raised. Between runs it pauses a random time up to ``backoff`` seconds (doubling
    each time), so that writers racing for one row do not collide again in step.
    Works bare (``@retry_on_conflict``) or with arguments, on sync and async
    functions::

        @occupy.retry_on_conflict(attempts=5)
        def rename(pk, name):
            book = Book.objects.get(pk=pk)
            book.name = name
            book.save()

    Call it outside ``transaction.atomic()``: a retry inside the same transaction
    reads the same snapshot under REPEATABLE READ (MySQL's default) and conflicts again.
    """
    _check(attempts, backoff)

    def decorate(fn: F) -> F:
        wrap = _retrying_async if inspect.iscoroutinefunction(fn) else _retrying
        return cast(F, functools.wraps(fn)(wrap(fn, attempts, backoff)))

    if func is not None:
        if not callable(func):
            raise TypeError(f"retry_on_conflict() decorates a function, not {func!r}.")
        return decorate(func)
    return decorate


def _check(attempts: int, backoff: float) -> None:
    """Raise ``TypeError`` or ``ValueError`` naming a bad ``attempts`` or ``backoff``."""
    if isinstance(attempts, bool) or not isinstance(attempts, int):
        raise TypeError(f"attempts must be an int, not {type(attempts).__name__} ({attempts!r}).")
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, not {attempts!r}.")
    if isinstance(backoff, bool) or not isinstance(backoff, int | float):
        raise TypeError(f"backoff must be a number of seconds, not {type(backoff).__name__}.")
    if not math.isfinite(backoff) or backoff < 0:
        raise ValueError(f"backoff must be 0 or more seconds, not {backoff!r}.")


def _pause(backoff: float, attempt: int) -> float:
    """Return a random pause up to ``backoff`` doubled ``attempt`` times."""
    return random.uniform(0, backoff * 2**attempt)


def _retrying(fn: Callable[..., Any], attempts: int, backoff: float) -> Callable[..., Any]:
    """Return ``fn`` run up to ``attempts`` times while it raises ``VersionConflict``."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for attempt in range(attempts - 1):
            try:
                return fn(*args, **kwargs)
            except VersionConflict as e:
                logger.debug("%s conflicted (%s); retrying", fn.__qualname__, e)
                time.sleep(_pause(backoff, attempt))
        return fn(*args, **kwargs)  # the last run's conflict is raised

    return wrapper


def _retrying_async(fn: Callable[..., Any], attempts: int, backoff: float) -> Callable[..., Any]:
    """Async twin of :func:`_retrying`."""

    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        for attempt in range(attempts - 1):
            try:
                return await fn(*args, **kwargs)
            except VersionConflict as e:
                logger.debug("%s conflicted (%s); retrying", fn.__qualname__, e)
                await asyncio.sleep(_pause(backoff, attempt))
        return await fn(*args, **kwargs)  # the last run's conflict is raised

    return wrapper
