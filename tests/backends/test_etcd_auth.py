"""The etcd backend with authentication on (``USERNAME``/``PASSWORD``), on a member of
the test's own that forgets a token unused for two seconds (``--auth-token-ttl``; five
minutes by default): every call and every waiter's watch carries the token, and a
forgotten token is replaced, not reported as the store being down for good."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings

import occupy
from occupy.exceptions import StoreUnavailable
from tests.support.etcd_cluster import EtcdCluster, etcd_missing
from tests.support.ports import top_ports

pytestmark = pytest.mark.skipif("etcd" in settings.SKIPS, reason=settings.SKIPS.get("etcd", ""))

PASSWORD = "occupy-pass"
#: Seconds etcd keeps a token nobody uses.
TOKEN_TTL = 2


def _post(endpoint: str, path: str, body: dict[str, Any]) -> None:
    request = urllib.request.Request(
        f"{endpoint}/v3/{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        assert reply.status == 200, reply.read()


@pytest.fixture(scope="module")
def guarded() -> Iterator[str]:
    """One etcd member with authentication on (user ``root``); yield its endpoint."""
    why = etcd_missing()
    if why is not None:
        pytest.skip(why)
    # Below the session's cluster (the top 6 ports) and the failover test's (6 more).
    with EtcdCluster(1, top_ports(2, below=12), f"--auth-token-ttl={TOKEN_TTL}") as cluster:
        [endpoint] = cluster.endpoints
        _post(endpoint, "auth/user/add", {"name": "root", "password": PASSWORD})
        _post(endpoint, "auth/role/add", {"name": "root"})
        _post(endpoint, "auth/user/grant", {"user": "root", "role": "root"})
        _post(endpoint, "auth/enable", {})
        yield endpoint


def _backend(endpoint: str, password: str = PASSWORD, **options: Any) -> Any:
    from occupy.backends.etcd import EtcdBackend

    config = {
        "BACKEND": "occupy.backends.etcd.EtcdBackend",
        "OPTIONS": {
            "ENDPOINTS": [endpoint],
            "PREFIX": f"{settings.REDIS_PREFIX}auth/",
            "USERNAME": "root",
            "PASSWORD": password,
            **options,
        },
    }
    return EtcdBackend("etcd-auth", config)


def test_a_waiter_is_woken_by_its_watch(guarded: str) -> None:
    """A waiter's fallback is a look every ``QUEUE_TTL / 3`` (10 s here): only a watch
    that carries the token wakes it when the holder releases."""
    backend = _backend(guarded, QUEUE_TTL=30)
    holder = backend.acquire("book:1", owner="alice", ttl=30, timeout=0)
    got: list[tuple[Any, float]] = []

    def wait() -> None:
        lease = backend.acquire("book:1", owner="bob", ttl=30, timeout=20)
        got.append((lease, time.monotonic()))

    waiter = threading.Thread(target=wait)
    waiter.start()
    deadline = time.monotonic() + 10
    while not [c for c in backend.claims() if c.state == "pending"]:
        assert time.monotonic() < deadline, "the waiter never queued"
        time.sleep(0.02)
    time.sleep(0.3)  # its watch is set up
    released = time.monotonic()
    occupy.release(holder)
    waiter.join(25)
    assert got, "the waiter never got the key"
    lease, at = got[0]
    assert at - released < 2, f"woken {at - released:.1f} s after the release"
    assert lease.fence > holder.fence
    occupy.release(lease)
    backend.close()


def test_a_token_etcd_forgot_is_replaced(guarded: str) -> None:
    backend = _backend(guarded)
    occupy.release(backend.acquire("book:2", owner="alice", ttl=5, timeout=0))
    time.sleep(TOKEN_TTL + 1.5)  # nobody uses the token: etcd forgets it
    lease = backend.acquire("book:2", owner="alice", ttl=5, timeout=0)
    assert backend.holder("book:2").owner == "alice"
    occupy.release(lease)
    backend.close()


def test_a_wrong_password_says_so(guarded: str) -> None:
    backend = _backend(guarded, password="not-it")
    with pytest.raises(StoreUnavailable, match="authentication failed"):
        backend.acquire("book:3", owner="alice", ttl=5, timeout=0)
    backend.close()
