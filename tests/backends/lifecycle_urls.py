"""A view that takes a lock on the PostgreSQL backend and answers with the server
session it ran on (see test_db_lifecycle.py)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

import occupy
from occupy.backends import get_backend


@csrf_exempt
def lock(request: HttpRequest) -> HttpResponse:
    """Take and release a lock; answer with the backend's server session."""
    with occupy.lock("lifecycle-request", ttl=30, backend="db-postgresql"):
        session = get_backend("db-postgresql").store.execute("SELECT pg_backend_pid()", [])[1][0][0]
    return HttpResponse(str(session))


urlpatterns = [path("lock/", lock)]
