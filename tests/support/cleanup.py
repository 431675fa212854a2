"""Delete what a test left behind: claims, test rows, Redis keys, cache entries, lock files."""

from __future__ import annotations

import shutil
from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.db import connections

__all__ = ["TABLES", "wipe", "wipe_etcd", "wipe_stores", "wipe_tables"]

#: Whether the session's etcd cluster runs (set by tests/conftest.py's ``etcd_cluster``).
etcd_running = False

#: The model-side test tables, children before parents.
TABLES = [
    "testapp_ebook",
    "testapp_book",
    "testapp_chapter",
    "testapp_strictbook",
    "testapp_uuidbook",
    "testapp_shelf",
    "testapp_label",
    "testapp_goods",
    "testapp_task",
    "testapp_document",
    "testapp_page",
    "testapp_scroll",
    "testapp_longkeynote",
    "testapp_seat",
    "testapp_manual",
]


def wipe() -> None:
    """Delete every claim and test row in every test database, cache and lock directory."""
    for alias in connections:
        with connections[alias].cursor() as cursor:
            cursor.execute("DELETE FROM occupy_occupation")
            cursor.execute("DELETE FROM testapp_counter")
    wipe_stores()


def wipe_stores() -> None:
    """Delete the suite's Redis keys (by prefix), the locmem cache and the lock files."""
    caches["locmem"].clear()
    from occupy.backends import get_backend
    from occupy.testing import clock

    get_backend("memory").clear()  # type: ignore[attr-defined]
    clock.reset()
    if "extra" in settings.OCCUPY["BACKENDS"]:
        wipe_extra(get_backend("extra"))
    shutil.rmtree(settings.FILES_LOCATION, ignore_errors=True)
    if "redis" in settings.CACHES:
        from django_redis import get_redis_connection

        client = get_redis_connection("redis")
        names = list(client.scan_iter(match=f"{settings.REDIS_PREFIX}*", count=1000))
        if names:
            client.delete(*names)
    if "locks" in settings.CACHES:
        from django_redis import get_redis_connection

        client = get_redis_connection("locks")
        names = list(client.scan_iter(match=f"{settings.REDIS_KEY_PREFIX}:*", count=1000))
        if names:
            client.delete(*names)
    wipe_etcd()


def wipe_extra(backend: Any) -> None:
    """Free every key the backend under test (``OCCUPY_TEST_BACKEND``) holds, with the
    contract's calls alone, since its store is none the suite knows: a ``clear()`` if it
    has one (as the memory backend does), else each claim ``claims()`` lists taken over
    and released (a waiter's queued claim is its attempt's to remove)."""
    if hasattr(backend, "clear"):
        backend.clear()
        return
    try:
        held = {claim.key for claim in backend.claims() if claim.state == "using"}
    except NotImplementedError:  # a store that cannot list its keys: tests free their own
        return
    for key in held:
        lease, _previous = backend.takeover(key, "occupy-tests:wipe", 1)
        backend.release(lease)


def wipe_etcd() -> None:
    """Delete every key of the ``etcd`` backend's prefix, if its cluster runs."""
    if not etcd_running:
        return
    from occupy.backends import get_backend
    from occupy.backends.etcd.client import encode, prefix_end

    backend = get_backend("etcd")
    prefix = backend.prefix  # type: ignore[attr-defined]
    backend.client.post(  # type: ignore[attr-defined]
        "kv/deleterange", {"key": encode(prefix), "range_end": encode(prefix_end(prefix))}
    )


def wipe_tables() -> None:
    """Delete every row of the model-side test tables in every test database."""
    for alias in connections:
        with connections[alias].cursor() as cursor:
            for table in TABLES:
                cursor.execute(f"DELETE FROM {table}")
