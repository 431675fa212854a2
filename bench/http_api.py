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


class RedisViewSet(OccupyViewMixin, PlainViewSet):
    """Conditional, and each write holds the object's key on the Redis backend."""

    serializer_class = OccupySerializer
    occupy_backend = "redis"


class DatabaseViewSet(RedisViewSet):
    """The same with the key on the database backend (PostgreSQL)."""

    occupy_backend = "db-postgresql"


ROUTES = {
    "plain": PlainViewSet,
    "floor": FloorViewSet,
    "conditional": ConditionalViewSet,
    "redis": RedisViewSet,
    "database": DatabaseViewSet,
}

router = routers.SimpleRouter()
for prefix, viewset in ROUTES.items():
    router.register(prefix, viewset, basename=prefix)
urlpatterns = router.urls
