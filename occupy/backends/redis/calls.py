"""How the Redis lock protocol's commands reach the server: each Lua script by
``EVALSHA`` (:class:`Script`), and an acquire's calls held to the time it has left
(:class:`BoundedCalls`)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any, NamedTuple

from redis.exceptions import NoScriptError, RedisError

__all__ = ["BoundedCalls", "Script", "Scripts"]


class BoundedCalls:
    """Connections of the protocol's own for the calls of an acquire, each bounded by
    the time it has left (redis-py's client has no per-call timeout: a server that
    stops answering blocks it up to the client's socket timeout, by default for ever).

    Connecting, the handshake and the reply are each held to the bound; a connection
    whose call failed is dropped. Built only on a plain connection pool (not Sentinel's,
    not Redis Cluster): elsewhere calls are not bounded. A command the server had
    received before it stalled still runs when it resumes: a grant made so, after the
    caller gave up, holds the key until its ttl.
    """

    def __init__(self, pool: Any) -> None:
        self.connection_class = pool.connection_class
        self.kwargs = dict(pool.connection_kwargs)
        self.idle: list[Any] = []
        self.lock = threading.Lock()
        self.pid = os.getpid()

    @classmethod
    def of(cls, client: Any) -> BoundedCalls | None:
        """Return bounded calls to the server of ``client``, or ``None`` if it has no
        plain connection pool."""
        from redis import BlockingConnectionPool, ConnectionPool

        pool = getattr(client, "connection_pool", None)
        return cls(pool) if type(pool) in (ConnectionPool, BlockingConnectionPool) else None

    def __call__(self, bound: float, *command: Any) -> Any:
        """Run ``command``; raise redis-py's ``TimeoutError`` if it takes over ``bound``."""
        with self.lock:
            if self.pid != os.getpid():  # a forked child: the parent's sockets are not ours
                self.idle, self.pid = [], os.getpid()
            conn = self.idle.pop() if self.idle else None
        if conn is None:
            conn = self.connection_class(**self.kwargs)
        end = time.monotonic() + bound
        done = False
        try:
            # Connecting takes a connect and a handshake: half the bound each at most.
            conn.socket_connect_timeout = conn.socket_timeout = bound / 2
            try:  # as redis-py's pool does: a connection the server closed is made again
                if conn.can_read():
                    conn.disconnect()
            except (RedisError, OSError):
                conn.disconnect()
            conn.connect()  # at once if connected
            conn.send_command(*command)
            reply = conn.read_response(timeout=max(end - time.monotonic(), 0.001))
            done = True
            return reply
        finally:
            if done:
                with self.lock:
                    self.idle.append(conn)
            else:
                conn.disconnect()

    def close(self) -> None:
        """Close the idle connections."""
        with self.lock:
            idle, self.idle = self.idle, []
        for conn in idle:
            conn.disconnect()


class Script:
    """A Lua script called with one key by ``EVALSHA``, through redis-py's script cache
    (``register_script``), loaded again if the server lost it (a restart, a failover).
    A call with a ``bound`` goes through :class:`BoundedCalls` where there are any."""

    __slots__ = ("bounded", "execute", "script", "sha", "text")

    def __init__(self, client: Any, text: str, bounded: BoundedCalls | None) -> None:
        self.text = text
        self.script = client.register_script(text)
        self.sha: str = self.script.sha
        self.execute = client.execute_command
        self.bounded = bounded

    def __call__(self, key: str, *args: Any, bound: float | None = None) -> Any:
        """Run the script on ``key`` with ``args``; within ``bound`` seconds if given."""
        if bound is not None and self.bounded is not None:
            try:
                return self.bounded(bound, "EVALSHA", self.sha, 1, key, *args)
            except NoScriptError:
                return self.bounded(bound, "EVAL", self.text, 1, key, *args)
        try:
            return self.execute("EVALSHA", self.sha, 1, key, *args)
        except NoScriptError:
            return self.script([key], args)


class Scripts(NamedTuple):
    """The protocol's scripts (:mod:`.scripts`), registered with one client."""

    acquire: Script
    queue: Script
    release: Script
    extend: Script
    resume: Script
    takeover: Script
    cancel: Script

    @classmethod
    def register(cls, client: Any, texts: dict[str, str], bounded: BoundedCalls | None) -> Scripts:
        """Return the scripts ``texts`` (by name) registered with ``client``."""
        return cls(**{name: Script(client, text, bounded) for name, text in texts.items()})
