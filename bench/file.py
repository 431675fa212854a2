"""File backend against ``filelock.FileLock``, on the same filesystem.

Both take and release an uncontended lock: ``FileLock`` holds an ``flock`` on one
file; occupy's ``FileBackend`` writes a claim with an expiry, an owner and a fence
(and keeps the queue order and reentrancy) through the public API. Run:
``python -m bench file``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable

from bench.common import alternate, occupy_cycle, print_table, setup_django


def filelock_cycle(directory: str) -> Callable[[int], None]:
    """Return ``fn(n)``: acquire and release a ``filelock.FileLock`` ``n`` times."""
    from filelock import FileLock

    lock = FileLock(os.path.join(directory, "bench.lock"))

    def run(n: int) -> None:
        for _ in range(n):
            lock.acquire()
            lock.release()

    return run


def main() -> None:
    """Print acquire+release rates of occupy's FileBackend and filelock.FileLock."""
    setup_django("sqlite")
    from django.conf import settings

    # The peer's lock file sits next to the backend's LOCATION: the same filesystem.
    parent = os.path.dirname(settings.FILES_LOCATION)
    directory = tempfile.mkdtemp(prefix="occupy-bench-filelock-", dir=parent)
    try:
        results = alternate(
            {
                "filelock.FileLock": filelock_cycle(directory),
                "occupy FileBackend": occupy_cycle("bench:file", "files"),
            },
            ops=5000,
            rounds=7,
        )
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print_table(
        f"Uncontended acquire + release of a file lock ({parent})",
        results,
        reference="filelock.FileLock",
        target="occupy ≥ 1.0× filelock.FileLock on the same filesystem",
    )


if __name__ == "__main__":
    main()
