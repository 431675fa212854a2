"""``FencedMixin``: writes that a lease lost during a pause cannot make.

A lock holder can be paused (garbage collection, a swapped-out VM, ``SIGSTOP``) past
its lease's expiry; meanwhile another process takes the lock and writes. When the
first one resumes it still believes it holds the lock. Every grant of a key carries a
strictly larger ``fence``; a row that stores the fence of its last write and accepts
only ``WHERE fence <= <writer's fence>`` refuses the resumed writer
(:class:`~occupy.FencedOut`), so the newer holder's data stands.

    with book.occupy(ttl=30) as lease:
        book.body = render(book)          # may pause for longer than 30 s
        book.save(lease=lease)            # FencedOut if a newer holder wrote
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import models
from django.utils.translation import gettext_lazy as _

from occupy.exceptions import FencedOut
from occupy.leases import Lease
from occupy.models.guarded import Check, Guard, GuardedSaveMixin
from occupy.models.keys import object_key
from occupy.models.querysets import OccupyManager
from occupy.models.tracking import concrete_field

__all__ = ["FencedMixin"]


def _lease(value: Any) -> Lease:
    if not isinstance(value, Lease):
        raise TypeError(f"lease must be an occupy Lease, not {type(value).__name__}.")
    return value


class FencedMixin(GuardedSaveMixin):
    """Refuse writes from a lease older than the row's last write.

    Adds to a model:

    - ``fence``: the fence of the lease of the last write made with one (0 before);
    - ``save(lease=lease)``: writes the changed fields and ``fence = lease.fence``
      only ``WHERE fence <= lease.fence``, else raises :class:`~occupy.FencedOut`
      and writes nothing. Fences of different keys do not compare, so an existing
      row takes only leases on its own key (:meth:`fence_key`, the key
      ``book.occupy()`` locks): a lease on another key raises ``ValueError`` and
      writes nothing. A new row has had no write to fence: its insert stores the
      fence of whichever lease it is given (one on a collection's key, say).

    A ``save()`` without ``lease`` is not fenced (and leaves ``fence`` alone) unless
    ``fence_required = True``, which refuses it with ``ValueError``.
    """

    fence = models.BigIntegerField(_("fence"), default=0, editable=False)

    #: Refuse ``save()`` of an existing row without ``lease=``.
    fence_required: ClassVar[bool] = False

    objects = OccupyManager()

    class Meta:
        abstract = True

    def fence_key(self) -> str:
        """Return the lock key whose leases may write this row: the row's own,
        ``"<app_label>.<model_name>:<pk>"`` (see :func:`~occupy.models.object_key`)."""
        return object_key(type(self), self.pk)

    def managed_field_names(self) -> set[str]:
        """Add ``fence``, which only the guard writes."""
        return super().managed_field_names() | {"fence"}

    def use_lease(self, lease: Lease) -> None:
        """Fence the next ``save()`` by ``lease`` as ``save(lease=lease)`` would: for code
        that saves through something that calls ``save()`` itself (a DRF serializer,
        a form)."""
        self.__dict__["_occupy_lease"] = _lease(lease)

    def clean_save_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """Take ``lease=`` (or the lease of :meth:`use_lease`), the lease under which
        the row was changed."""
        lease = options.pop("lease", None) or self.__dict__.pop("_occupy_lease", None)
        cleaned = super().clean_save_options(options)
        cleaned["lease"] = None if lease is None else _lease(lease)
        return cleaned

    def prepare_insert(self, options: dict[str, Any]) -> None:
        """Store the fence of ``lease=`` on a new row."""
        if options["lease"] is not None:
            self.fence = options["lease"].fence
        super().prepare_insert(options)

    def save_guards(
        self, fields: list[models.Field[Any, Any]], options: dict[str, Any]
    ) -> list[Guard]:
        """Add ``fence <= lease.fence`` to every guard, and set the lease's fence;
        refuse a lease on another key than :meth:`fence_key` with ``ValueError``."""
        lease = options["lease"]
        guards = super().save_guards(fields, options)
        if lease is None:
            if self.fence_required:
                raise ValueError(
                    f"{self._meta.object_name} requires save(lease=…) (fence_required): "
                    "pass the lease under which it was changed."
                )
            return guards
        expected = self.fence_key()
        if lease.key != expected:
            raise ValueError(
                f"save(lease=…) of {self._meta.object_name} {self.pk!r} needs a lease on "
                f"{expected!r}, not on {lease.key!r}: fences of different keys do not "
                "compare."
            )
        fence = lease.fence
        field = concrete_field(self._meta, "fence")
        check = Check(field, "lte", fence, FencedOut)
        # The fence check goes first, so that a refusal names it before a version.
        return [
            Guard(checks=[check, *g.checks], sets={**g.sets, field: fence}, read_back=g.read_back)
            for g in guards
        ]
