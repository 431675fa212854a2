"""occupy.E301: occupy's admin and DRF views on a model with a composite primary key,
which Django's admin and DRF do not support, fail ``manage.py check`` at startup."""

from __future__ import annotations

from django.contrib import admin
from django.core.checks import Tags, run_checks
from django.test import override_settings
from django.urls import include, path
from rest_framework import routers, serializers, viewsets

from occupy.admin import VersionedAdminMixin, VersionedInlineMixin
from occupy.rest_framework import OccupyViewMixin
from tests.testapp.models import Book, Seat


class SeatSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = Seat
        fields = ["show", "number", "sold_to"]


class SeatViewSet(OccupyViewMixin, viewsets.ModelViewSet):  # type: ignore[type-arg]
    queryset = Seat.objects.all()
    serializer_class = SeatSerializer


class PlainSeatViewSet(viewsets.ModelViewSet):  # type: ignore[type-arg]
    """Not occupy's: none of its checks' business."""

    queryset = Seat.objects.all()
    serializer_class = SeatSerializer


class BookViewSet(OccupyViewMixin, viewsets.ModelViewSet):  # type: ignore[type-arg]
    queryset = Book.objects.all()
    serializer_class = SeatSerializer


router = routers.DefaultRouter()
router.register("seats", SeatViewSet, basename="seat")
router.register("plain-seats", PlainSeatViewSet, basename="plain-seat")
router.register("books", BookViewSet, basename="book")
urlpatterns = [path("api/", include(router.urls))]


def e301(messages: list) -> list:
    return [m for m in messages if m.id == "occupy.E301"]


@override_settings(ROOT_URLCONF=__name__)
def test_an_occupy_viewset_on_a_composite_key_is_e301() -> None:
    errors = e301(run_checks(tags=[Tags.urls]))
    assert [e.obj for e in errors] == [SeatViewSet]
    assert "testapp.Seat" in errors[0].msg and "Django REST framework" in errors[0].msg
    assert "https://" in errors[0].hint


def test_the_test_urlconf_has_no_e301() -> None:
    assert e301(run_checks(tags=[Tags.urls])) == []


def test_a_versioned_inline_of_a_composite_key_is_e301() -> None:
    class SeatInline(VersionedInlineMixin, admin.TabularInline):  # type: ignore[type-arg]
        model = Seat

    class BookAdmin(VersionedAdminMixin, admin.ModelAdmin):  # type: ignore[type-arg]
        inlines = [SeatInline]

    errors = e301(BookAdmin(Book, admin.AdminSite()).check())
    assert [e.obj for e in errors] == [SeatInline]
    assert "Django's admin" in errors[0].msg
