"""Signals sent around a lease's life. Each is sent with ``sender`` = the backend class.

- ``lease_acquired(lease)``: a lock was granted (also on re-entry).
- ``lease_released(lease)``: a lease was released by its holder.
- ``lease_expired(key, count)``: expired claims were removed by a sweep.
- ``lease_lost(lease, reason, cause)``: a holder found its lease gone (expired, swept,
  taken over, or the renewal watchdog failed); ``reason`` says it in words, ``cause`` is
  ``"store_failure"`` when the store could not be reached, else ``None``.
- ``lease_taken_over(lease, previous)``: ``takeover()`` granted ``lease``, replacing
  ``previous`` (the :class:`~occupy.Holder` it replaced, or ``None`` if the key was free).
"""

from django.dispatch import Signal

__all__ = ["lease_acquired", "lease_expired", "lease_lost", "lease_released", "lease_taken_over"]

lease_acquired = Signal()
lease_released = Signal()
lease_expired = Signal()
lease_lost = Signal()
lease_taken_over = Signal()
