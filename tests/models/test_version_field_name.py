"""VersionedMixin on a model whose version field has another name (``revision``, named
in ``version_field_name``) next to a ``version`` field of its own that is no counter."""

from __future__ import annotations

import pytest
from django.db import models
from django.test.utils import isolate_apps

import occupy
from occupy.models import VersionedMixin
from tests.testapp.models import Manual


def test_the_mixins_version_column_is_left_out_for_the_named_one() -> None:
    fields = {f.name: f for f in Manual._meta.concrete_fields}
    assert isinstance(fields["version"], models.CharField)  # the user's, not a counter
    assert isinstance(fields["revision"], models.PositiveIntegerField)
    assert [f.name for f in Manual._meta.concrete_fields].count("version") == 1
    assert Manual.check() == []


def test_saves_bump_and_compare_the_named_field(database: str) -> None:
    manual = Manual.objects.using(database).create(title="Guide", version="2.0")
    assert manual.revision == 1
    stale = Manual.objects.using(database).get(pk=manual.pk)
    manual.version = "2.1"  # the user's own field: written like any other
    manual.save()
    assert (manual.revision, manual.version) == (2, "2.1")
    stale.version = "3.0"  # another writer of the same field, from the old row
    with pytest.raises(occupy.VersionConflict):
        stale.save()
    stale = Manual.objects.using(database).get(pk=manual.pk)
    other = Manual.objects.using(database).get(pk=manual.pk)
    stale.title = "Handbook"
    stale.save()
    other.version = "2.2"  # a field nobody else wrote: the "fields" policy lets it in
    other.save()
    row = Manual.objects.using(database).get(pk=manual.pk)
    assert (row.title, row.version, row.revision) == ("Handbook", "2.2", 4)


def test_expect_version_and_delete_use_the_named_field(database: str) -> None:
    manual = Manual.objects.using(database).create(title="Guide")
    copy = Manual.objects.using(database).get(pk=manual.pk)
    copy.expect_version(1)
    assert copy.expected_version == 1 and copy.revision == 1
    manual.title = "Guide, 2nd ed."
    manual.save()  # revision 2
    copy.title = "x"
    with pytest.raises(occupy.VersionConflict):
        copy.save()
    stale = Manual.objects.using(database).get(pk=manual.pk)
    Manual.objects.using(database).filter(pk=manual.pk).update_versioned(title="y")
    with pytest.raises(occupy.VersionConflict, match=r"version 2, now 3"):
        stale.delete()
    Manual.objects.using(database).get(pk=manual.pk).delete()
    assert not Manual.objects.using(database).exists()


def test_update_versioned_bumps_the_named_field_and_refuses_it_only(database: str) -> None:
    manual = Manual.objects.using(database).create(title="Guide")
    rows = Manual.objects.using(database).filter(pk=manual.pk)
    assert rows.update_versioned(version="9.9") == 1  # the user's field may be set
    assert rows.values_list("version", "revision").get() == ("9.9", 2)
    with pytest.raises(ValueError, match="sets revision itself"):
        rows.update_versioned(revision=7)


@isolate_apps("tests.testapp")
def test_e202_names_a_missing_or_non_integer_version_field() -> None:
    class Missing(VersionedMixin, models.Model):  # noqa: DJ008 - never shown
        version_field_name = "rev"

        class Meta:
            app_label = "testapp"

    class Text(VersionedMixin, models.Model):  # noqa: DJ008 - never shown
        version_field_name = "rev"
        rev = models.CharField(max_length=10)

        class Meta:
            app_label = "testapp"

    class Named(VersionedMixin, models.Model):  # noqa: DJ008 - never shown
        version_field_name = "rev"
        rev = models.BigIntegerField(default=1, editable=False)

        class Meta:
            app_label = "testapp"

    (missing,) = [e for e in Missing.check() if e.id == "occupy.E202"]
    assert "Missing.version_field_name is 'rev', but the model has no such field" in missing.msg
    assert "rev = models.PositiveIntegerField" in missing.hint
    (text,) = [e for e in Text.check() if e.id == "occupy.E202"]
    assert "has a CharField" in text.msg
    assert [e for e in Named.check() if e.id == "occupy.E202"] == []
    assert not hasattr(Named, "version") or Named.version is None
    assert [f.name for f in Named._meta.concrete_fields] == ["id", "rev"]
