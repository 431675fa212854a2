"""A job holding ``obj.occupy()`` in its model's store while a test sends requests: in
another OS process, or in a thread for a store that lives in one process's memory."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support import multiproc
from tests.support.aliases import ONE_PROCESS_BACKENDS

__all__ = ["JOB", "holding"]

#: The owner the job holds the object as.
JOB = "job:nightly-report"


def hold(label: str, pk: Any, alias: str, done: str, held: str) -> str:
    """Set the model's ``occupy_backend`` to ``alias`` (as the project's code would say
    it), hold ``obj.occupy()`` until the file ``done`` exists, and return the holder's
    owner; write the file ``held`` once the lock is held."""
    from django.apps import apps

    model = apps.get_model(label)
    model.occupy_backend = alias
    deadline = time.monotonic() + 120
    with model(pk=pk).occupy(owner=JOB, ttl=180, timeout=30) as lease:
        Path(held).touch()
        while not Path(done).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        return str(lease.owner)


@contextmanager
def holding(obj: Any, alias: str, scratch: Path) -> Iterator[None]:
    """Hold ``obj``'s key as a job would (``obj.occupy()``, its model's
    ``occupy_backend`` set to ``alias`` in the job too) from the block's start to its
    end."""
    held, done = scratch / "held", scratch / "done"
    args = (obj._meta.label, obj.pk, alias, str(done), str(held))
    failed: list[BaseException] = []
    workers, thread = None, None
    if alias in ONE_PROCESS_BACKENDS:

        def run() -> None:
            try:
                hold(*args)
            except BaseException as e:  # the test fails with it
                failed.append(e)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
    else:
        workers = multiproc.start(hold, [args])
    try:
        deadline = time.monotonic() + 90
        while not held.exists():
            ended = thread is not None and not thread.is_alive()
            ended = ended or (workers is not None and workers.procs[0].exitcode is not None)
            if ended or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        if workers is not None and not held.exists():
            multiproc.collect(workers, timeout=1)  # raises with the job's error
        assert held.exists(), f"the job never held {obj!r}: {failed}"
        yield
    finally:
        done.touch()
        if thread is not None:
            thread.join(timeout=60)
            assert not failed, failed
        elif workers is not None:
            assert multiproc.collect(workers, timeout=90) == [JOB]
