"""Models the tests lock and write."""

from django.db import models


class Counter(models.Model):
    """A row several processes increment under a lock (the lost-update probe)."""

    name = models.CharField(max_length=50, unique=True)
    value = models.IntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name}={self.value}"
