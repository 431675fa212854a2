"""The calls occupy makes to etcd's JSON gateway, through ``etcd3gw``'s session.

:class:`EtcdClient` sends each call to one of the configured endpoints and moves to the
next when a member cannot be reached, bounding every call by a timeout the caller
gives (its time left). Keys and values travel base64-encoded, as the gateway wants;
revisions come back as strings and are returned as ``int``.

A write whose reply was lost may have been applied: every write occupy makes is safe to
send again (the grant's key is named by its token, so a repeated grant finds its own
key and takes it as granted; deletes and conditional puts compare revisions).
"""

from __future__ import annotations

import base64
import json
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import requests
from etcd3gw.client import Etcd3Client
from etcd3gw.watch import Watcher

__all__ = [
    "EtcdClient",
    "EtcdError",
    "KeyValue",
    "create_is",
    "decode",
    "empty",
    "encode",
    "lease_seconds",
    "mod_is",
    "none_before",
    "prefix_end",
    "put_op",
]


class EtcdError(Exception):
    """etcd could not be reached, or refused a call (``.code``: its gRPC status code)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


#: gRPC's NOT_FOUND: etcd's answer about a lease that has expired or was revoked.
NOT_FOUND = 5
#: gRPC's UNAUTHENTICATED: etcd's answer to a token it does not know (any more): a
#: simple token unused for ``--auth-token-ttl`` (5 minutes by default) is forgotten.
UNAUTHENTICATED = 16


def lease_seconds(ttl: float) -> int:
    """Return the whole seconds of an etcd lease that outlives ``ttl``."""
    return max(1, math.ceil(ttl))


def encode(text: str) -> str:
    """Return ``text`` as the gateway carries bytes (base64 of its UTF-8)."""
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def decode(data: str) -> str:
    """Return the text of a base64 field of a gateway reply."""
    return base64.b64decode(data).decode("utf-8")


def prefix_end(prefix: str) -> str:
    """Return the end of the key range of every key starting with ``prefix`` (its last
    character one higher, as etcd's ``WithPrefix`` does)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


@dataclass(frozen=True)
class KeyValue:
    """One key as etcd returned it."""

    key: str
    value: dict[str, Any]
    create_revision: int
    mod_revision: int
    lease: int

    @classmethod
    def parse(cls, kv: Mapping[str, Any]) -> KeyValue:
        """Return the key of a gateway reply's ``kv`` (a value that is no JSON object
        is read as empty: occupy did not write it)."""
        try:
            value = json.loads(decode(kv.get("value", "")))
        except ValueError:
            value = {}
        return cls(
            key=decode(kv["key"]),
            value=value if isinstance(value, dict) else {},
            create_revision=int(kv.get("create_revision", 0)),
            mod_revision=int(kv.get("mod_revision", 0)),
            lease=int(kv.get("lease", 0)),
        )


class EtcdClient:
    """Calls to the gateway of the first endpoint that answers."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        timeout: float,
        username: str | None = None,
        password: str | None = None,
        ca_cert: str | None = None,
        cert: tuple[str, str] | None = None,
    ) -> None:
        self.clients = []
        for endpoint in endpoints:
            url = urlsplit(endpoint)
            self.clients.append(
                Etcd3Client(
                    host=url.hostname or "localhost",
                    port=url.port or 2379,
                    protocol=url.scheme or "http",
                    ca_cert=ca_cert,
                    cert_cert=cert[0] if cert else None,
                    cert_key=cert[1] if cert else None,
                    timeout=timeout,
                    api_path="/v3/",
                )
            )
        self.timeout = timeout
        self.username = username
        self.password = password
        self._current = 0
        self._token: str | None = None
        self._lock = threading.Lock()

    # --- transport -------------------------------------------------------------------
    def post(self, path: str, body: Mapping[str, Any], timeout: float | None = None) -> Any:
        """Send ``body`` to ``path`` (e.g. ``"kv/txn"``) and return the reply; try each
        endpoint once, starting with the last that answered."""
        timeout = self.timeout if timeout is None else min(timeout, self.timeout)
        start = self._current
        problem: BaseException | None = None
        for step in range(len(self.clients)):
            index = (start + step) % len(self.clients)
            client = self.clients[index]
            try:
                reply = self._send(client, path, body, timeout)
            except requests.RequestException as e:
                problem = e
                continue
            if reply.status_code == 200:
                self._current = index
                return reply.json()
            error = _error(reply)
            if error.code == 14 or reply.status_code in (502, 503):  # UNAVAILABLE: no leader
                problem = error
                continue
            raise error
        raise EtcdError(f"no etcd endpoint answered: {problem}") from problem

    def _send(
        self, client: Etcd3Client, path: str, body: Mapping[str, Any], timeout: float
    ) -> requests.Response:
        """Post ``body`` to ``path`` on ``client``'s member; with credentials, signed in
        first, and signed in again once when the member no longer knows the token."""
        token = self._sign_in(client, timeout)
        reply = client.session.post(client.get_url(path), json=body, timeout=timeout)
        forgotten = reply.status_code == 401 and _error(reply).code == UNAUTHENTICATED
        if token is not None and forgotten:
            self._forget(token)
            self._sign_in(client, timeout)
            reply = client.session.post(client.get_url(path), json=body, timeout=timeout)
        return reply

    def _sign_in(self, client: Etcd3Client, timeout: float) -> str | None:
        """Return the token every call carries (``None`` without ``USERNAME``), asked
        of ``client``'s member if there is none yet. It is a default header of every
        endpoint's session, so that the watch streams etcd3gw opens carry it too."""
        if self.username is None:
            return None
        with self._lock:
            if self._token is None:
                reply = client.session.post(
                    client.get_url("auth/authenticate"),
                    json={"name": self.username, "password": self.password or ""},
                    timeout=timeout,
                )
                if reply.status_code != 200:
                    raise _error(reply)
                self._token = str(reply.json()["token"])
                for each in self.clients:
                    each.session.headers["Authorization"] = self._token
            return self._token

    def _forget(self, token: str) -> None:
        """Drop ``token`` (unless another thread has signed in again meanwhile)."""
        with self._lock:
            if self._token == token:
                self._token = None
                for each in self.clients:
                    each.session.headers.pop("Authorization", None)

    # --- calls -----------------------------------------------------------------------
    def txn(
        self,
        compare: list[dict[str, Any]],
        success: list[dict[str, Any]],
        failure: list[dict[str, Any]] | None = None,
        timeout: float | None = None,
    ) -> tuple[bool, int, list[Any]]:
        """Run one transaction; return whether its comparisons held, the store's
        revision after it, and the replies of the branch that ran."""
        reply = self.post(
            "kv/txn",
            {"compare": compare, "success": success, "failure": failure or []},
            timeout,
        )
        return (
            bool(reply.get("succeeded", False)),
            int(reply["header"]["revision"]),
            reply.get("responses", []),
        )

    def range(
        self, key: str, end: str | None = None, timeout: float | None = None, **options: Any
    ) -> tuple[list[KeyValue], int]:
        """Return the keys from ``key`` (to ``end``) and the store's revision."""
        body: dict[str, Any] = {"key": encode(key), **options}
        if end is not None:
            body["range_end"] = encode(end)
        reply = self.post("kv/range", body, timeout)
        return [KeyValue.parse(kv) for kv in reply.get("kvs", [])], int(reply["header"]["revision"])

    def grant(self, ttl: int, timeout: float | None = None) -> tuple[int, int]:
        """Grant a lease of ``ttl`` seconds; return its id and the TTL etcd gave it (at
        least its minimum, from its election timeout)."""
        reply = self.post("lease/grant", {"TTL": ttl, "ID": 0}, timeout)
        return int(reply["ID"]), int(reply["TTL"])

    def keep_alive(self, lease: int, timeout: float | None = None) -> int:
        """Renew ``lease`` to its full TTL; return the TTL, or -1 if it has ended."""
        reply = self.post("lease/keepalive", {"ID": lease}, timeout)
        return int(reply.get("result", {}).get("TTL", -1))

    def revoke(self, lease: int, timeout: float | None = None) -> None:
        """End ``lease`` now (its keys are deleted); one that has ended is no error."""
        try:
            self.post("kv/lease/revoke", {"ID": lease}, timeout)
        except EtcdError as e:
            if e.code != NOT_FOUND:
                raise

    def watch(
        self, key: str, end: str | None, start_revision: int, on_delete: Callable[[], None]
    ) -> Callable[[], None]:
        """Call ``on_delete`` when a key in the range is deleted at ``start_revision`` or
        later (or the watch cannot be made); return the function that stops the watch."""
        client = self.clients[self._current]
        try:
            self._sign_in(client, self.timeout)
            watcher = Watcher(
                client,
                key,
                lambda event: on_delete(),
                range_end=end,
                start_revision=start_revision,
                filters=["NOPUT"],
            )
        except (requests.RequestException, EtcdError):
            on_delete()  # the caller looks again now
            return lambda: None
        return watcher.stop

    def status(self, timeout: float | None = None) -> Any:
        """Return the answering member's status (version, leader, revision)."""
        return self.post("maintenance/status", {}, timeout)

    def close(self) -> None:
        """Close the HTTP sessions (they open again when next used)."""
        for client in self.clients:
            client.session.close()


def _error(reply: requests.Response) -> EtcdError:
    try:
        body = reply.json()
        message, code = str(body.get("error") or body.get("message")), body.get("code")
    except ValueError:
        message, code = reply.text.strip() or reply.reason, None
    return EtcdError(f"etcd answered {reply.status_code}: {message}", code)


def put_op(name: str, value: str, lease: int) -> dict[str, Any]:
    """Return the operation that writes ``name`` bound to ``lease``."""
    return {"request_put": {"key": encode(name), "value": value, "lease": lease}}


def mod_is(name: str, revision: int) -> dict[str, Any]:
    """Compare: ``name`` was last written at ``revision``."""
    return {"key": encode(name), "target": "MOD", "result": "EQUAL", "mod_revision": revision}


def create_is(name: str, revision: int) -> dict[str, Any]:
    """Compare: ``name`` was created at ``revision``."""
    return {
        "key": encode(name),
        "target": "CREATE",
        "result": "EQUAL",
        "create_revision": revision,
    }


def empty(start: str) -> dict[str, Any]:
    """Compare: no key starts with ``start``."""
    return {
        "key": encode(start),
        "range_end": encode(prefix_end(start)),
        "target": "VERSION",
        "result": "EQUAL",
        "version": 0,
    }


def none_before(start: str, revision: int) -> dict[str, Any]:
    """Compare: no key starting with ``start`` was created before ``revision``."""
    return {
        "key": encode(start),
        "range_end": encode(prefix_end(start)),
        "target": "CREATE",
        "result": "GREATER",
        "create_revision": revision - 1,
    }
