"""A model whose rows are locked."""

from django.db import models


class Item(models.Model):
    """Something to sell."""

    name = models.CharField(max_length=50)

    def __str__(self) -> str:
        return self.name
