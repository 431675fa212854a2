"""A task pool: each task is held by one editor at a time, each editor holds one task,
and a released task goes back to the pool. claim() reads the database backend's rows,
so these tests use the database (transaction=True: its claims are committed at once)."""

import occupy
import pytest

from shop.models import Task


@pytest.mark.django_db(transaction=True)
def test_editors_never_share_a_task() -> None:
    Task.objects.bulk_create(Task(title=f"task {n}") for n in range(2))

    alice = Task.objects.claim(owner="alice", ttl=60)
    bob = Task.objects.claim(owner="bob", ttl=60)
    assert alice.pk != bob.pk
    assert Task.objects.claim(owner="carol") is None  # everything is held
    assert Task.objects.claim(owner="alice").pk == alice.pk  # one task per editor

    alice.done = True
    alice.save()
    occupy.release(alice.lease)
    assert Task.objects.free().filter(done=False).count() == 0
    occupy.release(bob.lease)
    assert Task.objects.filter(done=False).claim(owner="carol").pk == bob.pk
