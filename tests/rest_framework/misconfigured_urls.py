"""A URLconf of occupy views, each with one attribute misconfigured (the checks and the
answers of tests/rest_framework/test_misconfigured.py), beside odd patterns the view
check must walk past: a function view, a Django class-based view, an include whose
module does not exist, a view passed its attribute by ``as_view()``."""

from django.http import HttpResponse
from django.urls import URLResolver, include, path
from django.urls.resolvers import RegexPattern
from django.views.generic import RedirectView
from rest_framework import routers

from tests.testapp.api import DocumentViewSet

#: Each misconfigured view's name, its one attribute, and the check id it gets.
MISCONFIGURED = {
    "UnknownBackend": ({"occupy_backend": "nope"}, "occupy.E302"),
    "OtherStore": ({"occupy_backend": "files"}, "occupy.W303"),
    "ZeroWriteTtl": ({"write_ttl": 0}, "occupy.E304"),
    "TextWriteTtl": ({"write_ttl": "30"}, "occupy.E304"),
    "NegativeWriteWait": ({"write_wait": -1}, "occupy.E304"),
    "HourWriteWait": ({"write_wait": 3600}, "occupy.E304"),
    "TextLeaseTtl": ({"lease_ttl": "x"}, "occupy.E304"),
    "ZeroLeaseTtl": ({"lease_ttl": 0}, "occupy.E304"),
    "NegativeLeaseTtlMax": ({"lease_ttl_max": -5}, "occupy.E304"),
    "LeaseTtlAboveMax": ({"lease_ttl": 900}, "occupy.E304"),
}


def plain(request):
    return HttpResponse("plain")


def odd(request):
    return HttpResponse("odd")


odd.cls = "not a class"  # type: ignore[attr-defined]

router = routers.SimpleRouter()
for _name, (_attrs, _id) in MISCONFIGURED.items():
    router.register(_name.lower(), type(_name, (DocumentViewSet,), _attrs), basename=_name.lower())

urlpatterns = [
    path("plain/", plain),
    path("odd/", odd),
    path("redirect/", RedirectView.as_view(url="/plain/")),
    URLResolver(RegexPattern(r"^gone/"), "tests.rest_framework.no_such_urls"),
    path(
        "given/<int:pk>/",
        DocumentViewSet.as_view({"patch": "partial_update"}, occupy_backend="nowhere"),
    ),
    path("api/", include(router.urls)),
]
