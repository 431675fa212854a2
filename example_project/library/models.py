"""The library's models: the ``Book`` students borrow and admins rename, and the ``Task``
editors take from a pool."""

from django.db import models

from occupy.models import OccupiableMixin, VersionedMixin


class Book(VersionedMixin, OccupiableMixin, models.Model):
    """A book students borrow and return (``status``) while admins rename it (``name``).

    Versioned: ``save()`` writes only the changed fields, guarded by their loaded
    values, so the student's and the admin's changes both survive.
    """

    class Status(models.TextChoices):
        FREE = "free", "free"
        IN_USE = "in use", "in use"

    name = models.CharField(max_length=200)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.FREE)
    borrow_count = models.PositiveIntegerField(
        default=0, help_text="How many times the book was borrowed."
    )
    stock = models.IntegerField(default=0, help_text="Copies on the shelf; each sale takes one.")
    tags = models.CharField(max_length=200, blank=True, default="")

    def __str__(self) -> str:
        return self.name


class Task(VersionedMixin, OccupiableMixin, models.Model):
    """An article in a pool of tasks, edited by one editor at a time
    (``Task.objects.claim(owner=…, ttl=…)``); versioned, so that the API's writes are
    conditional (``If-Match``) like the books'."""

    title = models.CharField(max_length=200)
    category = models.CharField(max_length=50, blank=True, default="")
    priority = models.IntegerField(default=0)
    done = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-priority", "created_at"]

    def __str__(self) -> str:
        return self.title
