"""``OccupiableMixin``: lock a model instance by its key and see who holds it. The
queryset methods that ask which rows are held (``occupied()``, ``free()`` and the task
pool's ``claim()``) are in :mod:`occupy.models.querysets`.

Every method here that consults locks takes ``backend=``, the occupy backend alias
(default: the model's ``occupy_backend``, else ``"default"``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.core import checks
from django.db import models

from occupy.api import DEFAULT, holder, lock
from occupy.checks import unconfigured_alias
from occupy.leases import Holder, Lease
from occupy.models.keys import object_key
from occupy.models.managers import check_objects_manager
from occupy.models.querysets import OccupiableQuerySetMixin, OccupyManager

__all__ = ["OccupiableMixin"]


class OccupiableMixin(models.Model):
    """Lock rows of a model by their key ``"<app_label>.<model_name>:<pk>"``.

    Adds to a model:

    - ``occupy(owner=…, ttl=…, timeout=…, renew=…, backend=…)``: an
      :class:`occupy.lock` on the row's key (a context manager and a decorator);
    - ``get_holder()``: who holds the row's key now (owner, expiry, fence), or ``None``;
    - ``occupy_key``: the key itself;
    - ``objects``: the :class:`~occupy.models.OccupyManager`, which every occupy model
      mixin installs (``occupied()``, ``free()``, ``claim()``, ``locked()``, and
      ``update_versioned()`` with ``VersionedMixin``), so the mixins combine with no
      manager declared; see :mod:`occupy.models.querysets` for querysets of your own.

    ``occupy_backend`` names the occupy backend these use by default. Proxies and
    multi-table children lock on their concrete root model's key, since they are the
    same row. Integer, UUID and string primary keys all work.
    """

    #: The occupy backend alias used when a call does not pass ``backend=``.
    occupy_backend: ClassVar[str] = "default"

    objects = OccupyManager()

    class Meta:
        abstract = True

    @classmethod
    def check(cls, **kwargs: Any) -> list[checks.CheckMessage]:
        """Add ``occupy.E201``: the model's own ``objects`` has no ``occupied()``,
        ``free()`` or ``claim()``; ``occupy.E203``: its ``occupy_backend`` is not a
        configured alias."""
        return [
            *super().check(**kwargs),
            *check_objects_manager(
                cls, OccupiableMixin, OccupiableQuerySetMixin, "occupied(), free() or claim()"
            ),
            *unconfigured_alias(cls, "occupy_backend", cls.occupy_backend, check_id="occupy.E203"),
        ]

    @property
    def occupy_key(self) -> str:
        """Return this row's lock key; ``ValueError`` if it is not saved yet."""
        return object_key(type(self), self.pk)

    def occupy(
        self,
        *,
        owner: str | None = None,
        ttl: float = DEFAULT,
        timeout: float | None = DEFAULT,
        renew: bool = False,
        backend: str | None = None,
    ) -> lock[Lease]:
        """Return an :class:`occupy.lock` on this row (``with book.occupy(ttl=30) as
        lease: …``); takes the arguments of :func:`occupy.acquire`, with the backend
        alias as ``backend`` (default :attr:`occupy_backend`)."""
        return lock(
            self.occupy_key,
            owner=owner,
            ttl=ttl,
            timeout=timeout,
            renew=renew,
            backend=backend or self.occupy_backend,
        )

    def get_holder(self, *, backend: str | None = None) -> Holder | None:
        """Return who holds this row's key now (owner, expiry, fence), or ``None``;
        never the token. A store round trip on every call. ``backend``: the occupy
        backend alias (default :attr:`occupy_backend`)."""
        return holder(self.occupy_key, backend=backend or self.occupy_backend)
