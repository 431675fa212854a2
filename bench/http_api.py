"""The routes ``python -m bench http`` times: one viewset per candidate, all on the test
app's ``Book`` (``VersionedMixin`` + ``OccupiableMixin``), with the same fields and
permissions. Imported once Django is set up (it is the benchmark's ``ROOT_URLCONF``)."""

from __future__ import annotations

from typing import Any

from rest_framework import permissions, routers, serializers, viewsets

from occupy.rest_framework import ConditionalMixin, OccupyModelSerializerMixin, OccupyViewMixin
from tests.testapp.models import Book

FIELDS = ["id", "name", "status", "note"]


class PlainSerializer(serializers.ModelSerializer):
    class Meta:
        model = Book
        fields = FIELDS


class OccupySerializer(OccupyModelSerializerMixin, serializers.ModelSerializer):
    class Meta:
        model = Book
        fields = FIELDS


class PlainViewSet(viewsets.ModelViewSet):
    """Plain DRF: the reference (one client, so its unguarded write never conflicts)."""

    queryset = Book.objects.all()
    serializer_class = PlainSerializer
    permission_classes = [permissions.IsAuthenticated]


class FloorViewSet(PlainViewSet):
    """Plain DRF plus two raw Redis round trips around the save (``SET NX PX`` of the
    object's key, then ``DEL``): what any lock held in Redis for a write costs at
    least, the floor of ``OccupyViewMixin`` on Redis."""

    def perform_update(self, serializer: Any) -> None:
        from django_redis import get_redis_connection

        redis = get_redis_connection("redis")
        key = f"bench-floor:{serializer.instance.pk}"
        if not redis.set(key, "bench", nx=True, px=30_000):
            raise AssertionError(f"{key} is held: the floor's one client conflicts")
        try:
            super().perform_update(serializer)
        finally:
            redis.delete(key)


class ConditionalViewSet(ConditionalMixin, PlainViewSet):
    """``If-Match`` into the guarded UPDATE."""

    serializer_class = OccupySerializer


class TransactionFloorViewSet(ConditionalViewSet):
    """``ConditionalMixin`` with its save in a transaction that first takes a raw
    transaction-scoped advisory lock on the object (one ``SELECT``): what holding a key
    for a write's own transaction costs at least, the floor of ``OccupyViewMixin`` on
    the database backend."""

    def perform_update(self, serializer: Any) -> None:
        from django.db import connection, transaction

        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [serializer.instance.pk])
            super().perform_update(serializer)


class RedisViewSet(OccupyViewMixin, PlainViewSet):
    """Conditional, and each write holds the object's key on the Redis backend."""

    serializer_class = OccupySerializer
    occupy_backend = "redis"


class DatabaseViewSet(RedisViewSet):
    """The same with the key on the database backend, in the database the object is
    written to (PostgreSQL), as a project with one database has it: a write without a
    lease is held by its own transaction (``scope="transaction"``), edit leases are
    claims in the lock table."""

    occupy_backend = "default"


ROUTES = {
    "plain": PlainViewSet,
    "floor": FloorViewSet,
    "conditional": ConditionalViewSet,
    "txfloor": TransactionFloorViewSet,
    "redis": RedisViewSet,
    "database": DatabaseViewSet,
}

router = routers.SimpleRouter()
for prefix, viewset in ROUTES.items():
    router.register(prefix, viewset, basename=prefix)
urlpatterns = router.urls
