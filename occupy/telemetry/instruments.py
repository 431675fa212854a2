"""occupy's OpenTelemetry instruments, made once from the global meter, and the in-process
tallies its observable instruments read when a reader collects. :mod:`occupy.telemetry`
records through them; see docs/howto/telemetry.md.

Invariants:

- Two instruments are synchronous, the wait and hold histograms; every count (outcomes,
  losses, takeovers, refused writes, store errors, HTTP answers) is a plain in-process
  tally, read by an observable counter's callback at collection time. So the lock path
  itself makes at most one SDK call when nothing waited: the hold at release.
- A tally only grows, and counts each event once, under :data:`_tally_lock`.
"""

from __future__ import annotations

import importlib.metadata
import logging
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from occupy.telemetry.attributes import AttributeSet, Backend, key_sets

if TYPE_CHECKING:
    from occupy.leases import Lease

try:
    from opentelemetry import metrics as otel_metrics
    from opentelemetry import trace as otel_trace
except ImportError:  # the optional extra is not installed: every call is a no-op
    otel_metrics = None  # type: ignore[assignment]
    otel_trace = None  # type: ignore[assignment]

__all__ = [
    "COUNTERS",
    "ENABLED",
    "Backend",
    "Held",
    "active",
    "count",
    "instruments",
    "otel_metrics",
    "otel_trace",
    "report_failure",
    "version",
]

logger = logging.getLogger("occupy.telemetry")

#: Whether the OpenTelemetry API is installed (else every function returns at once).
ENABLED = otel_metrics is not None

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

#: The counters, observed from tallies: name -> (unit, description).
COUNTERS = {
    "occupy.lock.acquires": (
        "{acquire}",
        "Acquires by outcome (granted_at_once, granted_after_wait, occupied, timed_out, "
        "store_error).",
    ),
    "occupy.lease.lost": (
        "{lease}",
        "Leases lost while held, by reason (expired, taken_over, store_failure, unknown).",
    ),
    "occupy.lease.takeovers": ("{lease}", "Takeovers granted by this process."),
    "occupy.write.fenced_out": (
        "{write}",
        "Writes refused because the writer's fence was stale.",
    ),
    "occupy.write.version_conflicts": (
        "{write}",
        "Versioned writes refused because the row had changed.",
    ),
    "occupy.store.errors": ("{error}", "Calls that found the lock store unavailable."),
    "occupy.http.responses": (
        "{response}",
        "Responses of the DRF layer with an occupy status (304, 409, 412, 423, 428, 503).",
    ),
}


class _Instruments:
    """The instruments, made once from the global meter (a proxy until an SDK is set)."""

    def __init__(self) -> None:
        assert otel_metrics is not None
        found = version()
        meter = (
            otel_metrics.get_meter("occupy")
            if found is None
            else otel_metrics.get_meter("occupy", found)
        )
        seconds: dict[str, Any] = {
            "unit": "s",
            "explicit_bucket_boundaries_advisory": list(SECONDS_BUCKETS),
        }
        self.wait = meter.create_histogram(
            "occupy.lock.wait.duration",
            description="Time an acquire that waited (its first try found the key held) "
            "spent, by outcome (granted, timed_out, store_error).",
            **seconds,
        )
        self.hold = meter.create_histogram(
            "occupy.lease.hold.duration",
            description="Time a lease was held, from its grant to its release, expiry or loss.",
            **seconds,
        )
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
        for name, (unit, description) in COUNTERS.items():
            meter.create_observable_counter(
                name, [_observer(name)], unit=unit, description=description
            )


def version() -> str | None:
    """Return occupy's installed version (``None`` for a checkout on ``sys.path``)."""
    try:
        return importlib.metadata.version("django-occupy")
    except importlib.metadata.PackageNotFoundError:
        return None


_instruments: _Instruments | None = None
_instruments_lock = threading.Lock()


def instruments() -> _Instruments:
    """Return the instruments, made on first use."""
    global _instruments
    if _instruments is None:
        with _instruments_lock:
            if _instruments is None:
                _instruments = _Instruments()
    return _instruments


_failed_once = False


def report_failure() -> None:
    """Log the exception being handled, the first time telemetry fails: it never raises
    into the lock path."""
    global _failed_once
    if not _failed_once:
        _failed_once = True
        logger.exception("recording occupy telemetry failed; carrying on without it")


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


# --- tallies ----------------------------------------------------------------------------

#: Counter name -> {attribute set's ident: [its attributes, count]}.
_tallies: dict[str, dict[Any, list[Any]]] = {name: {} for name in COUNTERS}
#: Acquires waiting now, the same way.
_waiting: dict[Any, list[Any]] = {}
_tally_lock = threading.Lock()


def count(name: str, attributes: AttributeSet, change: int = 1) -> None:
    """Add ``change`` to counter ``name``'s tally under ``attributes``."""
    _add(_tallies[name], name, attributes, change)


def waiting(attributes: AttributeSet, change: int) -> None:
    """Note that an acquire under ``attributes`` began (1) or stopped (-1) waiting."""
    _add(_waiting, WAITING, attributes, change)


#: The name under which :func:`waiting`'s tallies are kept in an attribute set's cells.
WAITING = "occupy.lock.waiting"


def _add(table: dict[Any, list[Any]], name: str, attributes: AttributeSet, change: int) -> None:
    # The set keeps its cell, so a count after the first neither hashes its ident nor
    # looks the table up. A cell is the table's, found by the ident: a set rebuilt with
    # the same content gets the same cell.
    cell = attributes.cells.get(name)
    if cell is None:
        with _tally_lock:
            cell = table.setdefault(attributes.ident, [attributes.attributes, 0])
        attributes.cells[name] = cell
        instruments()  # the instruments exist from the first tally on, so it is observed
    with _tally_lock:
        cell[1] += change


def _observations(table: dict[Any, list[Any]]) -> Iterator[Any]:
    assert otel_metrics is not None
    with _tally_lock:
        found = [(attributes, value) for attributes, value in table.values()]
    for attributes, value in found:
        yield otel_metrics.Observation(value, attributes)


def _observer(name: str) -> Any:
    table = _tallies[name]

    def observe(options: Any) -> Iterator[Any]:
        return _observations(table)

    return observe


def _observe_waiting(options: Any) -> Iterator[Any]:
    return _observations(_waiting)


# --- leases held here -------------------------------------------------------------------


class Held:
    """A lease this process holds: when its acquire began and when it was granted
    (``time.perf_counter_ns()``), at how many levels, its expiry and ttl at its grant
    (by the store's clock, to tell an expiry from a takeover), its section's span when
    every section is traced, and the type of the exception its ``occupy.lock`` block
    raised, if any."""

    __slots__ = ("attributes", "error", "expires_at", "levels", "since", "span", "started", "ttl")

    def __init__(self, lease: Lease, attributes: AttributeSet, started: int) -> None:
        self.since = time.perf_counter_ns()
        self.started = started
        self.expires_at, self.ttl = lease.expires_at, lease.ttl
        self.levels = 1
        self.attributes = attributes
        self.span: Any = None
        self.error: type[BaseException] | None = None


#: By (alias, key, token): in-process only, never exported.
held: dict[tuple[str, str, str], Held] = {}
held_lock = threading.Lock()


def _observe_held(options: Any) -> Iterator[Any]:
    assert otel_metrics is not None
    # Every attribute set seen, at 0 unless held: a series that ends reads 0, not gone.
    counts: dict[Any, tuple[AttributeSet, int]] = {s.ident: (s, 0) for s in key_sets()}
    with held_lock:
        for entry in held.values():
            found, number = counts.get(entry.attributes.ident, (entry.attributes, 0))
            counts[found.ident] = (found, number + 1)
    for found, number in counts.values():
        yield otel_metrics.Observation(number, found.attributes)
