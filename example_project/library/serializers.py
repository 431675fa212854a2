"""DRF serializers of the library API: each adds ``version`` and saves only the fields
a request sent (``OccupyModelSerializerMixin``)."""

from rest_framework import serializers

from example_project.library.models import Book, Task
from occupy.rest_framework import OccupyModelSerializerMixin


class BookSerializer(OccupyModelSerializerMixin, serializers.ModelSerializer):
    class Meta:
        model = Book
        fields = ["id", "name", "status", "borrow_count", "stock", "tags"]


class TaskSerializer(OccupyModelSerializerMixin, serializers.ModelSerializer):
    class Meta:
        model = Task
        fields = ["id", "title", "category", "priority", "done", "created_at"]
