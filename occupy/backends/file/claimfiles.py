"""The files of :class:`~occupy.backends.file.FileBackend`: the claim format, the few
system calls it is built from, and the per-key ``flock``."""

from __future__ import annotations

import fcntl
import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import suppress

from occupy.backends.claims import Entry

__all__ = ["DEAD", "KeyLocks", "create", "dump", "expires_ns", "load", "mtime_us", "names",
           "read", "rmdir", "unlink"]

_MAGIC = "occupy-claim-1"
#: Ends every record: a claim rewritten in place by a shorter one keeps a stale tail,
#: which parsing stops before.
_END = "end"
#: What :func:`load` returns for bytes that are not a claim: fence 0 (the clock floor
#: decides the next). A claim file in ``using/`` that reads as this is held by an
#: unknown holder for a while (``FileBackend``'s ``FOREIGN_TTL``), never free at once.
DEAD = Entry("", "", 0, 0, 0, 0, "")


def dump(entry: Entry) -> bytes:
    """Return the bytes of a claim file holding ``entry``."""
    # Keys and owners cannot contain NUL (occupy.validation), so it separates fields.
    return "\0".join((_MAGIC, entry.token, str(entry.fence), str(entry.depth),
                      str(entry.expires_us), str(entry.since_us), entry.owner, entry.key,
                      _END, "")).encode("utf-8")


def load(data: bytes) -> Entry:
    """Return the entry in a claim file's bytes (:data:`DEAD` if they are not one)."""
    fields = data.decode("utf-8", "replace").split("\0", 9)
    if len(fields) < 9 or fields[0] != _MAGIC or fields[8] != _END:
        return DEAD  # torn by a power cut, or not ours
    _, token, fence, depth, expires, since, owner, key = fields[:8]
    try:
        return Entry(token, owner, int(fence), int(depth), int(expires), int(since), key)
    except ValueError:
        return DEAD


def read(path: str) -> bytes | None:
    """Return the bytes of ``path`` (claims are small), or ``None`` if it is absent."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        return os.read(fd, 65536)
    finally:
        os.close(fd)


def create(path: str, data: bytes) -> bool:
    """Create ``path`` holding ``data`` unless it exists (``O_CREAT | O_EXCL``); return
    whether it did."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    return True


def unlink(path: str) -> bool:
    """Remove ``path``; return whether it was there."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def rmdir(path: str) -> None:
    """Remove ``path`` if it is an empty directory."""
    with suppress(OSError):  # not empty, or already gone
        os.rmdir(path)


def names(directory: str) -> Iterator[str]:
    """Yield the names in ``directory`` (nothing if it does not exist)."""
    try:
        with os.scandir(directory) as it:
            for entry in it:
                if not entry.name.startswith("."):
                    yield entry.name
    except FileNotFoundError:
        return


def mtime_us(path: str) -> int | None:
    """Return when ``path`` was last written (microseconds), or ``None`` if it is gone."""
    try:
        return os.stat(path).st_mtime_ns // 1000
    except FileNotFoundError:
        return None


def expires_ns(path: str) -> int:
    """Return a pending claim's expiry (its mtime), or 0 if it is gone."""
    try:
        return os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return 0


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
                    self._shards = {f"{i:02x}": _Shard(f"{self.directory}/{i:02x}")
                                    for i in range(256)}
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
os.register_at_fork(after_in_child=lambda: [locks._after_fork() for locks in _instances])


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
