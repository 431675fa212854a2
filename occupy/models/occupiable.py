"""``OccupiableMixin``: lock a model instance by its key, see who holds it; and the
queryset methods that ask which rows are held: ``occupied()``, ``free()`` and the task
pool's ``claim()``.

Every method here that consults locks takes ``backend=``, the occupy backend alias
(default: the model's ``occupy_backend``, else ``"default"``). ``using`` keeps Django's
meaning, the database: ``Task.objects.using("other").claim(…)`` reads and hands out the
rows of the database ``"other"``.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, ClassVar

from django.core import checks
from django.db import models

from occupy.api import DEFAULT, holder, lock
from occupy.leases import Holder
from occupy.models.keys import lock_model, object_key
from occupy.models.managers import check_objects_manager
from occupy.models.pool import Pool, occupation_filter, occupation_rows

__all__ = ["OccupiableManager", "OccupiableMixin", "OccupiableQuerySet",
           "OccupiableQuerySetMixin"]

if TYPE_CHECKING:
    from typing_extensions import Self

    _QuerySet = models.QuerySet[Any]
else:
    _QuerySet = object


def _backend_of(model: type[models.Model], backend: str | None) -> str:
    if backend is not None:
        return backend
    return str(getattr(model, "occupy_backend", "default"))


class OccupiableQuerySetMixin(_QuerySet):
    """Add ``occupied()``, ``free()`` and ``claim()`` to a ``QuerySet`` subclass: which
    rows' lock keys ``"<app_label>.<model_name>:<pk>"`` are held, and the task pool.

    They read the claims of a ``DatabaseBackend`` (its ``Occupation`` rows); other
    backends are refused with :class:`~occupy.InvalidBackendError`.
    """

    def occupied(self, *, backend: str | None = None) -> Self:
        """Return the rows whose lock key is held now on the occupy backend ``backend``
        (expired claims count as free)."""
        return self.filter(occupation_filter(self, _backend_of(self.model, backend)))

    def free(self, *, backend: str | None = None) -> Self:
        """Return the rows whose lock key nobody holds now (the complement of
        :meth:`occupied`)."""
        return self.exclude(occupation_filter(self, _backend_of(self.model, backend)))

    def claim(
        self, *, owner: str | None = None, ttl: float = DEFAULT,
        order_by: tuple[str, ...] | list[str] | None = None, backend: str | None = None,
    ) -> Any:
        """Hand the next free row to ``owner`` and return it, its lease at ``.lease``
        (release it with ``occupy.release(item.lease)``); ``None`` when nothing is free.

        While ``owner`` still holds a row of this queryset, return that row and the
        same lease again: one row per owner at a time. That hand-back is an assignment,
        not exclusion: whoever passes the same ``owner`` is handed the same row and
        lease (the owner names whom the task is assigned to), unlike ``acquire``,
        where an owner string never re-enters a lease. A row whose holder's lease
        expired is free again. Rows are offered in ``order_by`` (else the queryset's
        ordering, else by primary key); on PostgreSQL and MariaDB/MySQL, concurrent
        claimers skip the rows others are claiming (``SKIP LOCKED``) instead of
        queueing behind them. Needs the database backend.
        """
        alias = _backend_of(self.model, backend)
        rows = occupation_rows(alias, "claim()")
        pool = Pool(self, alias, rows, owner=owner, ttl=ttl, order_by=order_by)
        if owner is None:
            # The default owner names this thread (or asyncio task), which runs one
            # claim at a time: there is nothing to serialize, and the owner's lock
            # would cost two statements of the five a claim sends.
            return pool.held() or pool.take_next()
        # Claims of one owner run one at a time (they may come from several requests
        # at once), so that two of them cannot each take a different row.
        with lock(_claim_key(self.model, pool.owner), ttl=30, timeout=30, using=alias):
            return pool.held() or pool.take_next()


class OccupiableQuerySet(OccupiableQuerySetMixin, models.QuerySet[Any]):
    """A ``QuerySet`` with :class:`OccupiableQuerySetMixin`."""


_OccupiableManagerBase = models.Manager.from_queryset(OccupiableQuerySet)


class OccupiableManager(_OccupiableManagerBase[Any]):
    """The default manager of :class:`OccupiableMixin` models: ``occupied()``,
    ``free()``, ``claim()``."""


class OccupiableMixin(models.Model):
    """Lock rows of a model by their key ``"<app_label>.<model_name>:<pk>"``.

    Adds to a model:

    - ``occupy(owner=…, ttl=…, timeout=…, renew=…, backend=…)``: an
      :class:`occupy.lock` on the row's key (a context manager and a decorator);
    - ``holder``: who holds the row's key now (owner, expiry, fence), or ``None``;
    - ``occupy_key``: the key itself;
    - ``objects``: an :class:`OccupiableManager` (``occupied()``, ``free()``,
      ``claim()``; see :mod:`occupy.models.querysets` to combine it with other
      managers).

    ``occupy_backend`` names the occupy backend these use by default. Proxies and
    multi-table children lock on their concrete root model's key, since they are the
    same row. Integer, UUID and string primary keys all work.
    """

    #: The occupy backend alias used when a call does not pass ``backend=``.
    occupy_backend: ClassVar[str] = "default"

    objects = OccupiableManager()
    if TYPE_CHECKING:
        # Any manager: a model combining occupy's mixins declares its own (see
        # occupy.models.querysets), whatever each mixin installs.
        _default_manager: ClassVar[models.Manager[Any]]

    class Meta:
        abstract = True

    @classmethod
    def check(cls, **kwargs: Any) -> list[checks.CheckMessage]:
        """Add ``occupy.E201``: ``objects``, inherited from another occupy mixin, has
        no ``occupied()``, ``free()`` or ``claim()``."""
        return [*super().check(**kwargs),
                *check_objects_manager(cls, OccupiableMixin, OccupiableQuerySetMixin,
                                       "occupied(), free() or claim()")]

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
    ) -> lock:
        """Return an :class:`occupy.lock` on this row (``with book.occupy(ttl=30) as
        lease: …``); takes the arguments of :func:`occupy.acquire`, with the backend
        alias as ``backend`` (default :attr:`occupy_backend`)."""
        return lock(self.occupy_key, owner=owner, ttl=ttl, timeout=timeout, renew=renew,
                    using=backend or self.occupy_backend)

    @property
    def holder(self) -> Holder | None:
        """Return who holds this row's key on the ``occupy_backend`` backend, or ``None``
        (never the token)."""
        return holder(self.occupy_key, using=self.occupy_backend)

    def holder_on(self, backend: str) -> Holder | None:
        """Return who holds this row's key on the occupy backend ``backend``, or ``None``."""
        return holder(self.occupy_key, using=backend)


def _claim_key(model: type[models.Model], owner: str) -> str:
    key = f"occupy.claim:{lock_model(model)._meta.label_lower}:{owner}"
    if len(key) > 255:  # owners may be long: their digest keeps the key short
        key = f"{key[:180]}#{hashlib.sha256(owner.encode()).hexdigest()}"
    return key
