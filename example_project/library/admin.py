"""Admin for the library: books and tasks."""

from django.contrib import admin

from example_project.library.models import Book, Task


@admin.register(Book)
class BookAdmin(admin.ModelAdmin):
    list_display = ["name", "status", "borrow_count", "stock"]
    search_fields = ["name"]


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ["title", "category", "priority", "done", "created_at"]
    list_filter = ["done", "category"]
