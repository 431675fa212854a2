"""The library API: DRF viewsets with occupy's HTTP contract (``OccupyViewMixin``).

Reads are open to anyone; writes need a signed-in user (session or HTTP Basic) with the
model's permissions. A write must be conditional (``If-Match`` with the ETag of a GET,
or the body's ``version``: 428 otherwise), never lands inside someone else's edit lease
(423 with ``Retry-After``), and the edit leases live under ``…/{pk}/lease/``.
"""

from django.views.generic import TemplateView
from rest_framework import viewsets
from rest_framework.permissions import DjangoModelPermissionsOrAnonReadOnly

from example_project.library.models import Book, Task
from example_project.library.serializers import BookSerializer, TaskSerializer
from occupy.rest_framework import OccupyViewMixin

#: Ids in URLs: at most 18 digits, so a longer one is 404 at the router instead of an
#: integer SQLite cannot take (Django 5.0+ answers that lookup itself, 4.2 does not).
ID = r"[0-9]{1,18}"


class BookViewSet(OccupyViewMixin, viewsets.ModelViewSet):
    queryset = Book.objects.order_by("pk")
    serializer_class = BookSerializer
    permission_classes = [DjangoModelPermissionsOrAnonReadOnly]
    lookup_value_regex = ID


class TaskViewSet(OccupyViewMixin, viewsets.ModelViewSet):
    queryset = Task.objects.all()
    serializer_class = TaskSerializer
    permission_classes = [DjangoModelPermissionsOrAnonReadOnly]
    lookup_value_regex = ID


class IndexView(TemplateView):
    """The front page: links to the API, its schema and docs, and the admin."""

    template_name = "library/index.html"
