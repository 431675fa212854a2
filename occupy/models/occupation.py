"""The ``Occupation`` model: one row per claim on a key, pending while its owner queues."""

from __future__ import annotations

from typing import Any

from django.contrib.contenttypes.fields import GenericForeignKey
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.db.models import F, Q
from django.utils.translation import gettext_lazy as _

from occupy.models.keys import is_composite, parse_pk_text, pk_text

__all__ = ["ObjectKeyRelation", "Occupation"]


class ObjectKeyRelation(GenericForeignKey):
    """A ``GenericForeignKey`` whose object id is the text form of the row's key
    (:func:`~occupy.models.keys.pk_text`), so that it also reaches rows with a
    composite primary key, which Django's own does not."""

    def __get__(self, instance: Any, cls: Any = None) -> Any:
        """Return the row the claim names (``None`` if there is none); a composite
        primary key is read back from its text form."""
        if instance is None:
            return self
        model = self._composite_model(instance)
        if model is None:
            return super().__get__(instance, cls)
        text = getattr(instance, self.fk_field)
        cached = self.get_cached_value(instance, default=None)
        if cached is not None and type(cached) is model and pk_text(model, cached.pk) == text:
            return cached
        try:
            pk = parse_pk_text(model, text)
        except ValueError:
            found = None
        else:
            found = model._base_manager.using(instance._state.db).filter(pk=pk).first()
        self.set_cached_value(instance, found)
        return found

    def __set__(self, instance: Any, value: Any) -> None:
        """Point the claim at ``value``, writing a composite key in its text form."""
        super().__set__(instance, value)
        if value is not None and is_composite(type(value)):
            setattr(instance, self.fk_field, pk_text(type(value), value.pk))

    def _composite_model(self, instance: Any) -> type[models.Model] | None:
        ct_id = getattr(instance, self.model._meta.get_field(self.ct_field).attname, None)
        if ct_id is None:
            return None
        model = self.get_content_type(id=ct_id, using=instance._state.db).model_class()
        return model if model is not None and is_composite(model) else None


class Occupation(models.Model):
    """A claim on a lock key, ``pending`` while its owner queues, ``using`` once granted.

    ``slot`` holds the key's digest for the one granted claim and is NULL for queued
    ones; its unique index is how the database itself guarantees at most one ``using``
    claim per key, whatever the protocol above it does. ``digest`` (SHA-256 of the key)
    is what rows are looked up by, so keys compare byte for byte on every database
    (MySQL's default collations would fold case and trailing spaces). An expired claim
    (``expires_at`` in the past by the database's clock) counts as absent everywhere.
    """

    class State(models.TextChoices):
        PENDING = "pending", _("pending")
        USING = "using", _("using")

    id = models.BigAutoField(primary_key=True)
    key = models.CharField(_("key"), max_length=255)
    # Indexed, and slot unique, in Meta: on PostgreSQL, db_index and unique on a
    # CharField add a second, "_like" index that only LIKE queries use.
    digest = models.CharField(max_length=64, editable=False)
    # NULL, not "", for queued claims: unique indexes allow many NULLs on every vendor.
    slot = models.CharField(max_length=64, null=True, editable=False)  # noqa: DJ001
    content_type = models.ForeignKey(
        ContentType, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    object_id = models.CharField(  # noqa: DJ001 - NULL with content_type, as Django's own
        _("object id"), max_length=255, null=True, blank=True
    )
    content_object = ObjectKeyRelation("content_type", "object_id")
    owner = models.CharField(_("owner"), max_length=255)
    token = models.CharField(max_length=64, editable=False)
    state = models.CharField(_("state"), max_length=8, choices=State.choices)
    fence = models.BigIntegerField(_("fence"), null=True, blank=True)
    depth = models.PositiveIntegerField(_("depth"), default=1)
    expires_at = models.DateTimeField(_("expires at"), db_index=True)
    created_at = models.DateTimeField(_("created at"))

    class Meta:
        db_table = "occupy_occupation"
        verbose_name = _("occupation")
        verbose_name_plural = _("occupations")
        ordering = ["key", "id"]
        permissions = [("force_release_occupation", "Can force-release an occupation")]
        indexes = [models.Index(fields=["digest"], name="occupy_occupation_digest")]
        constraints = [
            models.UniqueConstraint(fields=["slot"], name="occupy_one_holder_per_key"),
            models.CheckConstraint(
                condition=Q(state="using", slot=F("digest"), fence__isnull=False)
                | Q(state="pending", slot__isnull=True),
                name="occupy_using_holds_the_slot",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.state} by {self.owner})"
