"""The file backend's exclusion: an exclusive ``flock`` per key, on one of 256 lock files
in ``LOCATION/locks/`` chosen by the key's digest.

Every step on a key (grant, release, extend, expiry, sweep) holds its lock file for a
few system calls; the kernel drops the lock if the process dies. Two keys may share a
lock file; a step never holds two, so they cannot deadlock.
"""

from __future__ import annotations

import fcntl
import os
import threading
import weakref

__all__ = ["KeyLocks"]


class KeyLocks:
    """Exclusive ``flock`` on one of 256 lock files, chosen by a key's digest.

    flock belongs to an open file description, which the threads of a process share,
    so a thread lock per file keeps this process's threads apart as well. A forked
    child opens its own files (an inherited description is shared with the parent).
    A lock file removed behind our back (a cleaner emptied the directory) is noticed
    after locking (it has no links left) and opened again.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._shards: dict[str, _Shard] = {}
        self._setup = threading.Lock()
        _instances.add(self)

    def hold(self, d: str) -> _Shard:
        """Return a context manager that holds the lock of the key whose digest is ``d``."""
        shards = self._shards
        if not shards:
            with self._setup:
                if not self._shards:
                    self._shards = {
                        f"{i:02x}": _Shard(f"{self.directory}/{i:02x}") for i in range(256)
                    }
                shards = self._shards
        return shards[d[:2]]

    def close(self) -> None:
        """Close the lock files (in a forked child: its copies of the parent's)."""
        with self._setup:
            for shard in self._shards.values():
                shard.close()
            self._shards = {}

    def _after_fork(self) -> None:
        # The child's thread locks may have been copied locked, and its lock files share
        # their open file descriptions (and so their flocks) with the parent's.
        self._setup = threading.Lock()
        for shard in self._shards.values():
            shard.close()
        self._shards = {}


_instances: weakref.WeakSet[KeyLocks] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for locks in _instances:
        locks._after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


class _Shard:
    """One lock file: a thread lock, then ``flock`` on the file, for a ``with`` block."""

    __slots__ = ("fd", "mutex", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self.mutex = threading.Lock()
        self.fd: int | None = None

    def __enter__(self) -> None:
        self.mutex.acquire()
        try:
            while True:
                if self.fd is None:
                    try:
                        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
                    except FileNotFoundError:
                        os.makedirs(os.path.dirname(self.path), exist_ok=True)
                        continue
                fcntl.flock(self.fd, fcntl.LOCK_EX)
                if os.fstat(self.fd).st_nlink:
                    return
                self.close()  # removed while we waited: lock the file that is there now
        except BaseException:
            self.mutex.release()
            raise

    def __exit__(self, *exc_info: object) -> None:
        try:
            if self.fd is not None:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            self.mutex.release()

    def close(self) -> None:
        """Close the file (which drops the flock)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
