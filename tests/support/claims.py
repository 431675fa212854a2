"""The contract suite's hook for "an operator or a bug removed the claim": delete the
granted claim on a key behind its holder's back, on each of occupy's backends.

It is no part of the contract: a backend outside occupy that the suite runs on
(``OCCUPY_TEST_BACKEND``) gives it as its own ``drop_claim(key)`` method, as
:class:`occupy.testing.MemoryBackend` does; without one, the tests that need it skip.
"""

from __future__ import annotations

from functools import singledispatch

import pytest

from occupy.backends.base import BaseBackend
from occupy.backends.cache.add import AddCacheBackend
from occupy.backends.cache.store import names
from occupy.backends.claims import digest
from occupy.backends.db import DatabaseBackend
from occupy.backends.db.dialects import TABLE
from occupy.backends.file import FileBackend

__all__ = ["drop_claim"]


@singledispatch
def drop_claim(backend: BaseBackend, key: str) -> None:
    """Delete the granted claim on ``key`` in ``backend``'s store, whoever holds it."""
    own = getattr(backend, "drop_claim", None)
    if own is None:
        pytest.skip(f"{type(backend).__name__} has no drop_claim(key) test hook")
    own(key)


@drop_claim.register
def _(backend: DatabaseBackend, key: str) -> None:
    backend.store.execute(f"DELETE FROM {TABLE} WHERE slot = %s", [digest(key)], key=key)


@drop_claim.register
def _(backend: FileBackend, key: str) -> None:
    backend.directory.remove(digest(key))


@drop_claim.register
def _(backend: AddCacheBackend, key: str) -> None:
    backend.store.cache.delete(names(key).entry)


try:
    from occupy.backends.redis.protocol import RedisLockBackend
except ImportError:  # redis is not installed: no backend runs the Redis protocol
    pass
else:

    @drop_claim.register
    def _(backend: RedisLockBackend, key: str) -> None:
        backend.client.delete(backend.keys(key).lock)
