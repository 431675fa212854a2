"""Locks on the real database backend (production's, no ``occupy_memory``) from the
main thread, a thread pool, ``sync_to_async``, sync and async views and async tests,
with pytest-django's default fixtures and no teardown code: the test database must
still drop cleanly at the end (on a database server: tests/test_userproject.py leaves
them out on SQLite, where a lock taken inside a transaction that wrote is refused).
"""

from concurrent.futures import ThreadPoolExecutor

import occupy
import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.test import TransactionTestCase

from shop.models import Item


def sell(pk: int) -> str:
    with occupy.lock(f"shop.item:{pk}", ttl=30, timeout=30) as lease:
        return lease.owner


@pytest.mark.django_db
def test_lock_in_the_main_thread() -> None:
    item = Item.objects.create(name="pen")
    with occupy.lock(f"shop.item:{item.pk}", ttl=30):
        assert occupy.holder(f"shop.item:{item.pk}") is not None


@pytest.mark.django_db(transaction=True)
def test_locks_in_a_thread_pool() -> None:
    items = [Item.objects.create(name=f"pen {i}").pk for i in range(8)]
    with ThreadPoolExecutor(4) as pool:
        assert len(list(pool.map(sell, items * 3))) == 24


@pytest.mark.django_db(transaction=True)
def test_locks_through_sync_to_async() -> None:
    async def sell_all() -> None:
        for pk in range(5):
            await sync_to_async(sell, thread_sensitive=False)(pk)
            await sync_to_async(sell)(pk)

    async_to_sync(sell_all)()


def test_sync_view(client, db) -> None:
    assert client.get("/sell/1/").content == b"sold"


def test_async_view(async_client, db) -> None:
    assert async_to_sync(async_client.get)("/asell/1/").content == b"sold"


class AsyncTests(TransactionTestCase):
    async def test_lock_in_an_async_test(self) -> None:
        lease = await occupy.aacquire("shop.item:42", ttl=30, timeout=5)
        assert (await occupy.aholder("shop.item:42")) is not None
        await occupy.arelease(lease)
        async with occupy.lock("shop.item:43", ttl=30):
            pass
