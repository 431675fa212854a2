"""OpenTelemetry metrics and spans for waits, holds, contention, losses and refused writes.

occupy calls the OpenTelemetry *API* only (``pip install "django-occupy[telemetry]"``):
it configures no SDK, reader or exporter. Without the ``opentelemetry-api`` package every
function here returns at once; with the API but no SDK the API's own no-op instruments
take the calls. What is recorded and how to export it: ``docs/howto/telemetry.md``.

Invariants:

- Attributes are low-cardinality: the backend alias, the store kind, the key's family
  (``OCCUPY["TELEMETRY"]["KEY_FAMILY"]``, by default the part before the first ``:``),
  an outcome or reason from a fixed set, a model label. A full key, an owner or a
  token never reaches an attribute: user ids and tokens must not reach a metrics backend.
- Hold time and the held count cover the leases this process holds itself (taken with
  ``reentrant=True``, the default); a lease handed to an HTTP client with its token is
  held by that client, so only its wait is recorded. A lease counts once however many
  levels were re-entered, from its grant to its last release, expiry or loss.
- Telemetry never raises into the lock path: an instrument that fails is logged once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from occupy import signals
from occupy.telemetry import instruments
from occupy.telemetry.instruments import (
    ENABLED,
    EXPIRED,
    FAILED,
    GRANTED,
    OCCUPIED,
    RELEASED,
    STORE_FAILURE,
    TAKEN_OVER,
    TIMED_OUT,
    UNKNOWN,
    Backend,
    _attributes,
    _get,
    _Held,
    _held,
    _held_lock,
    _safely,
    _tally,
    _version,
    _waiting,
    active,
    family,
    store_kind,
)

if TYPE_CHECKING:
    from occupy.exceptions import ConflictError
    from occupy.leases import Holder, Lease

__all__ = [
    "ENABLED",
    "acquiring",
    "active",
    "family",
    "granted",
    "http_response",
    "refused",
    "release_failed",
    "released",
    "span",
    "store_error",
    "taken_over",
]


@contextmanager
def acquiring(backend: Backend, key: str, timeout: float | None) -> Iterator[None]:
    """Record the wait of the acquire run inside the block, with its outcome."""
    if not active():
        yield
        return
    from occupy.exceptions import LockTimeout, Occupied, StoreUnavailable

    attributes = _attributes(backend, key)
    waits = timeout is None or timeout > 0
    if waits:
        _tally(_waiting, attributes, 1)
    started = time.monotonic()
    outcome = GRANTED
    try:
        yield
    except LockTimeout:
        outcome = TIMED_OUT
        raise
    except Occupied:
        outcome = OCCUPIED
        raise
    except StoreUnavailable:
        outcome = FAILED
        raise
    finally:
        waited = time.monotonic() - started

        if waits:
            _tally(_waiting, attributes, -1)
        _safely(lambda: _get().wait.record(waited, {**attributes, "occupy.outcome": outcome}))


def granted(backend: Backend, lease: Lease, *, deeper: bool, held_here: bool) -> None:
    """Note a grant: a new lease this process holds, or one level deeper of one."""
    if not held_here or not active():
        return
    ident = (lease.alias, lease.key, lease.token)
    with _held_lock:
        entry = _held.get(ident)
        if entry is not None and deeper:
            entry.levels += 1
            return
        if entry is None:
            entry = _held[ident] = _Held(lease, _attributes(backend, lease.key))
    _get()  # the instruments exist from the first lease on, so the held one is observed


def released(lease: Lease) -> None:
    """Note a successful release of one level of ``lease``."""
    if active():
        _end(lease, RELEASED, every_level=False)


def taken_over(backend: Backend, lease: Lease) -> None:
    """Note that this process took ``lease`` over from another holder."""
    if active():
        _safely(lambda: _get().takeovers.add(1, _attributes(backend, lease.key)))


def _end(lease: Lease, how: str, *, every_level: bool) -> bool:
    """End one level (or all) of a lease held here; return whether it was held here."""
    ident = (lease.alias, lease.key, lease.token)
    with _held_lock:
        entry = _held.get(ident)
        if entry is None:
            return False
        entry.levels -= 1
        if entry.levels > 0 and not every_level:
            return True
        del _held[ident]
    held_for = time.monotonic() - entry.since

    def record() -> None:
        instruments = _get()
        instruments.hold.record(held_for, {**entry.attributes, "occupy.lease.end": how})
        if how != RELEASED:
            instruments.lost.add(1, {**entry.attributes, "occupy.reason": how})

    _safely(record)
    return True


def _lost_reason(lease: Lease, cause: str | None) -> str:
    """Tell why ``lease`` was lost: the cause its finder gave, else by time. Its expiry
    (store clock) minus the time held (local monotonic clock) still ahead of the grant's
    store time means it should still be live: something replaced it (a takeover, a force
    release). Only differences of each clock are compared, never one clock with another."""
    if cause is not None:
        return cause
    with _held_lock:
        entry = _held.get((lease.alias, lease.key, lease.token))
    if entry is None:  # not held here: when it was granted is not known
        return UNKNOWN
    left = lease.expires_at.timestamp() - (entry.granted_at + time.monotonic() - entry.since)
    return TAKEN_OVER if left > 0.05 else EXPIRED


def _on_lease_lost(
    sender: Any, lease: Lease, reason: str, cause: str | None = None, **kwargs: Any
) -> None:
    if not active():
        return
    how = _lost_reason(lease, cause)
    if not _end(lease, how, every_level=True) and lease.backend is not None:
        # Not held here (a lease handed to an HTTP client): its loss still counts.
        attributes = {**_attributes(lease.backend, lease.key), "occupy.reason": how}
        _safely(lambda: _get().lost.add(1, attributes))


def release_failed(lease: Lease) -> None:
    """Note a release the store could not answer: the lease is no longer held here."""
    if active():
        _end(lease, STORE_FAILURE, every_level=True)


def _on_taken_over(sender: Any, lease: Lease, previous: Holder | None, **kwargs: Any) -> None:
    backend = lease.backend
    if backend is not None:
        taken_over(backend, lease)


# --- what the model side and the HTTP layer report --------------------------------------


def refused(error: ConflictError) -> None:
    """Count a guarded write refused with ``error``: a stale fence (``FencedOut``) or a
    changed row (``VersionConflict``), by model label."""
    if not active():
        return
    from occupy.exceptions import FencedOut, VersionConflict

    model = getattr(error, "model", None)
    attributes = {"occupy.model": "" if model is None else model._meta.label_lower}
    if isinstance(error, FencedOut):
        _safely(lambda: _get().fenced_out.add(1, attributes))
    elif isinstance(error, VersionConflict):
        _safely(lambda: _get().conflicts.add(1, attributes))


def store_error(backend: Backend, key: str | None) -> None:
    """Count a call that found the lock store unavailable."""
    if not active():
        return
    attributes = {"occupy.backend": backend.alias, "occupy.store": store_kind(backend)}
    if key is not None:
        attributes["occupy.key.family"] = family(key)
    _safely(lambda: _get().store_errors.add(1, attributes))


#: The statuses of the HTTP contract that ``occupy.http.responses`` counts.
HTTP_STATUSES = frozenset({304, 409, 412, 423, 428, 503})


def http_response(status: int, code: str | None) -> None:
    """Count a DRF response with an occupy status (``code``: the body's, if any)."""
    if active():
        attributes: dict[str, str | int] = {"http.response.status_code": status}
        if code is not None:
            attributes["occupy.code"] = code
        _safely(lambda: _get().http.add(1, attributes))


# --- spans ------------------------------------------------------------------------------


def span(name: str, backend: Backend | None, key: str) -> Any:
    """Return a context manager around a span named ``name`` with the key's attributes
    (made current, so a slow request shows where it waited); a no-op without the API."""
    if not active():
        return nullcontext()
    assert instruments.otel_trace is not None
    attributes: dict[str, str] = (
        {"occupy.key.family": family(key)} if backend is None else _attributes(backend, key)
    )
    return _tracer().start_as_current_span(name, attributes=attributes)


_tracer_found: Any = None


def _tracer() -> Any:
    """Return occupy's tracer, made once (the API's tracer follows the global provider)."""
    global _tracer_found
    if _tracer_found is None:
        assert instruments.otel_trace is not None
        version = _version()
        _tracer_found = (
            instruments.otel_trace.get_tracer("occupy")
            if version is None
            else instruments.otel_trace.get_tracer("occupy", version)
        )
    return _tracer_found


signals.lease_lost.connect(_on_lease_lost, dispatch_uid="occupy.telemetry.lost")
signals.lease_taken_over.connect(_on_taken_over, dispatch_uid="occupy.telemetry.takeover")
