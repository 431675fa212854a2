"""A backend whose contract a protocol object carries out: the Redis lock protocol runs
under both :class:`~occupy.backends.redis.RedisBackend` and, on a Redis cache,
:class:`~occupy.backends.cache.CacheBackend`; the backend keeps the configuration."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from occupy.backends.base import Attempt, BaseBackend, Claim
from occupy.leases import Holder, Lease

__all__ = ["DelegatingBackend", "LockProtocol"]


class LockProtocol(Protocol):
    """The contract block of :class:`~occupy.backends.base.BaseBackend`, on one store."""

    def attempt(self, key: str, owner: str, ttl: float) -> Attempt: ...
    def release(self, lease: Lease) -> None: ...
    def extend(self, lease: Lease, ttl: float) -> None: ...
    def resume(self, key: str, token: str, ttl: float, *, deeper: bool = True) -> Lease | None: ...
    def takeover(
        self, key: str, owner: str, ttl: float, *, if_fence: int | None = None
    ) -> tuple[Lease, Holder | None]: ...
    def holder(self, key: str) -> Holder | None: ...
    def is_held(self, lease: Lease) -> bool: ...
    def claims(self) -> Iterable[Claim]: ...
    def drop_claim(self, key: str) -> None: ...
    def close(self) -> None: ...


class DelegatingBackend(BaseBackend):
    """Hand every call of the contract to :attr:`protocol`."""

    @property
    def protocol(self) -> LockProtocol:
        """Return what carries out the contract (built by the subclass)."""
        raise NotImplementedError("subclasses of DelegatingBackend must provide a protocol")

    def attempt(self, key: str, owner: str, ttl: float) -> Attempt:
        """Return the protocol's attempt to take ``key``."""
        return self.protocol.attempt(key, owner, ttl)

    def release(self, lease: Lease) -> None:
        """Undo one level of the lease; raise ``LeaseLost`` if it was no longer held."""
        self.protocol.release(lease)

    def extend(self, lease: Lease, ttl: float) -> None:
        """Move the lease's expiry to ``ttl`` seconds after the store's now."""
        self.protocol.extend(lease, ttl)

    def resume(self, key: str, token: str, ttl: float, *, deeper: bool = True) -> Lease | None:
        """Return the lease ``token`` holds on ``key`` (a level deeper if ``deeper``,
        kept at least ``ttl`` more), or ``None``."""
        return self.protocol.resume(key, token, ttl, deeper=deeper)

    def takeover(
        self, key: str, owner: str, ttl: float, *, if_fence: int | None = None
    ) -> tuple[Lease, Holder | None]:
        """Grant ``key`` to ``owner`` now with a higher fence, whoever holds it (only the
        grant with fence ``if_fence``, if given); return the lease and the holder
        replaced."""
        return self.protocol.takeover(key, owner, ttl, if_fence=if_fence)

    def holder(self, key: str) -> Holder | None:
        """Return who holds ``key`` (owner, expiry, fence; never the token), or ``None``."""
        return self.protocol.holder(key)

    def is_held(self, lease: Lease) -> bool:
        """Return whether the lease's token still holds its key."""
        return self.protocol.is_held(lease)

    def claims(self) -> Iterable[Claim]:
        """Return the live claims, by key."""
        return self.protocol.claims()

    def drop_claim(self, key: str) -> None:
        """Delete the granted claim on ``key`` behind its holder's back (a test hook)."""
        self.protocol.drop_claim(key)
