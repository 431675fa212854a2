"""What an acquire, a takeover and a guarded write's lock record: the outcome counts, the
wait of an acquire that waited, and a span (or, for the write, an event on the current
span) when there is news: a wait past ``WAIT_SPAN_THRESHOLD``, a refusal, a timeout, a
failure.

Invariant: an acquire granted at first try records no SDK call at all (its outcome is an
in-process tally); whether it waited is said by the backend's waiting loop, which calls
the hook it was handed (:meth:`Acquire.began_waiting`), never guessed from its duration.
The hook is passed, not found in a context variable: setting and resetting one per
acquire cost a twentieth of an uncontended pair's telemetry.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from time import perf_counter_ns
from types import TracebackType
from typing import Any

from occupy.exceptions import LockTimeout, Occupied, OccupyError, StoreUnavailable
from occupy.telemetry import spans
from occupy.telemetry.attributes import AttributeSet, Backend, key_attributes
from occupy.telemetry.instruments import active, count, instruments, report_failure, waiting
from occupy.telemetry.spans import span_settings

__all__ = [
    "FAILED",
    "GRANTED",
    "GRANTED_AFTER_WAIT",
    "GRANTED_AT_ONCE",
    "OCCUPIED",
    "OUTCOME",
    "TIMED_OUT",
    "Acquire",
    "Unwatched",
    "Watch",
    "acquiring",
    "taking_over",
    "write_lock",
]

#: and on the spans.
GRANTED_AT_ONCE, GRANTED_AFTER_WAIT = "granted_at_once", "granted_after_wait"
OCCUPIED, TIMED_OUT, FAILED = "occupied", "timed_out", "store_error"
#: The outcome of a grant in the wait histogram (everything in it waited).
GRANTED = "granted"
OUTCOME = "occupy.outcome"
ACQUIRES = "occupy.lock.acquires"


class Acquire:
    """One acquire being watched: when it began, when its first try found the key held
    (``None`` while it has not waited), and its attributes once needed."""

    __slots__ = ("attributes", "backend", "held_here", "key", "started", "waited_at")

    def __init__(self, backend: Backend, key: str, held_here: bool) -> None:
        self.backend = backend
        self.key = key
        self.held_here = held_here
        self.attributes: AttributeSet | None = None
        self.waited_at: int | None = None
        self.started = 0

    def __enter__(self) -> Acquire:
        self.started = perf_counter_ns()
        return self

    def began_waiting(self) -> None:
        """Note that the first try found the key held and the acquire will wait (the
        hook the backend's waiting loop calls, once)."""
        if self.waited_at is None:
            self.waited_at = perf_counter_ns()
            try:
                waiting(self.key_attributes(), 1)
            except Exception:
                report_failure()

    def key_attributes(self) -> AttributeSet:
        """Return the common attributes of the key (made on first use)."""
        found = self.attributes
        if found is None:
            found = self.attributes = key_attributes(self.backend, self.key)
        return found

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        ended = perf_counter_ns()
        try:
            if exc_type is None and self.waited_at is None and _write.get() is None:
                # Granted at first try, outside a guarded write: only its tally (the
                # common case, kept to the fewest calls).
                found = self.attributes
                if found is None:
                    found = self.attributes = key_attributes(self.backend, self.key)
                count(ACQUIRES, found.plus(OUTCOME, GRANTED_AT_ONCE))
            else:
                self._record(exc_type, ended)
        except Exception:
            report_failure()

    def _record(self, error: type[BaseException] | None, ended: int) -> None:
        waited = self.waited_at is not None
        if waited:
            waiting(self.key_attributes(), -1)
        if error is None:
            outcome = GRANTED_AFTER_WAIT if waited else GRANTED_AT_ONCE
        elif issubclass(error, LockTimeout):
            outcome, waited = TIMED_OUT, True  # a grant past the deadline waited for the store
        elif issubclass(error, Occupied):
            outcome = OCCUPIED
        elif issubclass(error, StoreUnavailable):
            outcome = FAILED
        else:
            return  # cancelled or interrupted: no outcome
        attributes = self.key_attributes()
        count(ACQUIRES, attributes.plus(OUTCOME, outcome))
        if waited:
            seconds = (ended - self.started) / 1e9
            histogram_outcome = GRANTED if error is None else outcome
            instruments().wait.record(
                seconds, attributes.plus(OUTCOME, histogram_outcome).attributes
            )
        threshold, every_section = span_settings()
        news = error is not None or (waited and ended - self.started >= threshold)
        write = _write.get()
        if write is not None:
            write.note(attributes, outcome, error, contended=waited or outcome == OCCUPIED)
        elif news and (error is not None or not (every_section and self.held_here)):
            spans.finished(
                spans.WAIT, attributes.plus(OUTCOME, outcome), self.started, ended, error
            )


class Unwatched:
    """Stands for :class:`Acquire` (and the other watches) when nothing is recorded."""

    #: No hook for the waiting loop: nothing to note.
    began_waiting: Callable[[], None] | None = None

    def __enter__(self) -> Unwatched:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None


_UNWATCHED = Unwatched()
#: What :func:`acquiring` returns, for :func:`~occupy.telemetry.holds.granted`.
Watch = Acquire | Unwatched | None


def acquiring(backend: Backend, key: str, *, held_here: bool) -> Acquire | Unwatched:
    """Return a context manager around an acquire of ``key`` (the backend's waiting
    loop), which records its outcome and, if it waited, its wait; hand its
    ``began_waiting`` to the waiting loop, and pass what it returns to :func:`granted`.
    ``held_here``: the lease will be held by this process."""
    if not active():
        return _UNWATCHED
    return Acquire(backend, key, held_here)


class _Takeover:
    """A takeover being watched: a span if it is refused or fails, nothing otherwise."""

    __slots__ = ("backend", "key", "started")

    def __init__(self, backend: Backend, key: str) -> None:
        self.backend, self.key, self.started = backend, key, 0

    def __enter__(self) -> _Takeover:
        self.started = perf_counter_ns()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None or not issubclass(exc_type, OccupyError):
            return
        ended = perf_counter_ns()
        try:
            attributes = key_attributes(self.backend, self.key)
            spans.finished(spans.TAKEOVER, attributes, self.started, ended, exc_type)
        except Exception:
            report_failure()


def taking_over(backend: Backend, key: str) -> _Takeover | Unwatched:
    """Return a context manager around a takeover of ``key``: a refused or failed one
    gets a span, with its ``error.type``."""
    if not active():
        return _UNWATCHED
    return _Takeover(backend, key)


# --- the DRF guarded write --------------------------------------------------------------


class _WriteLock:
    """The write lock of a guarded write being taken: what its acquires found, for one
    event on the request's span instead of spans of their own."""

    __slots__ = ("attributes", "contended", "error", "outcome", "reset", "started")

    def __init__(self) -> None:
        self.attributes: AttributeSet | None = None
        self.outcome = ""
        self.error: type[BaseException] | None = None
        self.contended = False
        self.started = 0

    def note(
        self,
        attributes: AttributeSet,
        outcome: str,
        error: type[BaseException] | None,
        *,
        contended: bool,
    ) -> None:
        """Note the outcome of one acquire of the write lock (the last one counts)."""
        self.attributes, self.outcome, self.error = attributes, outcome, error
        self.contended = self.contended or contended

    def __enter__(self) -> _WriteLock:
        self.reset = _write.set(self)
        self.started = perf_counter_ns()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        ended = perf_counter_ns()
        _write.reset(self.reset)
        if self.attributes is None:
            return
        threshold, every_section = span_settings()
        news = self.error is not None or (self.contended and ended - self.started >= threshold)
        if not (news or every_section):
            return
        values: dict[str, Any] = {
            **self.attributes.plus(OUTCOME, self.outcome).span_attributes,
            "occupy.wait.duration": (ended - self.started) / 1e9,
        }
        if self.error is not None:
            values[spans.ERROR_TYPE] = spans.error_type(self.error)
        try:
            spans.add_event("occupy.write_lock", values)
        except Exception:
            report_failure()


_write: ContextVar[_WriteLock | None] = ContextVar("occupy_telemetry_write", default=None)


def write_lock() -> _WriteLock | Unwatched:
    """Return a context manager around taking a guarded write's lock: its acquires make
    no span of their own; an event on the current span (the request's) says how it went
    when it waited past the threshold or failed (every time, when every section is
    traced)."""
    if not active():
        return _UNWATCHED
    return _WriteLock()
