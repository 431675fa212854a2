"""PATCH through Django REST framework on PostgreSQL: occupy's view mixins against plain
DRF. Run: ``python -m bench http``.

Requests per second of ``PATCH /<route>/<pk>/`` changing one field, through Django's
test client (``APIClient``, ``force_authenticate``: the whole request and middleware
stack, no network), one client, rounds alternating, each candidate on its own row of
the same shape (the test app's ``Book``, ``VersionedMixin`` + ``OccupiableMixin``):

- plain DRF ``ModelViewSet`` (the reference; one client, so nothing conflicts);
- the floor of a Redis lock: plain DRF plus two raw Redis round trips around the save
  (``SET NX PX``, ``DEL``), needing nothing of occupy;
- ``ConditionalMixin``, sending ``If-Match`` with the ETag of its last answer.
  Target: ≥ 0.9× plain;
- ``OccupyViewMixin`` (conditional, and every write holds the object's key by
  ``OccupiedWritesMixin``) with the Redis backend. Target: ≥ 1/1.05 of the floor;
- the same with the database backend on PostgreSQL. Target: ≥ 0.75× plain.

Also the CPU time each request costs in this process (client and server are both
here; the database's and Redis's own CPU is not counted), median of rounds: on a
shared machine, rates swing with the neighbours' load and CPU per request hardly does.
The rows are deleted afterwards, and the Redis keys with them.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable

from bench.common import alternate, print_table, setup_django

OPS = 200
ROUNDS = 11


def print_machine() -> None:
    """Print what the figures were measured on."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        server = cursor.fetchone()[0]
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, PostgreSQL {server}"
    )


def persistent_connections() -> None:
    """Keep every database connection open between requests (``CONN_MAX_AGE = None``),
    occupy's own included: they are made as their database is configured.

    Django's test client keeps the app's connection open whatever ``CONN_MAX_AGE`` says
    (it disconnects ``close_old_connections`` around each request), but occupy closes
    its own at the end of each request as the setting says (``0`` in the test settings):
    without this, the database backend's candidate would open a session per request
    (connect, authenticate, set the time zone) while plain DRF opens none.
    """
    from django.db import connections

    for alias in connections:
        connections.settings[alias]["CONN_MAX_AGE"] = None


def patcher(route: str, pk: int, user: object) -> Callable[[int], None]:
    """Return ``fn(n)``: ``n`` PATCHes of one field of row ``pk`` through ``route``,
    with ``If-Match`` from the previous answer when the route gives ETags."""
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(user)
    url = f"/{route}/{pk}/"
    etag = client.get(url).headers.get("ETag")
    flip = {"a": "b", "b": "a"}
    status = ["a"]

    def run(n: int) -> None:
        nonlocal etag
        for _ in range(n):
            status[0] = flip[status[0]]
            headers = {} if etag is None else {"HTTP_IF_MATCH": etag}
            response = client.patch(url, {"status": status[0]}, format="json", **headers)
            if response.status_code != 200:
                raise AssertionError(
                    f"PATCH {url} answered {response.status_code}: {response.content[:300]!r}"
                )
            etag = response.headers.get("ETag")

    return run


def cpu_timed(fn: Callable[[int], None], ops: int, cpu: list[float]) -> Callable[[int], None]:
    """Return ``fn``, appending the process CPU seconds per op of each timed round (the
    calls with ``ops`` operations, not the warm-up) to ``cpu``."""

    def run(n: int) -> None:
        started = time.process_time()
        fn(n)
        if n == ops:
            cpu.append((time.process_time() - started) / n)

    return run


def main() -> None:
    """Print PATCH rates of plain DRF and occupy's mixins on PostgreSQL."""
    from django.core.exceptions import ImproperlyConfigured
    from django.db import OperationalError

    try:
        setup_django("postgresql")
    except (ImproperlyConfigured, OperationalError) as e:  # no server, or no database
        print(
            f"\n## PATCH through DRF: skipped (PostgreSQL: {e}; `make databases` "
            "creates the database)"
        )
        return
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.test.utils import override_settings

    from bench.http_api import ROUTES
    from occupy.backends import get_backend
    from tests.testapp.models import Book

    persistent_connections()
    print_machine()
    routes = dict(ROUTES)
    if "redis" not in settings.OCCUPY["BACKENDS"]:
        print(f"(the Redis candidates are skipped: {settings.SKIPS.get('redis')})")
        del routes["redis"], routes["floor"]
    user, _ = User.objects.get_or_create(username="bench-http", defaults={"is_superuser": True})
    books = {route: Book.objects.create(name=f"bench-http-{route}", status="a") for route in routes}
    names = {
        "plain": "plain DRF ModelViewSet",
        "floor": "plain DRF + 2 raw Redis round trips",
        "conditional": "ConditionalMixin (If-Match)",
        "txfloor": "ConditionalMixin + a raw transaction lock",
        "redis": "OccupyViewMixin, Redis backend",
        "database": "OccupyViewMixin, database backend",
    }
    cpu: dict[str, list[float]] = {names[route]: [] for route in routes}
    try:
        with override_settings(ROOT_URLCONF="bench.http_api", DEBUG=False):
            results = alternate(
                {
                    names[route]: cpu_timed(
                        patcher(route, books[route].pk, user), OPS, cpu[names[route]]
                    )
                    for route in routes
                },
                ops=OPS,
                rounds=ROUNDS,
            )
    finally:
        Book.objects.filter(pk__in=[b.pk for b in books.values()]).delete()
        user.delete()
        if "redis" in routes:  # the key's fence counter outlives its lock
            from django_redis import get_redis_connection

            backend = get_backend("redis")
            get_redis_connection("redis").delete(*backend.keys(books["redis"].occupy_key))
    for result in results:
        result.unit = "req/s"
    print_table(
        "PATCH of one field through DRF, PostgreSQL, test client (one client)",
        results,
        reference=names["plain"],
        target="ConditionalMixin ≥ 0.9×, OccupyViewMixin on the database ≥ 0.75× "
        "plain DRF; OccupyViewMixin on Redis ≥ 1/1.05 of the floor",
    )
    by_name = {result.name: result for result in results}
    if "redis" in routes:
        floor, redis = by_name[names["floor"]], by_name[names["redis"]]
        ratios = redis.ratios(floor)
        print(
            f"  OccupyViewMixin on Redis / the floor: {redis.ratio(floor):.2f}× "
            f"({min(ratios):.2f}–{max(ratios):.2f}; target ≥ {1 / 1.05:.2f}×)"
        )
    plain_cpu = statistics.median(cpu[names["plain"]])
    print("  CPU per request in this process (median of rounds; × plain by CPU):")
    for name, seconds in cpu.items():
        median = statistics.median(seconds)
        print(f"    {name.ljust(34)}  {median * 1e6:8,.0f} µs  {plain_cpu / median:5.2f}×")


if __name__ == "__main__":
    main()
