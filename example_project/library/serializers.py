"""DRF serializers of the library API."""

from rest_framework import serializers

from example_project.library.models import Book, Task


class BookSerializer(serializers.ModelSerializer):
    class Meta:
        model = Book
        fields = ["id", "name", "status", "borrow_count", "stock", "tags"]


class TaskSerializer(serializers.ModelSerializer):
    class Meta:
        model = Task
        fields = ["id", "title", "category", "priority", "done", "created_at"]
