"""A sync view and an async view that lock an item."""

import occupy
from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse
from django.urls import path


def sell(request: HttpRequest, pk: int) -> HttpResponse:
    """Lock the item while it is sold."""
    with occupy.lock(f"shop.item:{pk}", ttl=30):
        return HttpResponse("sold")


async def asell(request: HttpRequest, pk: int) -> HttpResponse:
    """Lock the item from an async view, and read it from a thread."""
    async with occupy.lock(f"shop.item:{pk}", ttl=30):
        await sync_to_async(occupy.holder)(f"shop.item:{pk}")
        return HttpResponse("sold")


urlpatterns = [path("sell/<int:pk>/", sell), path("asell/<int:pk>/", asell)]
