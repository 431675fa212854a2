"""The ``Occupation`` model: one row per claim on a key, pending while its owner queues."""

from __future__ import annotations

from django.contrib.contenttypes.fields import GenericForeignKey
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.db.models import F, Q
from django.utils.translation import gettext_lazy as _

from occupy.models.keys import parse_pk_text
from occupy.validation import printable

__all__ = ["Occupation"]


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
    content_object = GenericForeignKey("content_type", "object_id")
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
        return f"{printable(self.key)} ({self.state} by {printable(self.owner)})"

    @property
    def target(self) -> models.Model | None:
        """Return the row this claim's key names, or ``None`` (no such row, or a key
        that names none). Unlike ``content_object`` (Django's ``GenericForeignKey``),
        it reaches rows with a composite primary key too: ``object_id`` is the key's
        text form (:func:`~occupy.models.keys.pk_text`), read back here."""
        if self.content_type_id is None or self.object_id is None:
            return None
        model = (
            ContentType.objects.db_manager(self._state.db)
            .get_for_id(self.content_type_id)
            .model_class()
        )
        if model is None:
            return None
        try:
            pk = parse_pk_text(model, self.object_id)
        except ValueError:
            return None
        found: models.Model | None = model._base_manager.using(self._state.db).filter(pk=pk).first()
        return found
