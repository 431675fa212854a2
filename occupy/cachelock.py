"""``CacheLock``: a lock on a Django cache, named by its cache alias, with no ``OCCUPY``
settings.

    from occupy import CacheLock

    with CacheLock("config:7", cache="default", ttl=60, timeout=0):
        ...

    @CacheLock("config:{config_id}")
    def edit_config(config_id, user): ...

It is the cache lock many projects write by hand (``cache.add(key, uuid, expires)`` to
take it, ``get`` then ``delete`` to give it back), on occupy's ``CacheBackend``: release
compares the token in one step on Redis caches, so a holder whose lock expired cannot
delete the next holder's; waiting has a real deadline; the lease has an owner, a fence
and re-entry. The backend is built by :func:`~occupy.backends.get_backend` as
``OCCUPY["BACKENDS"]`` would build it, once per cache alias, under the alias
``"CacheLock:<cache>"``, and refuses the same caches with the same checks: a
``DummyCache`` always, a ``LocMemCache`` unless ``single_process=True``.
"""

from __future__ import annotations

from occupy.api import DEFAULT, lock
from occupy.backends import get_backend
from occupy.backends.base import BaseBackend
from occupy.exceptions import InvalidBackendError, LockTimeout, Occupied
from occupy.leases import Lease
from occupy.validation import check_timeout, check_ttl

__all__ = ["CacheLock", "cache_backend"]

#: The backend class every ``CacheLock`` runs on, by the dotted path settings would use.
CACHE_BACKEND = "occupy.backends.cache.CacheBackend"


def cache_backend(cache: str, *, single_process: bool = False) -> BaseBackend:
    """Return the cache backend of ``CacheLock`` on cache alias ``cache``, built on first
    use and kept; raise :class:`~occupy.InvalidBackendError` for a cache it refuses.

    It is configured as ``{"BACKEND": "occupy.backends.cache.CacheBackend", "OPTIONS":
    {"CACHE": cache, "SINGLE_PROCESS": single_process}}`` would be, under the alias
    ``"CacheLock:<cache>"`` of :func:`~occupy.backends.get_backend`, and the same system
    checks run on it: their errors are raised, their warnings logged once.
    """
    params = {
        "BACKEND": CACHE_BACKEND,
        "OPTIONS": {"CACHE": cache, "SINGLE_PROCESS": single_process},
    }
    try:
        return get_backend(_alias(cache), config=params)
    except InvalidBackendError as e:
        raise InvalidBackendError(
            f"{e} (CacheLock's arguments are these OPTIONS: cache= is CACHE, "
            "single_process= is SINGLE_PROCESS.)"
        ) from e


def _alias(cache: str) -> str:
    return f"CacheLock:{cache}"


class CacheLock(lock[Lease]):
    """Hold ``key`` on the Django cache ``cache`` (an alias of ``settings.CACHES``) for a
    ``with`` / ``async with`` block, or for every call of a decorated function, whose
    arguments format the key: ``@CacheLock("config:{config_id}")``.

    ``ttl``: seconds the lock lives unless released first (a crashed holder's lock
    expires by itself). ``timeout``: seconds to wait for another holder (``0``, the
    default: do not wait; ``None``: forever); then raise :class:`~occupy.LockTimeout`,
    whose ``holder`` says who holds the key and ``retry_after`` when it expires at the
    latest. ``owner``, ``renew`` and ``reentrant`` are those of :func:`occupy.lock`.
    ``single_process=True`` allows a ``LocMemCache`` (its locks live in one process's
    memory, so the deployment must be one process).

    No ``OCCUPY`` setting is needed: the backend is built for the cache alias (see
    :func:`cache_backend`), so the lease's ``alias`` is ``"CacheLock:<cache>"``, which
    ``occupy.holder`` and the other functions reach once a ``CacheLock`` has built it.
    """

    def __init__(
        self,
        key: str,
        cache: str = "default",
        ttl: float = 60,
        timeout: float | None = 0,
        *,
        owner: str | None = None,
        renew: bool = False,
        reentrant: bool = True,
        single_process: bool = False,
    ) -> None:
        if not isinstance(cache, str) or not cache:
            raise TypeError(f"cache must be a cache alias (a non-empty str), not {cache!r}.")
        if ttl is DEFAULT or timeout is DEFAULT:
            raise TypeError(
                "CacheLock has no OCCUPY settings to take DEFAULT from: "
                "give ttl and timeout in seconds."
            )
        super().__init__(
            key,
            owner=owner,
            ttl=check_ttl(ttl),
            timeout=check_timeout(timeout),
            renew=renew,
            reentrant=reentrant,
            backend=_alias(cache),
        )
        self.cache = cache
        self.single_process = bool(single_process)

    def _take(self) -> Lease:
        """Take the key on the cache; raise ``LockTimeout`` (also for ``timeout=0``)."""
        cache_backend(self.cache, single_process=self.single_process)
        try:
            return super()._take()
        except LockTimeout:
            raise
        except Occupied as e:
            raise _timed_out(e) from e

    async def _atake(self) -> Lease:
        """Async twin of :meth:`_take`."""
        cache_backend(self.cache, single_process=self.single_process)
        try:
            return await super()._atake()
        except LockTimeout:
            raise
        except Occupied as e:
            raise _timed_out(e) from e

    def __repr__(self) -> str:
        return f"<CacheLock {self.key!r} cache={self.cache!r}>"


def _timed_out(error: Occupied) -> LockTimeout:
    """Return ``error`` as a ``LockTimeout``: a ``CacheLock`` that did not wait timed out
    after 0 s, and callers of hand-written cache locks catch ``LockTimeout``."""
    assert error.key is not None  # an Occupied always names its key
    return LockTimeout(
        str(error), key=error.key, holder=error.holder, retry_after=error.retry_after
    )
