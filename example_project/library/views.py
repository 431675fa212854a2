"""The library API: plain DRF viewsets (the DRF mixins of occupy come in a later issue)."""

from rest_framework import viewsets

from example_project.library.models import Book, Task
from example_project.library.serializers import BookSerializer, TaskSerializer


class BookViewSet(viewsets.ModelViewSet):
    queryset = Book.objects.all()
    serializer_class = BookSerializer


class TaskViewSet(viewsets.ModelViewSet):
    queryset = Task.objects.all()
    serializer_class = TaskSerializer
