"""occupy's models, and the model-side tools users mix into their own models.

- :class:`VersionedMixin`: optimistic concurrency with a ``version`` column;
  its manager :class:`VersionedManager` adds ``update_versioned()``;
- :class:`FencedMixin`: ``save(lease=…)`` refused for a lease older than the row's;
- :class:`OccupiableMixin`: ``book.occupy()``, ``book.holder``; its manager
  :class:`OccupiableManager` adds ``occupied()``, ``free()`` and ``claim()``;
- :class:`RowLockManager`: ``locked()``, a row lock for a block (any model);
- :class:`OccupyManager`: all of these queryset methods, for a model that combines
  the mixins.

Each manager is a queryset mixin plus thin concrete classes, to mix into your own
querysets: see :mod:`occupy.models.querysets`.
"""

from occupy.models.fenced import FencedMixin
from occupy.models.guarded import GuardedSaveMixin
from occupy.models.keys import object_key
from occupy.models.occupation import Occupation
from occupy.models.occupiable import (
    OccupiableManager,
    OccupiableMixin,
    OccupiableQuerySet,
    OccupiableQuerySetMixin,
)
from occupy.models.querysets import OccupyManager, OccupyQuerySet, OccupyQuerySetMixin
from occupy.models.rowlocks import RowLockManager, RowLockQuerySet, RowLockQuerySetMixin
from occupy.models.versioned import (
    VersionedManager,
    VersionedMixin,
    VersionedQuerySet,
    VersionedQuerySetMixin,
)

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
    "object_key",
]
