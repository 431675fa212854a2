"""The Redis keys of one lock key (:func:`redis_keys`), whose layout and contents
:mod:`.scripts` describes: one hash tag, so one Redis Cluster slot."""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from occupy.backends.claims import digest

__all__ = ["RedisKeys", "redis_keys"]


class RedisKeys(NamedTuple):
    """The Redis keys of one lock key; one hash tag, so one Redis Cluster slot."""

    lock: str
    fence: str
    queue: str
    waiters: str
    wake: str


@lru_cache(maxsize=4096)
def redis_keys(prefix: str, key: str, digest_chars: int = 32) -> RedisKeys:
    """Return the Redis keys of lock ``key``.

    The hash tag is the first ``digest_chars`` hex digits of the key's SHA-256 digest,
    so that a key holding ``{`` or ``}`` (or any other text) still puts all its Redis
    keys in one slot. The scripts find the other keys from ``lock``'s name, whatever
    the prefix and the tag's length.
    """
    base = f"{prefix}{{{digest(key)[:digest_chars]}}}:"
    return RedisKeys(
        f"{base}lock", f"{base}fence", f"{base}queue", f"{base}waiters", f"{base}wake:"
    )
