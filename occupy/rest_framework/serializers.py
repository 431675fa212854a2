"""Serializers of occupy's DRF integration: the version field, a model serializer mixin
that writes only what the request sent, and the lease endpoints' body."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from rest_framework import serializers
from rest_framework.utils import model_meta

from occupy.http import utc_text
from occupy.versions import get_version_name

__all__ = [
    "HolderSerializer",
    "LeaseReleaseSerializer",
    "LeaseRequestSerializer",
    "LeaseSerializer",
    "LeaseTakeoverSerializer",
    "LeaseTokenSerializer",
    "OccupyErrorSerializer",
    "OccupyModelSerializerMixin",
    "UTCDateTimeField",
    "VersionField",
]

if TYPE_CHECKING:
    _ModelSerializer = serializers.ModelSerializer[Any]
else:
    _ModelSerializer = object


class VersionField(serializers.IntegerField):
    """The row's version: read as the object's current version, written as the version
    the client read (a precondition: a stale one is refused with 409)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", 1)
        # VersionedMixin's column is a PositiveIntegerField: a larger number would reach
        # the database (an overflow there, a 500) instead of being refused with 400.
        kwargs.setdefault("max_value", 2**31 - 1)
        kwargs.setdefault("required", False)
        kwargs.setdefault(
            "help_text",
            "The version you read (the ETag without quotes). "
            "Send it back to write: a stale one is refused.",
        )
        super().__init__(**kwargs)


class OccupyModelSerializerMixin(_ModelSerializer):
    """For a ``ModelSerializer`` of a ``VersionedMixin`` model: adds the version field
    (``version``, or the model's ``version_field_name``) as a :class:`VersionField`,
    and saves an update with ``update_fields`` of exactly the fields the request sent,
    guarded by the version it carries."""

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        """Return the fields, with the version field as a :class:`VersionField`."""
        fields = super().get_fields()
        fields[self._version_name()] = VersionField()
        return fields

    def _version_name(self) -> str:
        return get_version_name(self.Meta.model)

    def create(self, validated_data: dict[str, Any]) -> Any:
        """Create the object at version 1, whatever ``version`` the request sent (a new
        object has no version anyone read)."""
        validated_data.pop(self._version_name(), None)
        return super().create(validated_data)

    def update(self, instance: Any, validated_data: dict[str, Any]) -> Any:
        """Apply what the request sent and save those fields only (many-to-many ones
        after the save, as DRF does); the version sent is the save's precondition."""
        version = validated_data.pop(self._version_name(), None)
        if version is not None and instance.expected_version is None:
            instance.expect_version(version)  # If-Match, when there was one, comes first
        info = model_meta.get_field_info(instance)
        many = []
        written = []
        for attr, value in validated_data.items():
            if attr in info.relations and info.relations[attr].to_many:
                many.append((attr, value))
            else:
                setattr(instance, attr, value)
                written.append(attr)
        concrete = {f.name for f in instance._meta.concrete_fields}
        update_fields = [name for name in written if name in concrete]
        if update_fields:
            instance.save(update_fields=update_fields)
        for attr, value in many:
            getattr(instance, attr).set(value)
        return instance


class UTCDateTimeField(serializers.DateTimeField):
    """A date written in UTC with ``Z``, as every date of occupy's HTTP answers is
    (:func:`occupy.http.utc_text`), whatever the project's time zone or
    ``DATETIME_FORMAT``: a lease's ``POST`` and ``GET`` name its expiry alike."""

    def to_representation(self, value: datetime | None) -> str | None:  # type: ignore[override]
        """Return ``value`` as :func:`~occupy.http.utc_text` writes it."""
        return None if value is None else utc_text(value)


class LeaseSerializer(serializers.Serializer[Any]):
    """What the lease endpoints answer about a lease (the token is added only for its
    holder's own acquire)."""

    key = serializers.CharField()
    expires_at = UTCDateTimeField()
    ttl = serializers.FloatField(
        help_text="Seconds the lease has from the answer on (a renew never shortens it)."
    )
    fence = serializers.IntegerField()


class LeaseTokenSerializer(LeaseSerializer):
    """A lease as its holder's own acquire or takeover answers it: with the token."""

    token = serializers.CharField(
        help_text="Send it in the Occupy-Lease header to renew, release, or write under the lease."
    )


class LeaseRequestSerializer(serializers.Serializer[Any]):
    """What a lease request may send (the browsable API's form on the lease endpoints;
    the view reads and bounds ``ttl`` itself)."""

    ttl = serializers.FloatField(
        required=False,
        min_value=1,
        help_text="Seconds the lease lives (from 1 to the "
        "longest lease); a renew without it keeps "
        "the lease's own.",
    )


class LeaseReleaseSerializer(serializers.Serializer[Any]):
    """What ``…/lease/release/`` takes: the lease's token as a form field, since
    ``navigator.sendBeacon`` cannot send headers."""

    token = serializers.CharField(help_text="The token of the lease to release.")


class HolderSerializer(serializers.Serializer[Any]):
    """Who holds an object, as clients see it: never a token or an email."""

    owner_display = serializers.CharField()
    since = UTCDateTimeField(allow_null=True)
    expires_at = UTCDateTimeField()


class LeaseTakeoverSerializer(LeaseTokenSerializer):
    """A takeover's answer: the new lease with its token, and the holder it replaced
    (``null`` when the object was free)."""

    replaced = HolderSerializer(allow_null=True, help_text="Who held the lease before.")


class HolderBodySerializer(serializers.Serializer[Any]):
    """The lease endpoint's ``GET``: the holder, or ``null``."""

    holder = HolderSerializer(allow_null=True)


class OccupyErrorSerializer(serializers.Serializer[Any]):
    """The body of every answer of occupy's HTTP contract (``occupy.http``); members
    that do not apply to a condition are absent."""

    detail = serializers.CharField()
    code = serializers.CharField()
    holder = HolderSerializer(required=False, allow_null=True)
    retry_after = serializers.IntegerField(required=False)
    current_version = serializers.IntegerField(required=False, allow_null=True)
    # A body member named like Serializer.fields: DRF's metaclass moves declared fields
    # out of the class, so the property is not shadowed.
    fields = serializers.ListField(  # type: ignore[assignment]
        child=serializers.CharField(), required=False
    )
    accepted = serializers.ListField(child=serializers.CharField(), required=False)
