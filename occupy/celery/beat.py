"""A Celery beat scheduler that ticks on one instance at a time.

Run any number of ``celery beat -S occupy.celery.beat:OccupyScheduler`` (or
``occupy.celery.beat:OccupyDatabaseScheduler`` with django-celery-beat): every instance
keeps its schedule in step, but only the one holding occupy's lease on the beat key
sends due tasks. The invariants:

- **One sender.** Before each send the instance checks with the store that it still
  holds the lease (a renewed one, ``renew=True``); an instance that does not hold it
  tries to take it (``timeout=0``) and, failing, only advances its schedule.
- **Takeover within the ttl.** A dead instance stops renewing; its lease ends within
  ``occupy_beat_ttl`` seconds and the next instance with a task due takes it. Ticks due
  in between are not sent: none is lost for longer than the ttl.
- Only the sender saves schedule state (``sync``), so followers never write over it.

Configuration (Celery settings, read by :mod:`occupy.taskcore.beat`):
``occupy_beat_key`` (default ``"celery-beat:<app name>"``), ``occupy_beat_ttl``
(default 30 s), ``occupy_beat_backend`` (default ``"default"``). A value beat cannot use
stops it at start (``ValueError`` or ``TypeError``, or ``InvalidBackendError`` for an
alias ``OCCUPY["BACKENDS"]`` does not configure) rather than at its first due task or,
for the alias, never: beat would log at every due task that it cannot take its lease,
and send nothing. ``manage.py check`` reports the same values (``occupy.E407``). The
owner of the lease is ``celery-beat:<host>:<pid>`` (:mod:`occupy.owners`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from typing import Any

from celery.beat import PersistentScheduler

from occupy import api
from occupy.backends import get_backend
from occupy.exceptions import LeaseLost, Occupied, OccupyError
from occupy.leases import Lease
from occupy.owners import beat_owner
from occupy.taskcore.beat import beat_settings

# OccupyDatabaseScheduler is made on first use, by the module __getattr__ below.
__all__ = ["OccupyScheduler", "OccupySchedulerMixin"]

logger = logging.getLogger("occupy.celery.beat")


class OccupySchedulerMixin:
    """Mix into a Celery ``Scheduler`` subclass (before it) to let only the holder of
    the beat lease send due tasks (see the module docstring)."""

    occupy_lease: Lease | None = None
    app: Any  # the scheduler's Celery app

    def setup_schedule(self) -> None:
        """Check the beat lease's settings (see the module docstring), then set the
        schedule up."""
        get_backend(beat_settings(self.app).backend)
        super().setup_schedule()  # type: ignore[misc]

    def is_leader(self) -> bool:
        """Return whether this instance holds the beat lease, taking it if it is free.

        A lease held already is checked with the store (one round trip), so an instance
        whose lease ended (a pause, a store outage, a takeover) stops sending.
        """
        lease = self.occupy_lease
        if lease is not None:
            try:
                lease.ensure_held()
                return True
            except LeaseLost:
                logger.warning("beat lost its lease on %r: no longer sending", lease.key)
                self._drop_lease()
            except OccupyError as e:  # the store did not answer: do not send blind
                logger.warning("beat could not check its lease on %r: %s", lease.key, e)
                return False
        settings = beat_settings(self.app)
        key = settings.key
        try:
            self.occupy_lease = api.acquire(
                key,
                owner=beat_owner(socket.gethostname(), os.getpid()),
                ttl=settings.ttl,
                timeout=0,
                renew=True,
                reentrant=False,
                backend=settings.backend,
            )
        except Occupied:
            return False
        except OccupyError as e:
            logger.warning("beat could not take its lease on %r: %s", key, e)
            return False
        logger.info("beat took the lease on %r (fence %s): sending", key, self.occupy_lease.fence)
        return True

    def _drop_lease(self) -> None:
        lease, self.occupy_lease = self.occupy_lease, None
        if lease is not None and not lease.released:
            # Lost already, or the store is away: then it ends by its ttl.
            with contextlib.suppress(OccupyError):
                api.release(lease)

    def apply_entry(self, entry: Any, producer: Any = None) -> None:
        """Send ``entry`` if this instance is the one that ticks; else only skip it
        (its next run time was advanced already, as every instance does)."""
        if self.is_leader():
            super().apply_entry(entry, producer=producer)  # type: ignore[misc]
        else:
            logger.debug("beat is not the sender: %s not sent here", entry.name)

    def sync(self) -> None:
        """Save schedule state only on the instance that sends."""
        if self.occupy_lease is not None and not self.occupy_lease.lost:
            super().sync()  # type: ignore[misc]

    def close(self) -> None:
        """Release the lease, so that another instance takes over at once."""
        try:
            super().close()  # type: ignore[misc]
        finally:
            self._drop_lease()


class OccupyScheduler(OccupySchedulerMixin, PersistentScheduler):  # type: ignore[misc]
    """Celery's default scheduler (a local schedule file), ticking on one instance."""


def __getattr__(name: str) -> Any:
    # django-celery-beat is optional: its scheduler class is built on first use.
    if name == "OccupyDatabaseScheduler":
        from django_celery_beat.schedulers import DatabaseScheduler

        cls = type(
            "OccupyDatabaseScheduler",
            (OccupySchedulerMixin, DatabaseScheduler),
            {
                "__module__": __name__,
                "__doc__": "django-celery-beat's DatabaseScheduler, ticking on one instance.",
            },
        )
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
