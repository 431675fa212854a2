"""occupy's OpenTelemetry instruments, made once from the global meter, and what they
read: whether an SDK is configured, the attributes of a key (never the key itself), the
leases held and the acquires waiting in this process. :mod:`occupy.telemetry` records
through them; see docs/howto/telemetry.md.
"""

from __future__ import annotations

import importlib.metadata
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from django.utils.module_loading import import_string

from occupy.conf import occupy_settings

if TYPE_CHECKING:
    from occupy.leases import Lease

try:
    from opentelemetry import metrics as otel_metrics
    from opentelemetry import trace as otel_trace
except ImportError:  # the optional extra is not installed: every call is a no-op
    otel_metrics = None  # type: ignore[assignment]
    otel_trace = None  # type: ignore[assignment]

__all__ = ["ENABLED", "Backend", "active", "family", "otel_metrics", "otel_trace", "store_kind"]

logger = logging.getLogger("occupy.telemetry")


class Backend(Protocol):
    """What telemetry reads of a backend (a :class:`~occupy.backends.base.BaseBackend`,
    which telemetry does not import: the backends report to it): its alias, and for
    :func:`store_kind`, its class and ``store_kind`` if it has one."""

    @property
    def alias(self) -> str:
        """The backend's alias in ``OCCUPY["BACKENDS"]``."""


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


def store_kind(backend: Backend) -> str:
    """Return the kind of store ``backend`` keeps its locks in (``database``, ``redis``…)."""
    kind = getattr(backend, "store_kind", None)
    if isinstance(kind, str):
        return kind
    name = type(backend).__name__
    return (name[: -len("Backend")] if name.endswith("Backend") else name).lower()


#: The common attributes by (alias, family): made once, shared (never changed in place).
_attribute_sets: dict[tuple[str, str], dict[str, str]] = {}


def _attributes(backend: Backend, key: str) -> dict[str, str]:
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
