"""``OccupiableMixin``: lock a model instance by its key, see who holds it."""

from __future__ import annotations

from typing import ClassVar

from django.db import models

from occupy.api import DEFAULT, holder, lock
from occupy.leases import Holder
from occupy.models.keys import object_key
from occupy.models.querysets import OccupyManager

__all__ = ["OccupiableMixin"]


class OccupiableMixin(models.Model):
    """Lock rows of a model by their key ``"<app_label>.<model_name>:<pk>"``.

    Adds to a model:

    - ``occupy(owner=…, ttl=…, timeout=…, renew=…, using=…)``: an
      :class:`occupy.lock` on the row's key (a context manager and a decorator);
    - ``holder``: who holds the row's key now (owner, expiry, fence), or ``None``;
    - ``occupy_key``: the key itself;
    - ``objects``: an :class:`~occupy.models.OccupyManager` (``occupied()``,
      ``free()``, ``claim()``, ``locked()``).

    ``occupy_using`` names the occupy backend these use by default. Proxies and
    multi-table children lock on their concrete root model's key, since they are the
    same row. Integer, UUID and string primary keys all work.
    """

    #: The occupy backend alias used when a call does not pass ``using=``.
    occupy_using: ClassVar[str] = "default"

    objects = OccupyManager()

    class Meta:
        abstract = True

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
        using: str | None = None,
    ) -> lock:
        """Return an :class:`occupy.lock` on this row (``with book.occupy(ttl=30) as
        lease: …``); takes the arguments of :func:`occupy.acquire`."""
        return lock(self.occupy_key, owner=owner, ttl=ttl, timeout=timeout, renew=renew,
                    using=using or self.occupy_using)

    @property
    def holder(self) -> Holder | None:
        """Return who holds this row's key on the ``occupy_using`` backend, or ``None``
        (never the token)."""
        return holder(self.occupy_key, using=self.occupy_using)

    def holder_on(self, using: str) -> Holder | None:
        """Return who holds this row's key on the backend ``using``, or ``None``."""
        return holder(self.occupy_key, using=using)


