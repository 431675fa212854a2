"""The shop's models: a book two people edit, a task pool."""

from django.db import models
from occupy.models import OccupiableMixin, OccupyManager, VersionedMixin


class Book(VersionedMixin, OccupiableMixin, models.Model):
    name = models.CharField(max_length=100)
    status = models.CharField(max_length=20, default="free")

    objects = OccupyManager()

    def __str__(self) -> str:
        return self.name


class Task(OccupiableMixin, models.Model):
    title = models.CharField(max_length=100)
    done = models.BooleanField(default=False)

    def __str__(self) -> str:
        return self.title


class Item(models.Model):
    """Something to sell, locked by its key while it is sold (plain occupy.lock)."""

    name = models.CharField(max_length=50)

    def __str__(self) -> str:
        return self.name
