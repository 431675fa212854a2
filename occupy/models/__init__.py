"""occupy's models, and the model-side tools users mix into their own models.

- :class:`VersionedMixin`: optimistic concurrency with a ``version`` column;
- :class:`FencedMixin`: ``save(lease=…)`` refused for a lease older than the row's;
- :class:`OccupiableMixin`: ``book.occupy()``, ``book.get_holder()``;
- :class:`OccupyManager`: the ``objects`` each of them installs, whatever their
  combination: ``locked()`` (a row lock for a block), ``update_versioned()``,
  ``occupied()``, ``free()`` and ``claim()``;
- :class:`RowLockManager`: ``locked()`` alone, for any model.

Whatever locks an object (``occupy()``, ``claim()``, occupy's admin and DRF views)
uses the store :func:`model_backend` names: the model's ``occupy_backend``.

Each manager is a queryset mixin plus thin concrete classes, to mix into your own
querysets: see :mod:`occupy.models.querysets`.
"""

from occupy.models.fenced import FencedMixin
from occupy.models.guarded import GuardedSaveMixin
from occupy.models.keys import object_key
from occupy.models.occupation import Occupation
from occupy.models.occupiable import OccupiableMixin
from occupy.models.querysets import (
    OccupiableManager,
    OccupiableQuerySet,
    OccupiableQuerySetMixin,
    OccupyManager,
    OccupyQuerySet,
    OccupyQuerySetMixin,
    RowLockManager,
    RowLockQuerySet,
    RowLockQuerySetMixin,
    VersionedManager,
    VersionedQuerySet,
    VersionedQuerySetMixin,
)
from occupy.models.stores import model_backend
from occupy.models.versioned import VersionedMixin

__all__ = [
    "FencedMixin",
    "GuardedSaveMixin",
    "Occupation",
    "OccupiableManager",
    "OccupiableMixin",
    "OccupiableQuerySet",
    "OccupiableQuerySetMixin",
    "OccupyManager",
    "OccupyQuerySet",
    "OccupyQuerySetMixin",
    "RowLockManager",
    "RowLockQuerySet",
    "RowLockQuerySetMixin",
    "VersionedManager",
    "VersionedMixin",
    "VersionedQuerySet",
    "VersionedQuerySetMixin",
    "model_backend",
    "object_key",
]
