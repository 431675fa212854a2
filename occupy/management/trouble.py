"""How ``list_locks`` and ``sweep_locks`` report a backend whose store failed: one
sentence with the store and the fix, never a traceback."""

from __future__ import annotations

from occupy.backends.base import BaseBackend, store_reason
from occupy.exceptions import OccupyError, StoreNotMigrated, StoreUnavailable

__all__ = ["trouble"]


def trouble(backend: BaseBackend, error: OccupyError) -> str:
    """Return the line that reports ``error``, raised by ``backend``'s store.

    A store that could not be reached names the store, the driver's first line and what
    to check; an error that says its own fix (a missing migration, a cache that cannot
    hold these locks) is kept as it is, after the alias.
    """
    if isinstance(error, StoreUnavailable) and not isinstance(error, StoreNotMigrated):
        return (
            f"{backend.alias}: could not use {backend.describe_store()} "
            f"({store_reason(error)}): "
            f"{backend.store_fix()}."
        )
    return f"{backend.alias}: {error}"
