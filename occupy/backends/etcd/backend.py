"""``EtcdBackend``: locks in etcd, a store that replicates by consensus before it answers.

Key layout, under ``PREFIX`` (default ``"occupy/"``), with ``<d>`` the SHA-256 of the
lock key:

- ``<prefix>g/<d>/<token>``: the grant. Written by one transaction only if no grant and
  no earlier waiter exists for the key, bound to an etcd lease of the grant's ttl (whole
  seconds, rounded up). Its value holds the owner, the depth of re-entry and, for
  display, the expiry and the start. The fence is the key's ``create_revision``: etcd's
  revision is one counter for the whole cluster, raised by every write and never reused
  (not by restarts, not by a new leader), so each grant's fence is higher than every
  grant's before it.
- ``<prefix>w/<d>/<token>``: a waiter, on a short lease of its own (``QUEUE_TTL``) that
  it keeps alive while it waits. Waiters are served by ``create_revision`` (first come,
  first served); each watches only the key before it (the head watches the grant), so a
  release wakes one waiter, and nobody polls.
- ``<prefix>r/<d>/<token>``: the mark of a release, written by the transaction that
  deletes the grant, on the grant's own etcd lease, and gone with it when the release
  revokes that lease a moment later. A release whose reply was lost (the member that
  applied it failed before answering) reads it back: the grant is gone *and* its mark is
  there, so the release took effect and is reported as done, not as ``LeaseLost`` (an
  expiry or a takeover deletes the grant without a mark).

Release, extend, re-entry and takeover compare revisions in the transaction that writes,
so a late call never touches a later grant. A grant ends at its ttl by the clock of the
process that last wrote it (:mod:`.expiry`), or by its lease on the cluster's clock if
that process is gone. The guarantees and limits are in docs/backends/etcd.md.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from contextlib import suppress
from typing import Any

from occupy.backends.base import BaseBackend, Claim
from occupy.backends.claims import UNKNOWN_OWNER, from_us, now_us
from occupy.exceptions import InvalidBackendError
from occupy.leases import Holder, Lease, new_token

try:
    from occupy.backends.etcd.client import (
        EtcdClient,
        EtcdError,
        KeyValue,
        create_is,
        empty,
        encode,
        lease_seconds,
        mod_is,
        prefix_end,
        put_op,
    )
except ImportError as e:  # pragma: no cover - depends on the installation
    raise InvalidBackendError(
        "occupy.backends.etcd.EtcdBackend needs etcd3gw: pip install 'django-occupy[etcd]'."
    ) from e

from occupy.backends.etcd.attempt import EtcdAttempt
from occupy.backends.etcd.store import OPTIONS, EtcdStore, lease_of, option_problems

__all__ = ["EtcdBackend"]

#: How often a call retries a transaction whose comparison failed because the key
#: changed between its read and its write (another process re-entered or extended).
_RETRIES = 20


class EtcdBackend(BaseBackend):
    """Locks in an etcd cluster, fenced by ``create_revision``; see the module docstring.
    The client, the key layout and the expirer are its :attr:`store`'s."""

    store_errors = (EtcdError,)
    options_schema = OPTIONS

    @classmethod
    def config_problems(
        cls, alias: str, params: Mapping[str, Any], options: Mapping[str, Any]
    ) -> list[str]:
        """Add: ``CERT`` and ``KEY`` come together; a password needs a user."""
        return super().config_problems(alias, params, options) + option_problems(alias, options)

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        super().__init__(alias, params)
        self.store = EtcdStore(self.options)
        self.prefix = self.store.prefix

    @property
    def client(self) -> EtcdClient:
        """Return the store's etcd client (made on first use)."""
        return self.store.client

    # --- the contract ------------------------------------------------------------------
    def attempt(self, key: str, owner: str, ttl: float) -> EtcdAttempt:
        """Return an attempt to take ``key``: a grant transaction, then a place in the
        queue watched by revision order."""
        return EtcdAttempt(self, self.store, key, owner, ttl)

    def release(self, lease: Lease) -> None:
        """Undo one level of ``lease``; the last deletes the grant (if its token still
        holds it, in the transaction that deletes) and revokes its lease."""
        name = self.store.grants(lease.key) + lease.token
        mark = self.store.released(lease.key) + lease.token
        with self.reaching(lease.key):
            for _ in range(_RETRIES):
                kv = self.store.read(name)
                if kv is None:
                    done = self.store.read(mark)  # released, but the reply was lost?
                    if done is None:
                        break
                    self.store.expirer.forget(lease.token)
                    with suppress(EtcdError):
                        self.store.client.revoke(done.lease)
                    return
                if self.store.expirer.passed(lease.token):
                    break
                depth = int(kv.value.get("d", 1))
                if depth > 1:
                    value = self.store.value(**{**kv.value, "d": depth - 1})
                    ok, rev, _ = self.store.client.txn(
                        [mod_is(name, kv.mod_revision)], [put_op(name, value, kv.lease)]
                    )
                    if ok:
                        self.store.expirer.rewritten(lease.token, rev)
                        return
                    continue
                ok, _rev, _ = self.store.client.txn(
                    [mod_is(name, kv.mod_revision)],
                    [{"request_delete_range": {"key": encode(name)}}, put_op(mark, "", kv.lease)],
                )
                if ok:
                    self.store.expirer.forget(lease.token)
                    with suppress(EtcdError):
                        self.store.client.revoke(kv.lease)
                    return
        raise lease.mark_lost("it expired or was taken over before its release")

    def extend(self, lease: Lease, ttl: float) -> None:
        """Move the grant's expiry ``ttl`` seconds on: the lease's keep-alive (a lease of
        the new length if the ttl changed), and the recorded expiry, in one transaction
        that checks the token."""
        renewed = self._rewrite(lease.key, lease.token, ttl, deeper=0, never_shorter=False)
        if renewed is None:
            raise lease.mark_lost("it expired or was taken over before it was extended")
        lease.expires_at = renewed.expires_at

    def resume(self, key: str, token: str, ttl: float, *, deeper: bool = True) -> Lease | None:
        """Return the lease ``token`` holds on ``key`` (one level deeper if ``deeper``,
        kept at least ``ttl`` more), or ``None``."""
        return self._rewrite(key, token, ttl, deeper=int(deeper), never_shorter=True)

    def _rewrite(
        self, key: str, token: str, ttl: float, *, deeper: int, never_shorter: bool
    ) -> Lease | None:
        name = self.store.grants(key) + token
        with self.reaching(key):
            for _ in range(_RETRIES):
                started, started_us = time.monotonic(), now_us()
                kv = self.store.read(name)
                if kv is None or self.store.expirer.passed(token):
                    return None
                expires_us = started_us + round(ttl * 1e6)
                if never_shorter:
                    expires_us = max(expires_us, int(kv.value.get("e", 0)))
                seconds = lease_seconds((expires_us - started_us) / 1e6)
                granted = int(kv.value.get("L", 0))
                if seconds == granted:
                    if self.store.client.keep_alive(kv.lease) < 0:
                        return None
                    lease_id = kv.lease
                else:
                    lease_id, granted = self.store.client.grant(seconds)
                fields = {**kv.value, "d": int(kv.value.get("d", 1)) + deeper}
                fields.update(e=expires_us, L=granted)
                ok, rev, _ = self.store.client.txn(
                    [mod_is(name, kv.mod_revision)],
                    [put_op(name, self.store.value(**fields), lease_id)],
                )
                if not ok:
                    if lease_id != kv.lease:
                        self.store.client.revoke(lease_id)
                    continue
                if lease_id != kv.lease:
                    with suppress(EtcdError):
                        self.store.client.revoke(kv.lease)
                at = started + (expires_us - started_us) / 1e6
                self.store.schedule(token, name, rev, lease_id, at)
                renewed = KeyValue(name, fields, kv.create_revision, rev, lease_id)
                return lease_of(self, renewed, ttl)
        return None

    def takeover(
        self, key: str, owner: str, ttl: float, *, if_fence: int | None = None
    ) -> tuple[Lease, Holder | None]:
        """Grant ``key`` to ``owner`` now: one transaction deletes the holder's key (only
        the grant with fence ``if_fence``, if given) and writes a new one, whose
        ``create_revision`` is higher. Waiters keep their places."""
        token = new_token()
        name = self.store.grants(key) + token
        with self.reaching(key):
            lease_id, granted = self.store.client.grant(lease_seconds(ttl))
            for _ in range(_RETRIES):
                started, started_us = time.monotonic(), now_us()
                current = self.store.current_grant(key)
                if current is not None and current.key == name:
                    # A takeover whose reply was lost and that was sent again: it is done
                    # (whom it replaced went unheard with the reply).
                    rev, fields, current = current.create_revision, current.value, None
                    break
                if if_fence is not None and (
                    current is None or current.create_revision != if_fence
                ):
                    with suppress(EtcdError):
                        self.store.client.revoke(lease_id)
                    held = None if current is None else self.store.holder_of(current)
                    raise self.takeover_refused(key, if_fence, held, self.store.remaining(current))
                fields = {
                    "k": key,
                    "o": owner,
                    "d": 1,
                    "e": started_us + round(ttl * 1e6),
                    "s": started_us,
                    "L": granted,
                }
                put = put_op(name, self.store.value(**fields), lease_id)
                if current is None:
                    start = self.store.grants(key)
                    ok, rev, _ = self.store.client.txn([empty(start)], [put])
                else:
                    ok, rev, _ = self.store.client.txn(
                        [create_is(current.key, current.create_revision)],
                        [{"request_delete_range": {"key": encode(current.key)}}, put],
                    )
                if ok:
                    break
            else:
                raise self.unavailable(key, EtcdError("the key kept changing; try again"))
        if current is not None:
            self.store.expirer.forget(current.key.rpartition("/")[2])
            with suppress(EtcdError):
                self.store.client.revoke(current.lease)
        self.store.schedule(token, name, rev, lease_id, started + ttl)
        lease = lease_of(self, KeyValue(name, fields, rev, rev, lease_id), ttl)
        return lease, None if current is None else self.store.holder_of(current)

    def holder(self, key: str) -> Holder | None:
        """Return who holds ``key`` (owner, expiry, fence; never the token), or ``None``."""
        with self.reaching(key):
            current = self.store.current_grant(key)
        return None if current is None else self.store.holder_of(current)

    def is_held(self, lease: Lease) -> bool:
        """Return whether ``lease``'s token still holds its key."""
        if self.store.expirer.passed(lease.token):
            return False
        with self.reaching(lease.key):
            return self.store.read(self.store.grants(lease.key) + lease.token) is not None

    def claims(self) -> Iterable[Claim]:
        """Return holders (``using``) and waiters (``pending``), by key; never tokens."""
        found = []
        with self.reaching(None):
            for part, state in (("g/", "using"), ("w/", "pending")):
                start = self.prefix + part
                kvs, _rev = self.store.client.range(start, prefix_end(start))
                for kv in kvs:
                    v, since = kv.value, kv.value.get("s")
                    found.append(
                        Claim(
                            key=v.get("k", kv.key),
                            owner=v.get("o", UNKNOWN_OWNER),
                            state=state,
                            since=None if since is None else from_us(int(since)),
                            expires_at=from_us(int(v.get("e", now_us()))),
                            fence=kv.create_revision if state == "using" else None,
                        )
                    )
        found.sort(key=lambda c: (c.key, c.state != "using", c.since or from_us(0)))
        return found

    def drop_claim(self, key: str) -> None:
        """Delete the grant on ``key`` behind its holder's back (a test hook)."""
        start = self.store.grants(key)
        with self.reaching(key):
            self.store.client.post(
                "kv/deleterange", {"key": encode(start), "range_end": encode(prefix_end(start))}
            )

    # --- the store ---------------------------------------------------------------------
    def describe_store(self) -> str:
        """Return the etcd endpoints the locks are on."""
        return f"etcd at {', '.join(self.store.endpoints)}"

    def store_fix(self) -> str:
        """Return what to check when etcd cannot be used."""
        return (
            "check that a majority of the etcd members answer and that OPTIONS['ENDPOINTS'] "
            "lists their client URLs"
        )

    def close(self) -> None:
        """Close the HTTP sessions; grants this process holds still end at their ttl."""
        self.store.close()
