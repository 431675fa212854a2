"""What the Redis lock protocol does about replicas: the two opt-in guards against a
failover, ``MIN_REPLICAS`` and ``REPLICAS`` (declared, with their checks, in
:mod:`occupy.backends.replicas`).

Redis replicates asynchronously, so a failover has two ways to break a lock, and each
guard closes one of them (docs: ``howto/redis-deploy.md``):

- **A grant from a replaced primary.** When the sentinels promote a replica, the old
  primary does not know until Sentinel reconfigures it (seconds later; longer if it
  was paused or cut off). A process that keeps its connections to it meanwhile is
  granted keys the new primary also grants. ``MIN_REPLICAS = n`` makes every script
  look at the server's replication state first, inside the script (so in the same
  atomic step as its writes): it runs only on a primary with at least ``n`` replicas
  attached, online and heard from within :data:`MAX_LAG` seconds, else it refuses with an
  error (``StoreUnavailable``). A replaced primary has lost its replicas (they follow
  the new one), so it grants nothing. This is Redis's own ``min-replicas-to-write``,
  checked per call with a two-second lag bound instead of the ten-second default.
- **A grant lost in a failover.** A grant the primary made but had not yet sent to a
  replica is gone if that replica is promoted, and another caller can then take the key.
  ``REPLICAS = n`` sends ``WAIT n`` after each grant, extend, takeover and re-entry, on
  the same connection, bounded by the acquire's time left (at least
  :data:`~occupy.backends.base.STORE_GRACE`; :data:`ACK_TIMEOUT` for calls without a
  deadline); a grant that fewer than ``n`` replicas acknowledged is given back and the
  call fails with ``StoreUnavailable``. A server with fewer than ``n`` replicas online
  grants nothing (the script refuses at once: no ``WAIT`` could be satisfied), and a
  refusal is answered without a ``WAIT``: a call that wrote nothing does not wait. A
  key handed to a waiter by a release is confirmed the same way before the waiter has
  it. This narrows the window, it does not close it: Sentinel may promote a replica
  that had not acknowledged. Fences close it for storage that compares them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from redis.exceptions import NoScriptError, RedisError, ResponseError

__all__ = [
    "ACK_TIMEOUT",
    "MAX_LAG",
    "NotAcknowledged",
    "Replication",
    "guard_texts",
]

#: The longest ``WAIT`` of a call that has no deadline of its own (extend, takeover,
#: re-entry), in seconds.
ACK_TIMEOUT = 1.0
#: The longest silence of a replica that still counts as attached, in whole seconds
#: (Redis's ``lag``: replicas acknowledge every second, and the server counts whole
#: seconds of its clock, so a live replica reads 0, 1 or 2; a primary stopped for
#: longer than this, as a failover takes, reads more).
MAX_LAG = 2

#: Counts the server's replicas online (``occupy_online``) and those of them heard from
#: within :data:`MAX_LAG` (``occupy_live``), for the guards below. (A replica whose
#: acknowledgement came in after the server last read its clock shows ``lag=-1``: live
#: too.)
_COUNT = """
local occupy_info = redis.call('INFO', 'replication')
local occupy_live, occupy_online = 0, 0
for occupy_state, occupy_lag in string.gmatch(occupy_info,
    'slave%d+:[^\\r\\n]*state=(%a+)[^\\r\\n]*lag=(%-?%d+)') do
  if occupy_state == 'online' then
    occupy_online = occupy_online + 1
    if tonumber(occupy_lag) <= @MAX_LAG@ then occupy_live = occupy_live + 1 end
  end
end
"""

#: With ``MIN_REPLICAS`` > 0, on every script: the server must be a primary with enough
#: live replicas, or the script refuses before it reads or writes a key.
_MIN_GUARD = """
if not string.find(occupy_info, 'role:master', 1, true) or occupy_live < @MIN_REPLICAS@ then
  return redis.error_reply('NOREPLICAS occupy: this Redis server is not a primary with ' ..
    '@MIN_REPLICAS@ live replicas (MIN_REPLICAS; ' .. occupy_live .. ' online and heard ' ..
    'from within @MAX_LAG@ s): a failover may have replaced it, so it grants nothing')
end
"""

#: With ``REPLICAS`` > 0, on the scripts whose writes are waited for: a server with
#: fewer replicas online than must acknowledge refuses before it writes, since no
#: ``WAIT`` could be satisfied (a grant would only be given back after the whole wait).
_ACK_GUARD = """
if occupy_online < @REPLICAS@ then
  return redis.error_reply('NOREPLICAS occupy: this Redis server has ' .. occupy_online ..
    ' replicas online, fewer than the @REPLICAS@ that REPLICAS asks to acknowledge ' ..
    'each grant, so it grants nothing')
end
"""

#: The scripts whose writes ``REPLICAS`` waits for (release and cancel only remove).
_ACKNOWLEDGED = ("acquire", "queue", "takeover", "resume", "extend")


def guard_texts(texts: Mapping[str, str], min_replicas: int, replicas: int = 0) -> dict[str, str]:
    """Return the scripts ``texts`` (by name), each starting with the guards that
    ``min_replicas`` (every script) and ``replicas`` (those whose writes are waited
    for) ask for (unchanged when both are 0)."""
    guarded = {}
    for name, text in texts.items():
        guards = [_MIN_GUARD] if min_replicas > 0 else []
        if replicas > 0 and name in _ACKNOWLEDGED:
            guards.append(_ACK_GUARD)
        if guards:
            text = "".join([_COUNT, *guards]) + text
        guarded[name] = (
            text.replace("@MIN_REPLICAS@", str(int(min_replicas)))
            .replace("@REPLICAS@", str(int(replicas)))
            .replace("@MAX_LAG@", str(MAX_LAG))
        )
    return guarded


class NotAcknowledged(RedisError):
    """Fewer replicas acknowledged a grant than ``REPLICAS`` asks for (a redis-py error,
    so the protocol reports it as ``StoreUnavailable`` like any store failure)."""


def _granted(name: str, args: tuple[Any, ...], reply: Any) -> bool:
    """Return whether script ``name`` with ``args`` wrote a grant (or an extension)."""
    if name in ("acquire", "queue"):
        return reply is not None and not isinstance(reply, list)
    if name == "takeover":
        return isinstance(reply, list) and bool(reply) and reply[0] is not None
    return reply is not None  # resume, extend


def _gives_back(name: str, args: tuple[Any, ...]) -> bool:
    """Return whether an unacknowledged ``name`` is undone by cancelling its token (a
    new grant or a level of re-entry; an extension or a confirmation is not)."""
    if name == "resume":
        return len(args) > 2 and str(args[2]) == "1"
    return name in ("acquire", "queue", "takeover")


class AcknowledgedScript:
    """A protocol script followed, when it wrote, by ``WAIT`` on the same connection,
    for ``REPLICAS``; called like :class:`~occupy.backends.redis.calls.Script`."""

    def __init__(
        self, client: Any, name: str, script: Any, replicas: int, give_back: Callable[..., Any]
    ) -> None:
        self.client = client
        self.name = name
        self.script = script
        self.replicas = replicas
        self.give_back = give_back

    def __call__(self, key: str, *args: Any, bound: float | None = None) -> Any:
        """Run the script, then wait for the replicas; raise :class:`NotAcknowledged`
        (after giving a new grant back) if too few acknowledged in time."""
        wait_ms = max(1, round((ACK_TIMEOUT if bound is None else bound) * 1000))
        try:
            reply, acks = self._run("EVALSHA", self.script.sha, key, args, wait_ms)
        except NoScriptError:
            reply, acks = self._run("EVAL", self.script.text, key, args, wait_ms)
        if acks is None or acks >= self.replicas:
            return reply
        if _gives_back(self.name, args):
            self.give_back(key, args[0], bound=bound)
        raise NotAcknowledged(
            f"occupy: {acks} of the {self.replicas} replicas REPLICAS asks for acknowledged "
            f"the {self.name} within {wait_ms} ms; it was not kept (a failover now could "
            "lose it)"
        )

    def _run(
        self, command: str, script: str, key: str, args: tuple[Any, ...], ms: int
    ) -> tuple[Any, int | None]:
        # WAIT counts what the replicas have of this connection's writes: both commands
        # go down one connection to the key's primary (on a cluster, its node's own
        # client), and WAIT only after a grant, so that a refusal returns at once. The
        # script is retried on a connection made anew as redis-py retries any command;
        # WAIT never is: on a new connection it would count none of our writes.
        client = self.client
        nodes = getattr(client, "nodes_manager", None)
        if nodes is not None:
            client = client.get_node_from_key(key).redis_connection
        pool = client.connection_pool
        conn = pool.get_connection()
        try:
            reply = conn.retry.call_with_retry(
                lambda: _send(conn, command, script, 1, key, *args),
                lambda _error: conn.disconnect(),
            )
            acks = None
            if _granted(self.name, args, reply):
                acks = int(_send(conn, "WAIT", self.replicas, ms))
        except BaseException as e:
            if not isinstance(e, ResponseError):
                conn.disconnect()  # a reply may be left half read on it
            if nodes is not None and not isinstance(e, NoScriptError):
                nodes.initialize()  # the slot moved (a failover): learn the new map
            raise
        finally:
            pool.release(conn)
        return reply, acks


def _send(conn: Any, *command: Any) -> Any:
    """Send ``command`` down redis-py connection ``conn`` and return its reply."""
    conn.send_command(*command)
    return conn.read_response()


@dataclass(frozen=True)
class Replication:
    """A backend's ``MIN_REPLICAS`` and ``REPLICAS`` (see the module docstring)."""

    min_replicas: int = 0
    replicas: int = 0

    def texts(self, texts: Mapping[str, str]) -> dict[str, str]:
        """Return the scripts to register: guarded when ``min_replicas`` or ``replicas``
        is above 0."""
        return guard_texts(texts, self.min_replicas, self.replicas)

    def wrap(self, client: Any, scripts: Any) -> Any:
        """Return ``scripts`` (a ``Scripts`` tuple) with the grants acknowledged by
        ``replicas`` replicas, when ``replicas`` > 0 (else unchanged)."""
        if self.replicas <= 0:
            return scripts
        cancel = scripts.cancel
        return scripts._replace(
            **{
                name: AcknowledgedScript(
                    client, name, getattr(scripts, name), self.replicas, cancel
                )
                for name in _ACKNOWLEDGED
            }
        )

    def confirm_handover(self, scripts: Any, lock: str, token: str, ttl_ms: int) -> None:
        """Make sure a key a release handed to ``token`` has reached the replicas (the
        release was written on the releaser's connection, so the waiter's own ``WAIT``
        must follow a write of its own: a re-entry of no level). Raise
        :class:`NotAcknowledged` if it has not; the waiter's cancel then gives it back."""
        if self.replicas > 0 and scripts.resume(lock, token, ttl_ms, 0) is None:
            raise ResponseError("occupy: the key handed over was no longer held")
