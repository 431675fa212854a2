"""What the Redis lock protocol keeps for one raw redis-py client: :class:`RedisLink`.

The link is the client, its scripts (registered once), the bounded calls of an
acquire, the key layout and the async waiters' threads. It carries out nothing of
the contract: :class:`~occupy.backends.redis.protocol.RedisLockBackend` does, on it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Any

from occupy.backends.redis.calls import BoundedCalls, Scripts
from occupy.backends.redis.held import CANCEL, EXTEND, RELEASE, RESUME, TAKEOVER
from occupy.backends.redis.keys import RedisKeys, redis_keys
from occupy.backends.redis.replication import Replication
from occupy.backends.redis.scripts import ACQUIRE, QUEUE
from occupy.backends.redis.values import to_ms

__all__ = ["FENCE_TTL", "QUEUE_TTL", "RedisLink", "scripts_for"]

#: How long a key's fence counter lives from its first grant, in seconds (after that
#: the server's clock alone floors the next fence).
FENCE_TTL = 86400.0
#: How long a waiter's place in the queue outlives its last look, in seconds.
QUEUE_TTL = 3.0

#: Async waiters block in threads of their own pool, never in the event loop's default
#: executor (which a few long ``BLPOP`` calls would starve).
_ASYNC_WAIT_THREADS = 64


class RedisLink:
    """The Redis lock protocol's state on one raw redis-py ``client``.

    Every Redis key starts with ``prefix``; the hash tag after it is ``digest_chars``
    hex digits of the lock key's digest. A waiter blocks for at most ``poll_interval``
    before it looks again; its place lives ``queue_ttl`` after its last look (at least
    twice ``poll_interval``); a key's fence counter lives ``fence_ttl`` from its first
    grant.
    """

    def __init__(
        self,
        client: Any,
        *,
        prefix: str,
        poll_interval: float,
        queue_ttl: float = QUEUE_TTL,
        fence_ttl: float = FENCE_TTL,
        digest_chars: int = 32,
        replication: Replication | None = None,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.poll_interval = poll_interval
        self.digest_chars = digest_chars
        self.bounded = BoundedCalls.of(client)
        #: ``MIN_REPLICAS`` and ``REPLICAS`` (:mod:`.replication`).
        self.replication = replication or Replication()
        self.scripts = self.replication.wrap(
            client,
            Scripts.register(
                client,
                self.replication.texts(scripts_for(to_ms(fence_ttl), to_ms(queue_ttl))),
                self.bounded,
            ),
        )
        #: The longest ``BLPOP``: one longer than the socket timeout would end in a
        #: ``TimeoutError``.
        self.longest_block = poll_interval
        pool = getattr(client, "connection_pool", None)
        socket_timeout = getattr(pool, "connection_kwargs", {}).get("socket_timeout")
        if socket_timeout:
            self.longest_block = min(poll_interval, socket_timeout / 2)
        self._executor: ThreadPoolExecutor | None = None
        self._executor_pid = 0
        self._executor_lock = threading.Lock()

    def keys(self, key: str) -> RedisKeys:
        """Return the Redis keys that hold lock ``key``."""
        return redis_keys(self.prefix, key, self.digest_chars)

    def wait_executor(self) -> ThreadPoolExecutor:
        """Return this process's pool of threads for async waiters' blocking ``BLPOP``."""
        with self._executor_lock:
            if self._executor is None or self._executor_pid != os.getpid():
                self._executor = ThreadPoolExecutor(
                    _ASYNC_WAIT_THREADS, thread_name_prefix="occupy-redis-wait"
                )
                self._executor_pid = os.getpid()
            return self._executor

    def close(self) -> None:
        """Stop the async waiters' threads and close the bounded calls' connections; the
        client's own connection pool belongs to whoever made the client."""
        with self._executor_lock:
            if self._executor is not None and self._executor_pid == os.getpid():
                self._executor.shutdown(wait=False)
            self._executor = None
        if self.bounded is not None:
            self.bounded.close()


@lru_cache(maxsize=16)
def scripts_for(fence_ttl_ms: int, queue_ttl_ms: int) -> Mapping[str, str]:
    """Return the scripts by name, with a protocol's TTLs written in."""

    def fill(text: str) -> str:
        return text.replace("@FENCE_TTL@", str(int(fence_ttl_ms))).replace(
            "@QUEUE_TTL@", str(int(queue_ttl_ms))
        )

    return {
        "acquire": fill(ACQUIRE),
        "queue": fill(QUEUE),
        "release": fill(RELEASE),
        "extend": fill(EXTEND),
        "resume": fill(RESUME),
        "takeover": fill(TAKEOVER),
        "cancel": fill(CANCEL),
    }
