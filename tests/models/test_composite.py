"""Composite primary keys (``CompositePrimaryKey("show", "number")``): the lock key's
text form and every model-side feature, on every database."""

from __future__ import annotations

import uuid

import pytest
from django.contrib import admin
from django.contrib.contenttypes.models import ContentType
from django.db import models

import occupy
from occupy.admin import OccupyStatusAdminMixin
from occupy.admin.status import annotate_occupation
from occupy.exceptions import FencedOut, Occupied, VersionConflict
from occupy.models import Occupation, object_key
from occupy.models.keys import parse_pk_text, pk_text
from tests.support import model_workers, multiproc
from tests.support.aliases import BACKEND_OF
from tests.testapp.models import Seat


class Ticket(models.Model):
    """Not migrated: only its key's text form is used (a UUID in a composite key)."""

    pk = models.CompositePrimaryKey("event", "code")
    event = models.UUIDField()
    code = models.CharField(max_length=20)

    class Meta:
        app_label = "testapp"
        managed = False

    def __str__(self) -> str:
        return self.code


def make_seats(database: str, show: str, count: int) -> list[Seat]:
    return [Seat.objects.using(database).create(show=show, number=n) for n in range(1, count + 1)]


# --- the key's text form ---------------------------------------------------------------
@pytest.mark.parametrize(
    "pk, text",
    [
        (("1", 2), "1,2"),
        ((1, 2), "1,2"),
        (("Hamlet, Act 1", 7), "Hamlet%2C Act 1,7"),
        (("100% sold", 3), "100%25 sold,3"),
        (("%2C", 4), "%252C,4"),
    ],
)
def test_the_text_form_of_a_composite_key_reads_back(pk: tuple[object, int], text: str) -> None:
    assert pk_text(Seat, pk) == text
    assert object_key(Seat, pk) == f"testapp.seat:{text}"
    assert parse_pk_text(Seat, text) == (str(pk[0]), pk[1])


def test_a_uuid_in_a_composite_key_is_32_hex_digits() -> None:
    event = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert pk_text(Ticket, (event, "a,b")) == "12345678123456781234567812345678,a%2Cb"
    assert parse_pk_text(Ticket, pk_text(Ticket, (str(event), "a,b"))) == (event, "a,b")


def test_bad_composite_keys_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"2 values \(show, number\), not \('a',\)"):
        object_key(Seat, ("a",))
    with pytest.raises(ValueError, match="no primary key yet"):
        Seat(show="a").occupy_key  # noqa: B018
    with pytest.raises(ValueError, match="not a primary key of Seat"):
        parse_pk_text(Seat, "a,b,c")
    with pytest.raises(ValueError, match="not a primary key of Seat"):
        parse_pk_text(Seat, "a,seven")


# --- the model side ------------------------------------------------------------------
def test_occupy_holder_and_the_generic_relation(database: str) -> None:
    backend = BACKEND_OF[database]
    seat = Seat.objects.using(database).create(show="Hamlet, Act 1", number=7)
    assert seat.occupy_key == "testapp.seat:Hamlet%2C Act 1,7"
    with seat.occupy(owner="alice", ttl=30, backend=backend) as lease:
        assert seat.get_holder(backend=backend).owner == "alice"
        with pytest.raises(Occupied):
            occupy.acquire(seat.occupy_key, owner="bob", timeout=0, backend=backend)
        claim = Occupation.objects.using(database).get(key=lease.key)
        assert claim.content_type == ContentType.objects.db_manager(database).get_for_model(Seat)
        assert parse_pk_text(Seat, claim.object_id) == seat.pk
        assert claim.target == seat and claim.target.pk == seat.pk
    assert seat.get_holder(backend=backend) is None


def test_occupied_free_and_claim(database: str) -> None:
    backend = BACKEND_OF[database]
    first, second, third = make_seats(database, "Hamlet, Act 1", 3)
    seats = Seat.objects.using(database)
    alice = seats.claim(owner="alice", ttl=30, backend=backend)
    assert alice.pk == first.pk and alice.lease.key == first.occupy_key
    assert seats.claim(owner="alice", backend=backend).lease.token == alice.lease.token
    bob = seats.claim(owner="bob", ttl=30, backend=backend)
    assert bob.pk == second.pk
    assert {s.pk for s in seats.occupied(backend=backend)} == {first.pk, second.pk}
    assert [s.pk for s in seats.free(backend=backend)] == [third.pk]
    occupy.release(alice.lease)
    assert {s.pk for s in seats.occupied(backend=backend)} == {second.pk}
    carol = seats.claim(owner="carol", ttl=30, order_by=["-number"], backend=backend)
    assert carol.pk == third.pk
    occupy.release(bob.lease)
    occupy.release(carol.lease)
    assert seats.occupied(backend=backend).count() == 0


@pytest.mark.multiprocess
def test_claimers_in_processes_never_get_the_same_seat(server: str) -> None:
    """Three processes claim seats (composite keys) from one pool until it is sold out:
    every seat is sold exactly once."""
    backend = BACKEND_OF[server]
    make_seats(server, "gala", 15)
    overlaps = multiproc.run(
        model_workers.claim_seats,
        [(server, backend, f"box-office-{n}", 15) for n in range(3)],
        timeout=120,
    )
    assert overlaps == [[], [], []]
    sold = list(Seat.objects.using(server).values_list("sold_to", flat=True))
    assert len(sold) == 15 and "" not in sold


def test_locked_by_a_composite_key(database: str) -> None:
    seat = make_seats(database, "gala", 1)[0]
    with Seat.objects.using(database).locked(pk=("gala", 1)) as locked:
        assert locked.pk == seat.pk
        locked.sold_to = "alice"
        locked.save()
    assert Seat.objects.using(database).get(pk=seat.pk).sold_to == "alice"
    with Seat.objects.using(database).locked(pk=("gala", 1), nowait=True) as locked:
        assert locked.sold_to == "alice"


def test_versioned_saves_and_update_versioned(database: str) -> None:
    seat = make_seats(database, "gala", 1)[0]
    stale = Seat.objects.using(database).get(pk=seat.pk)
    seats = Seat.objects.using(database)
    assert seats.filter(pk=seat.pk).update_versioned(sold_to="alice", expected=1) == 1
    assert seats.get(pk=seat.pk).version == 2
    stale.sold_to = "bob"
    with pytest.raises(VersionConflict) as caught:
        stale.save()
    assert caught.value.pk == seat.pk and caught.value.key == "testapp.seat:gala,1"
    with pytest.raises(VersionConflict):
        seats.filter(pk=seat.pk, version=1).update_versioned(sold_to="bob", expected=1)
    fresh = seats.get(pk=seat.pk)
    fresh.sold_to = "bob"
    fresh.save()
    assert seats.get(pk=seat.pk).sold_to == "bob"


def test_fenced_saves(database: str) -> None:
    backend = BACKEND_OF[database]
    seat = make_seats(database, "gala", 1)[0]
    old = occupy.acquire(seat.occupy_key, owner="old", ttl=30, backend=backend)
    occupy.release(old)
    with seat.occupy(owner="new", ttl=30, backend=backend) as lease:
        seat.sold_to = "new"
        seat.save(lease=lease)
    stale = Seat.objects.using(database).get(pk=seat.pk)
    stale.sold_to = "old"
    with pytest.raises(FencedOut):
        stale.save(lease=old)
    assert Seat.objects.using(database).get(pk=seat.pk).sold_to == "new"


def test_the_admin_status_annotation(database: str) -> None:
    """Django's admin registers no model with a composite key; the status mixin's
    annotation (the column and the filter's query) works on one all the same."""
    backend = BACKEND_OF[database]
    held, _free = make_seats(database, "gala", 2)

    class SeatStatus(OccupyStatusAdminMixin, admin.ModelAdmin):  # type: ignore[type-arg]
        occupy_backend = backend

    model_admin = SeatStatus(Seat, admin.AdminSite())
    with held.occupy(owner="worker-7", ttl=30, backend=backend):
        rows = {s.pk: s for s in annotate_occupation(Seat.objects.using(database), backend)}
        assert rows[held.pk].occupy_owner == "worker-7"
        assert model_admin.occupy_status(rows[held.pk]).startswith("by someone else until ")
        assert model_admin.occupy_status(rows[_free.pk]) == "—"
