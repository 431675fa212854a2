"""OpenTelemetry metrics and spans for waits, holds, contention, losses and refused writes.

occupy calls the OpenTelemetry *API* only (``pip install "django-occupy[telemetry]"``):
it configures no SDK, reader or exporter. Without the ``opentelemetry-api`` package every
function here returns at once; with the API but no SDK, too (see :func:`active`). What is
recorded when, and what it costs: ``docs/howto/telemetry.md``.

Invariants:

- Nothing happened, nothing is recorded beyond the hold: an acquire granted at first
  try and its release make one synchronous SDK call (the hold histogram, at release)
  and no span; counts are in-process tallies observed at collection
  (:mod:`occupy.telemetry.instruments`). The wait histogram takes only acquires that
  waited (their first try found the key held). A span is made, after the fact and
  back-dated to the acquire's start, for an acquire that waited past
  ``WAIT_SPAN_THRESHOLD``, timed out, was refused or failed, and for a section that
  ended in a lost lease or a fenced-out write; with ``TRACE_EVERY_SECTION``, one span
  per section (acquire to release) besides.
- Attributes are low-cardinality (:mod:`occupy.telemetry.attributes`): a full key, an
  owner or a token never reaches an attribute, a status or an event.
- Hold time and the held count cover the leases this process holds itself (taken with
  ``reentrant=True``, the default); a lease handed to an HTTP client with its token is
  held by that client, so only its acquire is recorded. A lease counts once however many
  levels were re-entered, from its grant to its last release, expiry or loss.
- Telemetry never raises into the lock path: a failure is logged once.
"""

from __future__ import annotations

from occupy import signals
from occupy.exceptions import ConflictError, FencedOut, VersionConflict
from occupy.telemetry import spans
from occupy.telemetry.acquires import Watch, acquiring, taking_over, write_lock
from occupy.telemetry.attributes import (
    OTHER,
    Backend,
    attribute_set,
    family,
    key_attributes,
    store_kind,
)
from occupy.telemetry.holds import (
    enter_section,
    granted,
    leave_section,
    on_lease_lost,
    on_taken_over,
    release_failed,
    released,
    section_raised,
    taken_over,
)
from occupy.telemetry.instruments import ENABLED, active, count, report_failure

__all__ = [
    "ENABLED",
    "HTTP_STATUSES",
    "OTHER",
    "Watch",
    "acquiring",
    "active",
    "enter_section",
    "family",
    "granted",
    "http_response",
    "leave_section",
    "refused",
    "release_failed",
    "released",
    "section_raised",
    "store_error",
    "store_kind",
    "taken_over",
    "taking_over",
    "write_lock",
]


# --- what the model side and the HTTP layer report --------------------------------------


def refused(error: ConflictError) -> None:
    """Count a guarded write refused with ``error``: a stale fence (``FencedOut``) or a
    changed row (``VersionConflict``), by model label; a fenced-out write is also an
    event on the current span."""
    if not active():
        return
    model = getattr(error, "model", None)
    attributes = attribute_set(("occupy.model", "" if model is None else model._meta.label_lower))
    try:
        if isinstance(error, FencedOut):
            count("occupy.write.fenced_out", attributes)
            values = {**attributes.attributes, spans.ERROR_TYPE: spans.error_type(type(error))}
            spans.add_event("occupy.fenced_out", values)
        elif isinstance(error, VersionConflict):
            count("occupy.write.version_conflicts", attributes)
    except Exception:
        report_failure()


def store_error(backend: Backend, key: str | None) -> None:
    """Count a call that found the lock store unavailable."""
    if not active():
        return
    try:
        if key is None:
            attributes = attribute_set(("occupy.backend", backend.alias))
        else:
            attributes = key_attributes(backend, key)
        count("occupy.store.errors", attributes)
    except Exception:
        report_failure()


#: The statuses of the HTTP contract that ``occupy.http.responses`` counts.
HTTP_STATUSES = frozenset({304, 409, 412, 423, 428, 503})


def http_response(status: int, code: str | None) -> None:
    """Count a DRF response with an occupy status (``code``: the body's, if any)."""
    if active():
        pairs: tuple[tuple[str, str | int], ...] = (("http.response.status_code", status),)
        if code is not None:
            pairs += (("occupy.code", code),)
        try:
            count("occupy.http.responses", attribute_set(*pairs))
        except Exception:
            report_failure()


signals.lease_lost.connect(on_lease_lost, dispatch_uid="occupy.telemetry.lost")
signals.lease_taken_over.connect(on_taken_over, dispatch_uid="occupy.telemetry.takeover")
