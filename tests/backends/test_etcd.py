"""The etcd backend beyond the contract: processes excluding each other on the
three-member cluster, first come first served, the fence as etcd's ``create_revision``,
its options and checks. (The contract suite runs on it as alias ``etcd``.)"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.core.checks import Error

import occupy
from occupy.backends import get_backend
from occupy.exceptions import InvalidBackendError
from tests.support import cleanup, multiproc
from tests.support.etcd_cluster import EtcdCluster
from tests.support.exclusion import assert_exclusive, count_under_lock, taken_over_after_kill
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import wait_until, watch_waiters
from tests.testapp.models import Counter

pytestmark = pytest.mark.skipif("etcd" in settings.SKIPS, reason=settings.SKIPS.get("etcd", ""))

ETCD = "occupy.backends.etcd.EtcdBackend"


@pytest.fixture
def etcd(etcd_cluster: EtcdCluster, live_db: None) -> Iterator[Any]:
    """The ``etcd`` backend on the session's cluster, its keys wiped around the test."""
    cleanup.wipe_etcd()
    yield get_backend("etcd")
    cleanup.wipe_etcd()


@pytest.mark.multiprocess
def test_processes_exclude_each_other(etcd: Any) -> None:
    Counter.objects.create(name="etcd")
    results = multiproc.run(count_under_lock, [("etcd", "etcd", 5, 0.01)] * 4)
    assert sum(len(r) for r in results) == 20
    assert_exclusive(results, "etcd")


@pytest.mark.multiprocess
def test_a_killed_holders_key_is_free_within_its_ttl_plus_a_second(etcd: Any) -> None:
    # Nobody ends the grant here but its etcd lease, on the cluster's clock.
    assert taken_over_after_kill("etcd", "book:killed", ttl=2.0) <= 3.0


def test_the_fence_is_the_grants_create_revision(etcd: Any) -> None:
    lease = occupy.acquire("book:1", owner="alice", ttl=30, backend="etcd")
    kvs, revision = etcd.client.range(etcd.store.grants("book:1") + lease.token)
    assert [kv.create_revision for kv in kvs] == [lease.fence]
    assert lease.fence <= revision
    occupy.release(lease)
    assert etcd.client.range(etcd.store.grants("book:1") + lease.token)[0] == []


def test_waiters_are_served_in_the_order_they_came(etcd: Any) -> None:
    holder = occupy.acquire("book:1", owner="first", ttl=30, backend="etcd")
    served: list[str] = []

    def wait(name: str) -> None:
        lease = occupy.acquire("book:1", owner=name, ttl=30, timeout=20, backend="etcd")
        served.append(name)
        occupy.release(lease)

    threads = []
    for n in range(5):
        thread = threading.Thread(target=wait, args=(f"w{n}",))
        thread.start()
        threads.append(thread)
        wait_until(
            lambda n=n: len([c for c in etcd.claims() if c.state == "pending"]) == n + 1,
            what=f"waiter w{n} queued",
        )
    # A newcomer that will not wait does not jump the queue when the key comes free.
    occupy.release(holder)
    with pytest.raises(occupy.Occupied):
        occupy.acquire("book:1", owner="newcomer", timeout=0, backend="etcd")
    for thread in threads:
        thread.join(20)
    assert served == [f"w{n}" for n in range(5)]
    assert etcd.claims() == []


def test_async_waiters_on_one_loop_are_served_in_turn(
    etcd: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    order: list[int] = []
    waiting = watch_waiters("etcd", monkeypatch)

    async def main() -> None:
        first = await occupy.aacquire("book:1", owner="first", ttl=30, backend="etcd")

        async def waiter(n: int) -> None:
            async with occupy.lock("book:1", ttl=30, timeout=20, backend="etcd") as lease:
                order.append(lease.fence)

        tasks = [asyncio.ensure_future(waiter(n)) for n in range(6)]
        await waiting.await_for(6)  # all queued behind the first
        await occupy.arelease(first)
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert order == sorted(order) and len(set(order)) == 6


def test_a_grant_outlives_the_shortest_etcd_lease_when_extended(etcd: Any) -> None:
    """A ttl shorter than a second still ends at its ttl; extending it to a longer ttl
    moves it to a lease of that length."""
    lease = occupy.acquire("book:1", ttl=0.2, backend="etcd")
    lease.extend(30)
    kvs, _ = etcd.client.range(etcd.store.grants("book:1") + lease.token)
    assert kvs[0].value["L"] >= 30
    lease.ensure_held()
    occupy.release(lease)


def test_check_database_reaches_the_cluster(etcd: Any) -> None:
    assert etcd.check_store(["default"]) == []
    dead = type(etcd)(
        "dead", {"BACKEND": ETCD, "OPTIONS": {"ENDPOINTS": ["http://127.0.0.1:9"], "TIMEOUT": 1}}
    )
    [warning] = dead.check_store(["default"])
    assert warning.id == "occupy.W007" and "etcd at http://127.0.0.1:9" in warning.msg


@pytest.mark.parametrize(
    ("options", "complaint"),
    [
        ({"ENDPOINTS": []}, "ENDPOINTS'] must be a non-empty list"),
        ({"ENDPOINTS": ["127.0.0.1:2379"]}, "http:// or https://"),
        ({"PREFIX": ""}, "PREFIX'] must not be empty"),
        ({"TIMEOUT": 0}, "TIMEOUT"),
        ({"CERT": "/etc/c.pem"}, "CERT and KEY together"),
        ({"PASSWORD": "x"}, "no USERNAME"),
        ({"ENDPIONTS": ["http://x:1"]}, "unknown keys ['ENDPIONTS']"),
    ],
)
def test_options_are_checked(options: dict[str, Any], complaint: str) -> None:
    from occupy.backends.etcd import EtcdBackend

    config = {"BACKEND": ETCD, "OPTIONS": options}
    with pytest.raises(InvalidBackendError, match=None) as info:
        EtcdBackend("bad", config)
    assert complaint in str(info.value)
    [message] = EtcdBackend.check("bad", config)
    assert isinstance(message, Error) and message.id == "occupy.E006"
    assert complaint in message.msg


def test_a_holder_cut_off_from_the_cluster_loses_its_grant_to_a_higher_fence(
    etcd: Any, etcd_cluster: EtcdCluster
) -> None:
    """The limit docs/backends/etcd.md states: a holder partitioned from every member
    cannot renew; the cluster ends its lease on its own clock and grants the key with a
    higher fence; back in touch, the holder finds its lease lost and frees nothing."""
    from occupy.backends.etcd import EtcdBackend

    proxy = TcpProxy(("127.0.0.1", etcd_cluster.client_port(0)))
    cut_off = EtcdBackend(
        "cut-off",
        {
            "BACKEND": ETCD,
            "OPTIONS": {
                "ENDPOINTS": [f"http://127.0.0.1:{proxy.port}"],
                "PREFIX": etcd.prefix,
                "TIMEOUT": 0.5,
            },
        },
    )
    try:
        lease = cut_off.acquire("book:p", owner="cut-off", ttl=1, timeout=0)
        proxy.cut()
        with pytest.raises(occupy.StoreUnavailable):
            cut_off.extend(lease, 1)
        # Waits for the cluster to end the lease (its own expirer cannot reach etcd).
        other = occupy.acquire("book:p", owner="other", ttl=30, timeout=10, backend="etcd")
        assert other.fence > lease.fence
        proxy.heal()
        assert not cut_off.is_held(lease)
        with pytest.raises(occupy.LeaseLost):
            cut_off.release(lease)
        assert occupy.holder("book:p", backend="etcd")[::2] == ("other", other.fence)
        occupy.release(other)
    finally:
        cut_off.close()
        proxy.close()


def test_a_release_whose_reply_was_lost_is_a_release(etcd: Any, etcd_cluster: EtcdCluster) -> None:
    """The member that applied the release's transaction fails before it answers; the
    call goes on to the next member, where the grant is already gone. Before, that was
    reported as ``LeaseLost`` although the key had been released."""
    from occupy.backends.etcd import EtcdBackend
    from occupy.backends.etcd.client import prefix_end

    proxy = TcpProxy(("127.0.0.1", etcd_cluster.client_port(0)))
    others = [f"http://127.0.0.1:{etcd_cluster.client_port(i)}" for i in (1, 2)]
    backend = EtcdBackend(
        "lossy",
        {
            "BACKEND": ETCD,
            "OPTIONS": {
                "ENDPOINTS": [f"http://127.0.0.1:{proxy.port}", *others],
                "PREFIX": etcd.prefix,
            },
        },
    )
    try:
        for depth in (1, 2):
            lease = backend.acquire("book:r", owner="alice", ttl=30, timeout=0)
            if depth == 2:  # re-entered: the first release only rewrites the grant
                backend.resume("book:r", lease.token, 30)
                backend.release(lease)
            backend.client._current = 0  # the next call goes to the failing member first
            proxy.lose_reply_to(b"POST /v3/kv/txn")
            backend.release(lease)
            assert proxy.lost == depth
            assert occupy.holder("book:r", backend="etcd") is None
            marks = backend.store.released("book:r")
            assert backend.client.range(marks, prefix_end(marks))[0] == []  # revoked
            with pytest.raises(occupy.LeaseLost):  # released once, and only once
                backend.release(lease)
        # A grant that was taken over is still lost, mark or none.
        lease = backend.acquire("book:r", owner="alice", ttl=30, timeout=0)
        other = occupy.takeover("book:r", owner="bob", ttl=30, backend="etcd")
        with pytest.raises(occupy.LeaseLost):
            backend.release(lease)
        occupy.release(other)
    finally:
        backend.close()
        proxy.close()
