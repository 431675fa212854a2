"""The routes of ``race_demo``'s HTTP rows: the site's own, plus the control, a plain
DRF viewset at ``/demo/plain-books/`` (kept out of the site's API and schema)."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.urls import include, path
from rest_framework import routers, serializers, viewsets
from rest_framework.permissions import DjangoModelPermissions

from example_project.library.models import Book
from example_project.urls import urlpatterns as site_urlpatterns


class WholeRowBookSerializer(serializers.ModelSerializer):
    """Plain DRF on a plain model: the update writes the whole row as loaded, with
    Django's ``Model.save`` (``Book`` is versioned, so this calls it by name to show what
    a model without occupy gets)."""

    class Meta:
        model = Book
        fields = ["id", "name", "borrow_count"]

    def update(self, instance: Any, validated_data: dict[str, Any]) -> Any:
        for name, value in validated_data.items():
            setattr(instance, name, value)
        models.Model.save(instance)
        return instance


class PlainBookViewSet(viewsets.ModelViewSet):
    """A plain DRF ``ModelViewSet``: no ETag, no precondition, no lock."""

    queryset = Book.objects.order_by("pk")
    serializer_class = WholeRowBookSerializer
    permission_classes = [DjangoModelPermissions]


router = routers.SimpleRouter()
router.register("plain-books", PlainBookViewSet, basename="plain-book")
urlpatterns = [path("demo/", include(router.urls)), *site_urlpatterns]
