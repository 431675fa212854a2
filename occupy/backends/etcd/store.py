"""``EtcdStore``: what :class:`~occupy.backends.etcd.EtcdBackend` and its attempts
share, held by the backend rather than inherited: its client, the key layout, the
reading of a grant and the expirer (see :mod:`.backend` for the protocol and its
guarantees); and the backend's options. The attempts and the backend both use it, so
neither of the two imports the other.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from contextlib import suppress
from typing import Any

from occupy.backends.attempt import AttemptBackend
from occupy.backends.claims import UNKNOWN_OWNER, digest, from_us, now_us
from occupy.backends.etcd.client import (
    EtcdClient,
    EtcdError,
    KeyValue,
    encode,
    mod_is,
    prefix_end,
)
from occupy.backends.etcd.expiry import Deadline, Expirer
from occupy.backends.options import Option, where
from occupy.backends.outcomes import make_holder
from occupy.leases import Holder, Lease

__all__ = ["OPTIONS", "EtcdStore", "lease_of", "option_problems"]


def _endpoints_problem(value: Any) -> str | None:
    if not value or not all(isinstance(url, str) for url in value):
        return "must be a non-empty list of URLs such as 'http://127.0.0.1:2379'"
    bad = [url for url in value if not url.startswith(("http://", "https://"))]
    return f"must hold http:// or https:// URLs, not {bad[0]!r}" if bad else None


def _prefix_problem(value: str) -> str | None:
    return None if value else "must not be empty"


#: The etcd backend's ``OPTIONS``.
OPTIONS = {
    "ENDPOINTS": Option(
        (list, tuple),
        ["http://127.0.0.1:2379"],
        "the members' client URLs, tried in turn",
        check=_endpoints_problem,
    ),
    "PREFIX": Option(
        str, "occupy/", "what every key occupy writes starts with", check=_prefix_problem
    ),
    "USERNAME": Option((str, type(None)), None, "etcd user (authentication on)"),
    "PASSWORD": Option((str, type(None)), None, "that user's password"),
    "CA_CERT": Option((str, type(None)), None, "CA bundle to verify https endpoints"),
    "CERT": Option((str, type(None)), None, "client certificate (TLS), with KEY"),
    "KEY": Option((str, type(None)), None, "client certificate's key (TLS), with CERT"),
    "TIMEOUT": Option(float, 5.0, "longest a call to etcd may take", positive=True),
    "QUEUE_TTL": Option(
        float, 3.0, "how long a waiter's place outlives its process", positive=True
    ),
}


def option_problems(alias: str, options: Mapping[str, Any]) -> list[str]:
    """Return what is wrong with options that must agree: ``CERT`` and ``KEY`` come
    together; a password needs a user."""
    problems = []
    if (options["CERT"] is None) != (options["KEY"] is None):
        problems.append(f"{where(alias)}['OPTIONS'] must give CERT and KEY together.")
    if options["PASSWORD"] is not None and options["USERNAME"] is None:
        problems.append(f"{where(alias)}['OPTIONS'] gives a PASSWORD but no USERNAME.")
    return problems


class EtcdStore:
    """Locks in an etcd cluster; see :class:`~occupy.backends.etcd.EtcdBackend`.
    ``options`` are the backend's, checked."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = options
        self.endpoints: list[str] = list(self.options["ENDPOINTS"])
        self.prefix: str = self.options["PREFIX"]
        self.timeout = float(self.options["TIMEOUT"])
        self.queue_ttl = float(self.options["QUEUE_TTL"])
        self._client: EtcdClient | None = None
        self._connecting = threading.Lock()
        self.expirer = Expirer(self._end)

    @property
    def client(self) -> EtcdClient:
        """Return the client of the configured endpoints (made on first use)."""
        client = self._client
        if client is None:
            with self._connecting:
                if self._client is None:
                    cert = self.options["CERT"]
                    self._client = EtcdClient(
                        self.endpoints,
                        timeout=self.timeout,
                        username=self.options["USERNAME"],
                        password=self.options["PASSWORD"],
                        ca_cert=self.options["CA_CERT"],
                        cert=(cert, self.options["KEY"]) if cert else None,
                    )
                client = self._client
        return client

    # --- key layout ------------------------------------------------------------------
    def grants(self, key: str) -> str:
        """Return the prefix of ``key``'s grant (at most one key under it)."""
        return f"{self.prefix}g/{digest(key)}/"

    def queue(self, key: str) -> str:
        """Return the prefix of ``key``'s waiters."""
        return f"{self.prefix}w/{digest(key)}/"

    def released(self, key: str) -> str:
        """Return the prefix of the marks a release of ``key`` leaves until it revokes
        the grant's lease (see :meth:`EtcdBackend.release`)."""
        return f"{self.prefix}r/{digest(key)}/"

    @staticmethod
    def value(**fields: Any) -> str:
        """Return a grant's or waiter's value as the gateway carries it."""
        return encode(json.dumps(fields, separators=(",", ":")))

    # --- what the attempt and the calls share ------------------------------------------
    def holder_of(self, kv: KeyValue) -> Holder:
        """Return who holds the grant ``kv`` (never its token)."""
        v = kv.value
        since = v.get("s")
        return make_holder(
            v.get("o", UNKNOWN_OWNER),
            from_us(int(v.get("e", now_us()))),
            kv.create_revision,
            None if since is None else from_us(int(since)),
        )

    @staticmethod
    def remaining(kv: KeyValue | None) -> float | None:
        """Return the seconds left on a grant by its recorded expiry."""
        if kv is None or "e" not in kv.value:
            return None
        return max(0.0, (int(kv.value["e"]) - now_us()) / 1e6)

    def schedule(self, token: str, name: str, mod_revision: int, lease: int, at: float) -> None:
        """End ``token``'s grant at monotonic time ``at`` unless written again."""
        self.expirer.schedule(token, Deadline(at, name, mod_revision, lease))

    def _end(self, deadline: Deadline) -> None:
        """End a grant whose ttl passed here, if nobody wrote it since (the expirer's
        call; a failure leaves it to the lease)."""
        with suppress(EtcdError):
            ok, _rev, _ = self.client.txn(
                [mod_is(deadline.name, deadline.mod_revision)],
                [{"request_delete_range": {"key": encode(deadline.name)}}],
            )
            if ok:
                self.client.revoke(deadline.lease)

    def read(self, name: str) -> KeyValue | None:
        """Return the key ``name`` in etcd, or ``None``."""
        kvs, _rev = self.client.range(name)
        return kvs[0] if kvs else None

    def current_grant(self, key: str) -> KeyValue | None:
        """Return the grant on ``key`` (its key in etcd), or ``None``."""
        start = self.grants(key)
        kvs, _rev = self.client.range(start, prefix_end(start), limit=1)
        return kvs[0] if kvs else None

    def close(self) -> None:
        """Close the HTTP sessions; grants this process holds still end at their ttl."""
        client, self._client = self._client, None
        if client is not None:
            client.close()


def lease_of(backend: AttemptBackend, kv: KeyValue, ttl: float) -> Lease:
    """Return the lease ``backend`` grants by the grant ``kv``."""
    v = kv.value
    return backend.make_lease(
        v.get("k", ""),
        owner=v.get("o", UNKNOWN_OWNER),
        token=kv.key.rpartition("/")[2],
        fence=kv.create_revision,
        expires_at=from_us(int(v.get("e", 0))),
        ttl=ttl,
        depth=int(v.get("d", 1)),
    )
