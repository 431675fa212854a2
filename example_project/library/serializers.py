"""DRF serializers of the library API: each adds ``version`` and saves only the fields
a request sent (``OccupyModelSerializerMixin``)."""

from rest_framework import serializers

from example_project.library.models import Book, Task
from occupy.rest_framework import OccupyModelSerializerMixin

# The ranges of the integer columns, said here because Django 4.2 knows none on SQLite
# (5.0+ does): without them a number out of range reaches the database, a 500.
_INT64 = {"min_value": -(2**63), "max_value": 2**63 - 1}
_COUNT = {"min_value": 0, "max_value": 2**63 - 1}


class BookSerializer(OccupyModelSerializerMixin, serializers.ModelSerializer):
    class Meta:
        model = Book
        fields = ["id", "name", "status", "borrow_count", "stock", "tags"]
        extra_kwargs = {"borrow_count": _COUNT, "stock": _INT64}


class TaskSerializer(OccupyModelSerializerMixin, serializers.ModelSerializer):
    class Meta:
        model = Task
        fields = ["id", "title", "category", "priority", "done", "created_at"]
        extra_kwargs = {"priority": _INT64}
