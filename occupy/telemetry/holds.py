"""What a lease held by this process records: the hold histogram at its last release,
expiry or loss, the lost and takeover counts, and its section's span (every section when
``TRACE_EVERY_SECTION`` is set, else only one that ended lost or fenced out, made then and
back-dated to its acquire's start).

Invariant: a lease is tracked from its grant to its last level's end, by (alias, key,
token), only when taken with ``reentrant=True``: one handed to an HTTP client is that
client's, and only its acquire is recorded.
"""

from __future__ import annotations

from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

from occupy.exceptions import LeaseLost
from occupy.telemetry import spans
from occupy.telemetry.acquires import Acquire, Watch
from occupy.telemetry.attributes import Backend, key_attributes
from occupy.telemetry.instruments import (
    Held,
    active,
    count,
    held,
    held_lock,
    instruments,
    report_failure,
)
from occupy.telemetry.spans import span_settings

if TYPE_CHECKING:
    from occupy.leases import Holder, Lease

__all__ = [
    "EXPIRED",
    "RELEASED",
    "STORE_FAILURE",
    "TAKEN_OVER",
    "UNKNOWN",
    "enter_section",
    "granted",
    "leave_section",
    "on_lease_lost",
    "on_taken_over",
    "release_failed",
    "released",
    "section_raised",
    "taken_over",
]

#: Why a held lease ended: the values of ``occupy.reason``, and of ``occupy.lease.end``
#: but for ``RELEASED``, which the hold record says by leaving that attribute out.
RELEASED, EXPIRED, TAKEN_OVER, STORE_FAILURE = "released", "expired", "taken_over", "store_failure"
#: A lost lease this process did not take (an HTTP client's, rebuilt from its token).
UNKNOWN = "unknown"
LEASE_END, REASON = "occupy.lease.end", "occupy.reason"


def granted(
    backend: Backend,
    lease: Lease,
    *,
    deeper: bool,
    held_here: bool,
    watch: Watch = None,
) -> None:
    """Note a grant: a new lease this process holds, or one level deeper of one;
    ``watch`` is what :func:`acquiring` returned for it, if it was acquired."""
    if not held_here or not active():
        return
    ident = (lease.alias, lease.key, lease.token)
    try:
        acquired = watch if isinstance(watch, Acquire) else None
        if deeper:
            with held_lock:  # against a release of the same lease in another thread
                entry = held.get(ident)
                if entry is not None:
                    entry.levels += 1
                    return
        if acquired is None:
            entry = Held(lease, key_attributes(backend, lease.key), perf_counter_ns())
        else:
            entry = Held(lease, acquired.key_attributes(), acquired.started)
        # A new grant's token is new: no other thread knows its ident yet, and
        # setdefault is one atomic step, so the common case takes no lock.
        if held.setdefault(ident, entry) is not entry:
            return
        if acquired is None:  # a watched acquire's tally has made them already
            instruments()  # the instruments exist from the first lease on, so it is observed
        if span_settings()[1]:
            waited = None
            if acquired is not None and acquired.waited_at is not None:
                waited = (entry.since - entry.started) / 1e9
            entry.span = spans.start_section(entry.attributes, entry.started, waited)
    except Exception:
        report_failure()


# --- releases and losses ----------------------------------------------------------------


def released(lease: Lease) -> None:
    """Note a successful release of one level of ``lease``."""
    if active():
        _end(lease, RELEASED, every_level=False)


def release_failed(lease: Lease, error: BaseException) -> None:
    """Note a release that raised ``error``: the lease is no longer held here."""
    if active():
        _end(lease, STORE_FAILURE, every_level=True, error=type(error))


def _end(
    lease: Lease, how: str, *, every_level: bool, error: type[BaseException] | None = None
) -> bool:
    """End one level (or all) of a lease held here; return whether it was held here."""
    ident = (lease.alias, lease.key, lease.token)
    with held_lock:
        entry = held.get(ident)
        if entry is None:
            return False
        entry.levels -= 1
        if entry.levels > 0 and not every_level:
            return True
        del held[ident]
    ended = perf_counter_ns()
    try:
        attributes = entry.attributes
        # A release, the common end, is said by the attribute's absence (as OpenTelemetry's
        # error.type is absent on success): one attribute fewer for the SDK to hash.
        ended_as = attributes if how == RELEASED else attributes.plus(LEASE_END, how)
        instruments().hold.record((ended - entry.since) / 1e9, ended_as.attributes)
        if how != RELEASED:
            count("occupy.lease.lost", attributes.plus(REASON, how))
            if error is None:
                error = LeaseLost
        # The block's own exception says more (a FencedOut write) than the loss it caused.
        failure = None if how == RELEASED else (entry.error or error)
        if entry.span is not None:
            spans.end_section(entry.span, attributes, failure, None if how == RELEASED else how)
        elif failure is not None:
            spans.finished(
                spans.SECTION, attributes.plus(REASON, how), entry.started, ended, failure
            )
    except Exception:
        report_failure()
    return True


def _lost_reason(lease: Lease, cause: str | None) -> str:
    """Tell why ``lease`` was lost: the cause its finder gave, else by time. Its expiry
    (store clock) minus the time held (local monotonic clock) still ahead of the grant's
    store time means it should still be live: something replaced it (a takeover, a force
    release). Only differences of each clock are compared, never one clock with another."""
    if cause is not None:
        return cause
    with held_lock:
        entry = held.get((lease.alias, lease.key, lease.token))
    if entry is None:  # not held here: when it was granted is not known
        return UNKNOWN
    held_for = (perf_counter_ns() - entry.since) / 1e9
    granted_at = entry.expires_at.timestamp() - entry.ttl  # the store's clock
    left = lease.expires_at.timestamp() - (granted_at + held_for)
    return TAKEN_OVER if left > 0.05 else EXPIRED


def on_lease_lost(
    sender: Any, lease: Lease, reason: str, cause: str | None = None, **kwargs: Any
) -> None:
    """Receive ``lease_lost``: end the lease's section as lost, or count the loss of a
    lease not held here."""
    if not active():
        return
    how = _lost_reason(lease, cause)
    if not _end(lease, how, every_level=True) and lease.backend is not None:
        # Not held here (a lease handed to an HTTP client): its loss still counts.
        try:
            count("occupy.lease.lost", key_attributes(lease.backend, lease.key).plus(REASON, how))
        except Exception:
            report_failure()


def taken_over(backend: Backend, lease: Lease) -> None:
    """Note that this process took ``lease`` over from another holder."""
    if active():
        try:
            count("occupy.lease.takeovers", key_attributes(backend, lease.key))
        except Exception:
            report_failure()


def on_taken_over(sender: Any, lease: Lease, previous: Holder | None, **kwargs: Any) -> None:
    """Receive ``lease_taken_over``: count the takeover."""
    backend = lease.backend
    if backend is not None:
        taken_over(backend, lease)


# --- sections of occupy.lock ------------------------------------------------------------


def enter_section(lease: Lease) -> Any:
    """Make the span of ``lease``'s section current, when every section is traced and
    this process holds it; return what :func:`leave_section` takes (``None``: nothing
    was made current)."""
    if not active() or not span_settings()[1]:
        return None
    try:
        with held_lock:
            entry = held.get((lease.alias, lease.key, lease.token))
        return None if entry is None or entry.span is None else spans.attach(entry.span)
    except Exception:
        report_failure()
        return None


def leave_section(token: Any) -> None:
    """Undo :func:`enter_section` (in the context that entered it)."""
    if token is not None:
        try:
            spans.detach(token)
        except Exception:
            report_failure()


def section_raised(lease: Lease, error: type[BaseException]) -> None:
    """Note that the ``occupy.lock`` block holding ``lease`` raised ``error`` (before its
    release): a section that then ends lost is recorded with the block's error type."""
    if not active():
        return
    with held_lock:
        entry = held.get((lease.alias, lease.key, lease.token))
        if entry is not None:
            entry.error = error
