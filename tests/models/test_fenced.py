"""FencedMixin: a holder paused past its lease cannot write over the next holder."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import pytest

import occupy
from occupy.models import object_key
from tests.support import model_workers, multiproc
from tests.support.aliases import BACKEND_OF
from tests.testapp.models import Document, Page


@pytest.mark.multiprocess
def test_a_holder_paused_past_its_lease_is_fenced_out(server: str) -> None:
    """The first holder is stopped (SIGSTOP) past its ttl; a second takes the lock and
    writes; the first resumes and its save(lease=…) raises FencedOut: the second
    writer's data stands. Page has no version: only the fence can stop the write."""
    backend = BACKEND_OF[server]
    page = Page.objects.using(server).create(body="original")
    spawn = multiprocessing.get_context("spawn")
    acquired, resumed = spawn.Event(), spawn.Event()
    paused = multiproc.start(
        model_workers.paused_writer, [(server, backend, page.pk, 1.0, acquired, resumed)]
    )
    assert acquired.wait(60)
    os.kill(paused.procs[0].pid, signal.SIGSTOP)
    try:
        time.sleep(1.3)  # the paused holder's lease runs out meanwhile
        with occupy.lock(
            object_key(Page, page.pk), owner="next", ttl=30, timeout=5, backend=backend
        ) as lease:
            page.body = "written by the next holder"
            page.save(lease=lease)
    finally:
        # Resumed first: setting the event waits for its waiters to wake.
        os.kill(paused.procs[0].pid, signal.SIGCONT)
        resumed.set()
    ((outcome, paused_fence, message),) = multiproc.collect(paused, timeout=60)
    assert outcome == "fenced", outcome
    assert paused_fence < lease.fence and str(lease.fence) in message
    stored = Page.objects.using(server).get(pk=page.pk)
    assert (stored.body, stored.fence) == ("written by the next holder", lease.fence)


def test_save_with_a_lease_stores_its_fence_and_refuses_older_ones(tables: None) -> None:
    doc = Document.objects.create(body="a")
    with doc.occupy(ttl=30) as first:
        doc.body = "b"
        doc.save(lease=first)
        doc.body = "c"
        doc.save(lease=first)  # the same lease writes again: fence <= fence
    stale = Document.objects.get()
    with doc.occupy(ttl=30) as second:
        doc.body = "d"
        doc.save(lease=second)
    assert Document.objects.values_list("body", "fence", "version").get() == ("d", second.fence, 4)
    stale.body = "e"
    with pytest.raises(occupy.FencedOut) as info:
        stale.save(lease=first)
    error = info.value
    assert isinstance(error, occupy.ConflictError) and not isinstance(error, occupy.VersionConflict)
    assert (error.model, error.pk, error.fields) == (Document, doc.pk, ("body",))
    assert "fence" in str(error) and str(second.fence) in str(error)
    assert Document.objects.values_list("body", "fence", "version").get() == ("d", second.fence, 4)


def test_save_refuses_a_lease_on_another_key(database: str) -> None:
    """A lease on another row's key has a fence that does not compare with this row's:
    saving with it raises ValueError naming both keys, and writes nothing."""
    backend = BACKEND_OF[database]
    doc, other = (Document.objects.using(database).create(body=body) for body in "ab")
    with doc.occupy(ttl=30, backend=backend) as own:
        doc.body = "written with its own lease"
        doc.save(lease=own)
    with other.occupy(ttl=30, backend=backend) as foreign:
        doc.body = "written with another row's lease"
        with pytest.raises(ValueError) as info:
            doc.save(lease=foreign)
    assert doc.fence_key() in str(info.value) and foreign.key in str(info.value)
    assert Document.objects.using(database).values_list("body", "fence").get(pk=doc.pk) == (
        "written with its own lease",
        own.fence,
    )


def test_a_new_row_takes_the_lease_fence(tables: None) -> None:
    lease = occupy.acquire("documents", ttl=30)
    doc = Document(body="a")
    doc.save(lease=lease)
    assert Document.objects.get().fence == lease.fence
    occupy.release(lease)


def test_without_a_lease_the_fence_is_neither_checked_nor_moved(tables: None) -> None:
    doc = Document.objects.create(body="a")
    with doc.occupy(ttl=30) as lease:
        doc.body = "b"
        doc.save(lease=lease)
    plain = Document.objects.get()
    plain.body = "c"
    plain.save()
    assert Document.objects.values_list("body", "fence").get() == ("c", lease.fence)


def test_fence_required_and_argument_types(tables: None) -> None:
    page = Page.objects.create(body="a")
    page.body = "b"
    with pytest.raises(ValueError, match="requires save"):
        page.save()
    with pytest.raises(TypeError, match="Lease"):
        page.save(lease="token")
    lease = occupy.acquire(object_key(Page, page.pk), ttl=30)
    page.save(lease=lease)
    assert Page.objects.values_list("body", "fence").get() == ("b", lease.fence)
    occupy.release(lease)
