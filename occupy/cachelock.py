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
and re-entry. The backend is built as ``OCCUPY["BACKENDS"]`` would build it, once per
cache alias, and refuses the same caches with the same checks: a ``DummyCache`` always,
a ``LocMemCache`` unless ``single_process=True``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.core.checks import CheckMessage
from django.core.signals import setting_changed

from occupy.api import DEFAULT, atake, lock, take
from occupy.backends import load_backend_class
from occupy.backends.base import BaseBackend
from occupy.exceptions import InvalidBackendError, LockTimeout, Occupied
from occupy.leases import Lease, default_owner
from occupy.validation import check_key, check_timeout, check_ttl

__all__ = ["CacheLock", "cache_backend"]

logger = logging.getLogger("occupy.cachelock")

#: The backend class every ``CacheLock`` runs on, by the dotted path settings would use.
CACHE_BACKEND = "occupy.backends.cache.CacheBackend"

_backends: dict[tuple[str, bool], BaseBackend] = {}
_mutex = threading.Lock()


def cache_backend(cache: str, *, single_process: bool = False) -> BaseBackend:
    """Return the cache backend of ``CacheLock`` on cache alias ``cache``, built on first
    use and kept; raise :class:`~occupy.InvalidBackendError` for a cache it refuses.

    It is configured as ``{"BACKEND": "occupy.backends.cache.CacheBackend", "OPTIONS":
    {"CACHE": cache, "SINGLE_PROCESS": single_process}}`` would be, and the same system
    checks run on it: their errors are raised, their warnings logged once.
    """
    backend = _backends.get((cache, single_process))
    if backend is not None:
        return backend
    alias = f"CacheLock:{cache}"
    params = {
        "BACKEND": CACHE_BACKEND,
        "OPTIONS": {"CACHE": cache, "SINGLE_PROCESS": single_process},
    }
    cls = load_backend_class(CACHE_BACKEND, alias=alias)
    messages = cls.check(alias, params)
    errors = [m for m in messages if m.is_serious()]
    if errors:
        raise InvalidBackendError(
            " ".join(_sentence(m) for m in errors)
            + " (CacheLock's arguments are these OPTIONS: cache= is CACHE, "
            "single_process= is SINGLE_PROCESS.)"
        )
    with _mutex:
        backend = _backends.get((cache, single_process))
        if backend is None:
            for message in messages:
                logger.warning("%s", _sentence(message))
            backend = _backends[(cache, single_process)] = cls(alias, params)
    return backend


def _sentence(message: CheckMessage) -> str:
    hint = f" {message.hint}" if message.hint else ""
    return f"{message.msg}{hint} ({message.id})"


def reset_cache_backends(**kwargs: Any) -> None:
    """Forget the built backends and close them (``CACHES`` changed: they may point at
    caches that are gone)."""
    if kwargs.get("setting", "CACHES") != "CACHES":
        return
    with _mutex:
        old = list(_backends.values())
        _backends.clear()
    for backend in old:
        backend.close()


setting_changed.connect(reset_cache_backends, dispatch_uid="occupy.cachelock")


class CacheLock(lock):
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
    :func:`cache_backend`), so the lease's ``using`` is ``"CacheLock:<cache>"``, and
    ``occupy.holder`` and the other functions do not know that alias.
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
            using=f"CacheLock:{cache}",
        )
        self.cache = cache
        self.single_process = bool(single_process)

    def _backend(self) -> BaseBackend:
        return cache_backend(self.cache, single_process=self.single_process)

    def _arguments(self) -> dict[str, Any]:
        owner = self.kwargs["owner"]
        return {
            "owner": default_owner() if owner is None else owner,
            "ttl": self.kwargs["ttl"],
            "timeout": self.kwargs["timeout"],
            "renew": self.kwargs["renew"],
            "token": None,
            "reentrant": self.kwargs["reentrant"],
        }

    def _take(self) -> Lease:
        """Take the key on the cache; raise ``LockTimeout`` (also for ``timeout=0``)."""
        try:
            return take(self._backend(), check_key(self.key), **self._arguments())
        except LockTimeout:
            raise
        except Occupied as e:
            raise _timed_out(e) from e

    async def _atake(self) -> Lease:
        """Async twin of :meth:`_take`."""
        try:
            return await atake(self._backend(), check_key(self.key), **self._arguments())
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
