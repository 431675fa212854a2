"""OpenTelemetry metrics and spans for waits, holds, contention, losses and refused writes.

occupy calls the OpenTelemetry *API* only (``pip install "django-occupy[telemetry]"``):
it configures no SDK, reader or exporter. Without the ``opentelemetry-api`` package every
function here returns at once; with the API but no SDK the API's own no-op instruments
take the calls. What is recorded and how to export it: ``docs/topics/telemetry.md``.

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

import importlib.metadata
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from django.utils.module_loading import import_string

from occupy import signals
from occupy.conf import occupy_settings

if TYPE_CHECKING:
    from occupy.backends.base import BaseBackend
    from occupy.exceptions import ConflictError
    from occupy.leases import Holder, Lease

try:
    from opentelemetry import metrics as otel_metrics
    from opentelemetry import trace as otel_trace
except ImportError:  # the optional extra is not installed: every call is a no-op
    otel_metrics = None  # type: ignore[assignment]
    otel_trace = None  # type: ignore[assignment]

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

logger = logging.getLogger("occupy.telemetry")

#: Whether the OpenTelemetry API is installed (else every function returns at once).
ENABLED = otel_metrics is not None

#: Outcomes of an acquire, the values of ``occupy.outcome``.
GRANTED, TIMED_OUT, OCCUPIED, FAILED = "granted", "timed_out", "occupied", "store_error"
#: Why a held lease ended, the values of ``occupy.lease.end`` / ``occupy.reason``.
RELEASED, EXPIRED, TAKEN_OVER, STORE_FAILURE = "released", "expired", "taken_over", "store_failure"
#: The family of a key without a ``:`` (it has no family part; the key itself may be
#: anything, so it never becomes an attribute).
OTHER = "other"
#: A lost lease this process did not take (an HTTP client's, rebuilt from its token).
UNKNOWN = "unknown"

#: Wait and hold times span milliseconds to minutes: the SDK's default buckets (0 to
#: 10,000, made for milliseconds) would put every wait in the first two.
SECONDS_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
)


class _Instruments:
    """The instruments, made once from the global meter (a proxy until an SDK is set)."""

    def __init__(self) -> None:
        assert otel_metrics is not None
        version = _version()
        meter = (
            otel_metrics.get_meter("occupy")
            if version is None
            else otel_metrics.get_meter("occupy", version)
        )
        seconds: dict[str, Any] = {
            "unit": "s",
            "explicit_bucket_boundaries_advisory": list(SECONDS_BUCKETS),
        }
        self.wait = meter.create_histogram(
            "occupy.lock.wait.duration",
            description="Time an acquire waited for its key, "
            "by outcome (granted, timed_out, occupied, store_error).",
            **seconds,
        )
        self.hold = meter.create_histogram(
            "occupy.lease.hold.duration",
            description="Time a lease was held, from its grant to its release, expiry or loss.",
            **seconds,
        )
        # Observed when a reader collects, not counted on every grant and release: the
        # lock path only keeps the tallies it keeps anyway.
        meter.create_observable_up_down_counter(
            "occupy.lease.held",
            [_observe_held],
            unit="{lease}",
            description="Leases held by this process.",
        )
        meter.create_observable_up_down_counter(
            "occupy.lock.waiting",
            [_observe_waiting],
            unit="{waiter}",
            description="Acquires of this process waiting for their key.",
        )
        self.lost = meter.create_counter(
            "occupy.lease.lost",
            unit="{lease}",
            description="Leases lost while held, by reason (expired, taken_over, store_failure).",
        )
        self.takeovers = meter.create_counter(
            "occupy.lease.takeovers",
            unit="{lease}",
            description="Takeovers granted by this process.",
        )
        self.fenced_out = meter.create_counter(
            "occupy.write.fenced_out",
            unit="{write}",
            description="Writes refused because the writer's fence was stale.",
        )
        self.conflicts = meter.create_counter(
            "occupy.write.version_conflicts",
            unit="{write}",
            description="Versioned writes refused because the row had changed.",
        )
        self.store_errors = meter.create_counter(
            "occupy.store.errors",
            unit="{error}",
            description="Calls that found the lock store unavailable.",
        )
        self.http = meter.create_counter(
            "occupy.http.responses",
            unit="{response}",
            description="Responses of the "
            "DRF layer with an occupy status (304, 409, 412, 423, 428, 503).",
        )


def _version() -> str | None:
    try:
        return importlib.metadata.version("django-occupy")
    except importlib.metadata.PackageNotFoundError:  # a checkout on sys.path
        return None


_instruments: _Instruments | None = None
_instruments_lock = threading.Lock()


def _get() -> _Instruments:
    global _instruments
    if _instruments is None:
        with _instruments_lock:
            if _instruments is None:
                _instruments = _Instruments()
    return _instruments


_failed_once = False


_active = False
_checked_at = -1.0
#: How often occupy looks again for an SDK while none is set (seconds): the API's own
#: look reads the environment, too slow to repeat on every acquire.
RECHECK = 1.0


def active() -> bool:
    """Return whether an OpenTelemetry SDK (or another implementation of the API) is
    configured. Until one is, occupy records nothing: the API's own providers (its proxy
    and no-op ones) would drop every call, and skipping them keeps an uninstrumented
    acquire as fast as without the API. An SDK set at start-up is seen at once; one set
    later, within :data:`RECHECK` seconds. Once set it cannot be unset (OpenTelemetry
    sets the global providers once), so the answer is then kept."""
    global _active, _checked_at
    if _active:
        return True
    if otel_metrics is None or otel_trace is None:
        return False
    now = time.monotonic()
    if now - _checked_at < RECHECK:
        return False
    _checked_at = now
    _active = not (
        _api_own(otel_metrics.get_meter_provider()) and _api_own(otel_trace.get_tracer_provider())
    )
    return _active


def _api_own(provider: object) -> bool:
    return type(provider).__module__.startswith(("opentelemetry.metrics", "opentelemetry.trace"))


def _safely(record: Callable[[], None]) -> None:
    """Run ``record``; telemetry never raises into the lock path."""
    global _failed_once
    try:
        record()
    except Exception:
        if not _failed_once:
            _failed_once = True
            logger.exception("recording occupy telemetry failed; carrying on without it")


# --- attributes -------------------------------------------------------------------------

_family_hook: tuple[Any, Callable[[str], str]] | None = None


def _default_family(key: str) -> str:
    family, colon, _rest = key.partition(":")
    return family if colon else OTHER


def family(key: str) -> str:
    """Return the key's family, the only part of a key that reaches an attribute."""
    global _family_hook
    if _family_hook is None:
        path = occupy_settings.TELEMETRY["KEY_FAMILY"]
        _family_hook = (path, _default_family if path is None else import_string(path))
    return str(_family_hook[1](key))


def _forget_settings() -> None:
    global _family_hook
    _family_hook = None
    _attribute_sets.clear()


occupy_settings.on_reload(_forget_settings)


def store_kind(backend: BaseBackend) -> str:
    """Return the kind of store ``backend`` keeps its locks in (``database``, ``redis``…)."""
    kind = getattr(backend, "store_kind", None)
    if isinstance(kind, str):
        return kind
    name = type(backend).__name__
    return (name[: -len("Backend")] if name.endswith("Backend") else name).lower()


#: The common attributes by (alias, family): made once, shared (never changed in place).
_attribute_sets: dict[tuple[str, str], dict[str, str]] = {}


def _attributes(backend: BaseBackend, key: str) -> dict[str, str]:
    """Return the common attributes of ``key`` on ``backend`` (a shared dict: copy it
    to add to it)."""
    name = family(key)
    found = _attribute_sets.get((backend.alias, name))
    if found is None:
        found = _attribute_sets[(backend.alias, name)] = {
            "occupy.backend": backend.alias,
            "occupy.store": store_kind(backend),
            "occupy.key.family": name,
        }
    return found


# --- what the lock API reports ----------------------------------------------------------


class _Held:
    """A lease this process holds: since when (monotonic), at how many levels, and the
    store-clock expiry it had at its grant (to tell an expiry from a takeover)."""

    __slots__ = ("attributes", "granted_at", "levels", "since")

    def __init__(self, lease: Lease, attributes: dict[str, str]) -> None:
        self.since = time.monotonic()
        self.granted_at = lease.expires_at.timestamp() - lease.ttl  # the store's clock
        self.levels = 1
        self.attributes = attributes


#: By (alias, key, token): in-process only, never exported.
_held: dict[tuple[str, str, str], _Held] = {}
_held_lock = threading.Lock()
#: Acquires waiting now, by their (shared) attributes' identity.
_waiting: dict[int, tuple[dict[str, str], int]] = {}


def _tally(
    tallies: dict[int, tuple[dict[str, str], int]], attributes: dict[str, str], change: int
) -> None:
    with _held_lock:
        _attributes, count = tallies.get(id(attributes), (attributes, 0))
        tallies[id(attributes)] = (attributes, count + change)


def _observe_held(options: Any) -> Iterator[Any]:
    assert otel_metrics is not None
    # Every attribute set seen, at 0 unless held: a series that ends reads 0, not gone.
    counts = {id(attributes): (attributes, 0) for attributes in list(_attribute_sets.values())}
    with _held_lock:
        for entry in _held.values():
            attributes, count = counts.get(id(entry.attributes), (entry.attributes, 0))
            counts[id(entry.attributes)] = (attributes, count + 1)
    for attributes, count in counts.values():
        yield otel_metrics.Observation(count, attributes)


def _observe_waiting(options: Any) -> Iterator[Any]:
    assert otel_metrics is not None
    with _held_lock:
        tallies = list(_waiting.values())
    for attributes, count in tallies:
        yield otel_metrics.Observation(count, attributes)


@contextmanager
def acquiring(backend: BaseBackend, key: str, timeout: float | None) -> Iterator[None]:
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


def granted(backend: BaseBackend, lease: Lease, *, deeper: bool, held_here: bool) -> None:
    """Note a grant: a new lease this process holds, or one level deeper of one."""
    if not held_here or not active():
        return
    ident = (lease.using, lease.key, lease.token)
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


def taken_over(backend: BaseBackend, lease: Lease) -> None:
    """Note that this process took ``lease`` over from another holder."""
    if active():
        _safely(lambda: _get().takeovers.add(1, _attributes(backend, lease.key)))


def _end(lease: Lease, how: str, *, every_level: bool) -> bool:
    """End one level (or all) of a lease held here; return whether it was held here."""
    ident = (lease.using, lease.key, lease.token)
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
        entry = _held.get((lease.using, lease.key, lease.token))
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


def store_error(backend: BaseBackend, key: str | None) -> None:
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


def span(name: str, backend: BaseBackend | None, key: str) -> Any:
    """Return a context manager around a span named ``name`` with the key's attributes
    (made current, so a slow request shows where it waited); a no-op without the API."""
    if not active():
        return nullcontext()
    assert otel_trace is not None
    attributes: dict[str, str] = (
        {"occupy.key.family": family(key)} if backend is None else _attributes(backend, key)
    )
    return _tracer().start_as_current_span(name, attributes=attributes)


_tracer_found: Any = None


def _tracer() -> Any:
    """Return occupy's tracer, made once (the API's tracer follows the global provider)."""
    global _tracer_found
    if _tracer_found is None:
        assert otel_trace is not None
        version = _version()
        _tracer_found = (
            otel_trace.get_tracer("occupy")
            if version is None
            else otel_trace.get_tracer("occupy", version)
        )
    return _tracer_found


signals.lease_lost.connect(_on_lease_lost, dispatch_uid="occupy.telemetry.lost")
signals.lease_taken_over.connect(_on_taken_over, dispatch_uid="occupy.telemetry.takeover")
