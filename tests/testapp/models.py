"""Models the tests lock and write."""

import uuid
from typing import ClassVar

from django.db import models
from django.utils import timezone

from occupy.models import (
    FencedMixin,
    OccupiableMixin,
    OccupiableQuerySetMixin,
    OccupyManager,
    RowLockQuerySetMixin,
    VersionedMixin,
)


class Counter(models.Model):
    """A row several processes increment under a lock (the lost-update probe)."""

    name = models.CharField(max_length=50, unique=True)
    value = models.IntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name}={self.value}"


class Book(VersionedMixin, OccupiableMixin, models.Model):
    """Seed 000's book: a student changes ``status`` while an admin changes ``name``."""

    name = models.CharField(max_length=100)
    status = models.CharField(max_length=20, default="use")
    note = models.CharField(max_length=100, blank=True, default="")
    tags = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return self.name


class StrictBook(VersionedMixin, models.Model):
    """A book whose saves conflict on any concurrent change."""

    version_policy = "strict"

    name = models.CharField(max_length=100)
    status = models.CharField(max_length=20, default="use")

    def __str__(self) -> str:
        return self.name


class EBook(Book):
    """Multi-table inheritance: ``url`` lives in a table of its own."""

    url = models.CharField(max_length=200, blank=True, default="")


class ProxyBook(Book):
    """A proxy: the same rows and key as ``Book``."""

    class Meta:
        proxy = True


class UUIDBook(VersionedMixin, OccupiableMixin, models.Model):
    """A versioned, occupiable model with a UUID primary key."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    name = models.CharField(max_length=100)

    def __str__(self) -> str:
        return self.name


class Shelf(OccupiableMixin, models.Model):
    """An occupiable model with a string primary key."""

    code = models.CharField(primary_key=True, max_length=40)
    name = models.CharField(max_length=100, blank=True, default="")

    def __str__(self) -> str:
        return self.code


class Scroll(OccupiableMixin, models.Model):
    """An occupiable model whose string primary key is too long for a whole lock key
    (its keys end with a digest; see ``occupy.keys``)."""

    code = models.CharField(primary_key=True, max_length=250)
    name = models.CharField(max_length=100, blank=True, default="")

    def __str__(self) -> str:
        return self.code[:40]


class GoodsQuerySet(
    RowLockQuerySetMixin["Goods"], OccupiableQuerySetMixin["Goods"], models.QuerySet["Goods"]
):
    """Two concerns combined in a queryset of one's own: row locks and occupations."""

    def cheap(self) -> "GoodsQuerySet":
        """Return the goods of which fewer than five are left."""
        return self.filter(count__lt=5)


GoodsManager = OccupyManager.from_queryset(GoodsQuerySet)


class Goods(OccupiableMixin, models.Model):
    """Seed 002's stock counter, decremented under a row lock."""

    name = models.CharField(max_length=50)
    count = models.IntegerField(default=0)

    # From the manager OccupiableMixin installs, so that it is one for type checkers too.
    objects: ClassVar[GoodsManager["Goods"]] = GoodsManager()

    def __str__(self) -> str:
        return f"{self.name}: {self.count}"


class Task(OccupiableMixin, models.Model):
    """A task pool; ``worked_by`` is where tests record who works on a task (a field named
    ``holder`` would hide ``OccupiableMixin.holder``, deprecated for ``get_holder()``)."""

    title = models.CharField(max_length=100)
    priority = models.IntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    done = models.BooleanField(default=False)
    worked_by = models.CharField(max_length=100, blank=True, default="")

    def __str__(self) -> str:
        return self.title


class Document(VersionedMixin, FencedMixin, OccupiableMixin, models.Model):
    """Fenced and versioned: a holder paused past its lease must not write."""

    body = models.TextField(blank=True, default="")

    def __str__(self) -> str:
        return self.body[:20]


class Page(FencedMixin, models.Model):
    """Fenced only, and every save must carry a lease."""

    fence_required = True

    body = models.TextField(blank=True, default="")

    def __str__(self) -> str:
        return self.body[:20]


class Label(VersionedMixin, FencedMixin, OccupiableMixin, models.Model):
    """Versioned, fenced and occupiable, with a string primary key (the API tests)."""

    code = models.CharField(primary_key=True, max_length=40)
    text = models.CharField(max_length=100, blank=True, default="")

    def __str__(self) -> str:
        return self.code


class Chapter(VersionedMixin, models.Model):
    """A versioned row edited inline on its ``UUIDBook``'s change form."""

    book = models.ForeignKey(UUIDBook, on_delete=models.CASCADE, related_name="chapters")
    title = models.CharField(max_length=100)

    def __str__(self) -> str:
        return self.title


class LongKeyNote(VersionedMixin, FencedMixin, OccupiableMixin, models.Model):
    """A string primary key of up to 255 characters: longer than a lock key may be once
    the model's label is put in front (the HTTP layer must not answer 500 for it)."""

    slug = models.CharField(primary_key=True, max_length=255)
    text = models.CharField(max_length=100, blank=True, default="")

    def __str__(self) -> str:
        return self.slug


class Seat(VersionedMixin, FencedMixin, OccupiableMixin, models.Model):
    """A composite primary key (show, number): versioned, fenced, occupiable, a pool."""

    pk = models.CompositePrimaryKey("show", "number")
    show = models.CharField(max_length=40)
    number = models.IntegerField()
    sold_to = models.CharField(max_length=100, blank=True, default="")

    def __str__(self) -> str:
        return f"{self.show} #{self.number}"


class Manual(VersionedMixin, OccupiableMixin, models.Model):
    """A versioned model whose version field has another name (``revision``), as
    django-concurrency's users name theirs, and whose own ``version`` is no counter (the
    software version the manual describes): occupy reads and bumps ``revision`` only."""

    version_field_name = "revision"

    title = models.CharField(max_length=100)
    version = models.CharField(max_length=20, blank=True, default="")  # type: ignore[assignment]  # not the mixin's counter
    revision = models.PositiveIntegerField(default=1, editable=False)

    def __str__(self) -> str:
        return self.title
