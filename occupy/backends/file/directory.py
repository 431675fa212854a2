"""``ClaimDirectory``: the layout of a file backend's ``LOCATION`` and every system call
the backend makes on it. Layout::

    using/<digest>              the granted claim of a key (at most one)
    pending/<digest>/<ticket>   queued claims, served in ticket (arrival) order
    fences/<digest>             the key's last retired claim: its fence outlives it
    locks/<xx>                  256 lock files (:mod:`.keylocks`)
    tmp/                        rewrites are written here, then renamed into place

Keys are stored under their SHA-256 digest (``d`` below), which is a safe file name
whatever the key. An entry that is not of this layout (a ``junk.txt``, a directory
where a claim file belongs, a file where a queue directory belongs) is not occupy's:
listing skips it and collects it in ``strays`` for the caller to report, and nothing
here removes or moves it. A directory at ``using/<d>`` or ``fences/<d>`` sits where
the key's own file must go, so every step on that key raises :class:`NotAClaimFile`
(naming the path) until somebody removes it: a grant can neither replace it nor move
it aside without leaving the key unusable. Nothing here takes a key's lock: the
backend calls these under it.
A directory that is missing (never made, or removed by a cleaner) is made and the call
tried once more; any other ``OSError`` is the caller's (an unusable ``LOCATION``).
Nothing is fsynced.
"""

from __future__ import annotations

import errno
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import ParamSpec, TypeVar

from occupy.backends.claims import Entry
from occupy.backends.file import records
from occupy.backends.file.records import Queued
from occupy.validation import MAX_TTL

__all__ = ["ClaimDirectory", "NotAClaimFile"]

_MAX_TTL_NS = MAX_TTL * 1_000_000_000

#: The name of every entry of ``using/``, ``pending/`` and ``fences/``: a key's digest.
_DIGEST = re.compile(r"[0-9a-f]{64}\Z")

_P = ParamSpec("_P")
_T = TypeVar("_T")


class NotAClaimFile(IsADirectoryError):
    """A directory sits where a key's claim or fence file belongs: the key cannot be
    used until it is removed (an ``OSError``, so the backend reports it as
    :class:`~occupy.exceptions.StoreUnavailable`)."""

    def __init__(self, path: str) -> None:
        kind = "fence" if os.path.basename(os.path.dirname(path)) == "fences" else "claim"
        super().__init__(
            errno.EISDIR,
            f"is a directory where the key's {kind} file belongs; occupy did not make it "
            "and neither moves nor removes it, so the key cannot be used until it is "
            "removed by hand (occupy.W004 lists such entries)",
            path,
        )

    def __str__(self) -> str:
        return f"{self.filename} {self.strerror}"


class ClaimDirectory:
    """The claim files under ``root`` (an absolute path), read and written whole."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.locks_path = f"{root}/locks"
        self._using = f"{root}/using"
        self._pending = f"{root}/pending"
        self._fences = f"{root}/fences"
        self._tmp = f"{root}/tmp"
        self._layout = (self._using, self._pending, self._fences, self.locks_path, self._tmp)

    def make(self) -> None:
        """Make the layout's directories that are missing."""
        for path in self._layout:
            os.makedirs(path, exist_ok=True)

    def _made(
        self, making: tuple[str, ...], call: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        """Return ``call(*args, **kwargs)``; if a directory was missing, make the
        directories ``making`` and call it once more."""
        try:
            return call(*args, **kwargs)
        except FileNotFoundError:
            for path in making:
                os.makedirs(path, exist_ok=True)
            return call(*args, **kwargs)

    # --- granted claims: using/ and fences/ ------------------------------------------
    def using_path(self, d: str) -> str:
        """Return the path of the granted claim of the key whose digest is ``d``."""
        return f"{self._using}/{d}"

    def claim(self, d: str) -> Entry | None:
        """Return the key's granted claim, ``None`` if it has none, or
        :data:`~.records.DEAD` if its file is not a claim."""
        data = _record(f"{self._using}/{d}")
        return None if data is None else records.load_claim(data)

    def written_us(self, d: str) -> int | None:
        """Return when the key's claim file was last written (µs), or ``None`` if it is
        gone."""
        try:
            return os.stat(f"{self._using}/{d}").st_mtime_ns // 1000
        except FileNotFoundError:
            return None

    def grant(self, d: str, claim: Callable[[int], Entry]) -> Entry | None:
        """Write ``claim(last fence)`` as the key's granted claim and return it; return
        ``None`` if the key already had a claim file (its creation is ``O_EXCL``).

        The key's retired claim in ``fences/`` is rewritten in place and renamed back,
        so a key creates one file for ever: creating a file is the slowest step of a
        grant on a journaling filesystem. A key without one gets ``claim(0)``.
        """
        fences, using = f"{self._fences}/{d}", f"{self._using}/{d}"
        try:
            fd = os.open(fences, os.O_RDWR)
        except IsADirectoryError:
            raise NotAClaimFile(fences) from None
        except FileNotFoundError:
            entry = claim(0)
            data = records.dump_claim(entry)
            return entry if self._made(self._layout, _create, using, data) else None
        try:
            entry = claim(records.load_claim(os.pread(fd, records.MAX_SIZE, 0)).fence)
            os.pwrite(fd, records.dump_claim(entry), 0)
        finally:
            os.close(fd)
        self._made(self._layout, os.rename, fences, using)
        return entry

    def rewrite(self, d: str, entry: Entry) -> None:
        """Replace the key's granted claim with ``entry`` in one step (a rename)."""
        tmp = f"{self._tmp}/{d}.{os.getpid()}.{threading.get_ident()}"
        self._made(self._layout, _replace, tmp, f"{self._using}/{d}", records.dump_claim(entry))

    def retire(self, d: str) -> None:
        """Move the key's granted claim to ``fences/``, where its fence outlives it
        (callers read it with :meth:`claim` first, which refuses a directory)."""
        fences = f"{self._fences}/{d}"
        try:
            self._made(self._layout, os.replace, f"{self._using}/{d}", fences)
        except FileNotFoundError:
            return  # it has none
        except IsADirectoryError:
            raise NotAClaimFile(fences) from None

    def remove(self, d: str) -> None:
        """Delete the key's granted claim, fence and all."""
        os.unlink(f"{self._using}/{d}")

    def last_fence(self, d: str) -> int:
        """Return the fence of the key's retired claim (0 if it has none)."""
        data = _record(f"{self._fences}/{d}")
        return 0 if data is None else records.load_claim(data).fence

    def check_fence_file(self, d: str) -> None:
        """Raise :class:`NotAClaimFile` if a directory sits where the key's fence file
        belongs (no grant of the key could be made)."""
        fences = f"{self._fences}/{d}"
        if os.path.isdir(fences):
            raise NotAClaimFile(fences)

    def forget_fence(self, d: str) -> None:
        """Delete the key's retired claim."""
        _unlink(f"{self._fences}/{d}")

    def granted(self, strays: list[str] | None = None) -> Iterator[str]:
        """Yield the digests of the keys with a granted claim file (adding the paths of
        the entries that are not one to ``strays``)."""
        return _digests(self._using, False, strays)

    def fenced(self, strays: list[str] | None = None) -> Iterator[str]:
        """Yield the digests of the keys with a retired claim file (see :meth:`granted`)."""
        return _digests(self._fences, False, strays)

    # --- queued claims: pending/<digest>/<ticket> ------------------------------------
    def queue_path(self, d: str) -> str:
        """Return the directory of the key's queued claims."""
        return f"{self._pending}/{d}"

    def queued(self, strays: list[str] | None = None) -> Iterator[str]:
        """Yield the digests of the keys with a queue directory (see :meth:`granted`)."""
        return _digests(self._pending, True, strays)

    def tickets(self, d: str, strays: list[str] | None = None) -> list[str]:
        """Return the tickets queued on the key, oldest first (a directory among them is
        not one: its path goes to ``strays``)."""
        queue = f"{self._pending}/{d}"
        found = []
        try:  # on every try: a scan is the quickest way to learn the queue is empty
            with os.scandir(queue) as it:
                for entry in it:
                    if entry.name.startswith("."):
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        if strays is not None:
                            strays.append(entry.path)
                        continue
                    found.append(entry.name)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(found)

    def enqueue(self, d: str, ticket: str, queued: Queued) -> None:
        """Write ``queued`` as the key's queued claim ``ticket``."""
        queue = f"{self._pending}/{d}"
        self._made((queue,), _create, f"{queue}/{ticket}", records.dump_queued(queued))

    def read_ticket(self, d: str, ticket: str) -> Queued | None:
        """Return the queued claim ``ticket``, or ``None`` if it is gone or not one."""
        try:
            data = _read(f"{self._pending}/{d}/{ticket}")
        except IsADirectoryError:
            return None  # not a ticket; tickets() reports it
        return None if data is None else records.load_queued(data)

    def ticket_expires_ns(self, d: str, ticket: str) -> int:
        """Return when the queued claim ``ticket`` expires (its mtime), or 0 if it is gone
        or says it lives longer than any claim occupy writes (``MAX_TTL``): such a file
        is not occupy's, and blocks nothing."""
        try:
            expires = os.stat(f"{self._pending}/{d}/{ticket}").st_mtime_ns
        except FileNotFoundError:
            return 0
        return 0 if expires > time.time_ns() + _MAX_TTL_NS else expires

    def renew_ticket(self, d: str, ticket: str, expires_ns: int) -> None:
        """Set the queued claim ``ticket`` to expire at ``expires_ns`` (its mtime); a
        ticket removed meanwhile stays removed."""
        with suppress(FileNotFoundError):
            os.utime(f"{self._pending}/{d}/{ticket}", ns=(expires_ns, expires_ns))

    def dequeue(self, d: str, ticket: str) -> None:
        """Remove the queued claim ``ticket``, and the key's queue if it is left empty."""
        self.remove_ticket(d, ticket)
        self.remove_queue(d)

    def remove_ticket(self, d: str, ticket: str) -> None:
        """Remove the queued claim ``ticket`` if it is there."""
        _unlink(f"{self._pending}/{d}/{ticket}")

    def remove_queue(self, d: str) -> None:
        """Remove the key's queue directory if it is empty."""
        with suppress(OSError):  # not empty, or already gone
            os.rmdir(f"{self._pending}/{d}")

    # --- temporary files --------------------------------------------------------------
    def remove_temporaries(self, written_before_ns: int) -> None:
        """Remove the temporary files last written before ``written_before_ns``: left by
        a process that died between writing one and renaming it into place."""
        for name in _names(self._tmp):
            path = f"{self._tmp}/{name}"
            with suppress(FileNotFoundError):
                if os.stat(path).st_mtime_ns < written_before_ns:
                    _unlink(path)


def _read(path: str) -> bytes | None:
    """Return the bytes of ``path`` (a record), or ``None`` if it is absent; raise
    ``IsADirectoryError`` for a directory."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        return os.read(fd, records.MAX_SIZE)
    finally:
        os.close(fd)


def _record(path: str) -> bytes | None:
    """Return the bytes of a key's claim or fence file at ``path`` (see :func:`_read`);
    raise :class:`NotAClaimFile` for a directory there."""
    try:
        return _read(path)
    except IsADirectoryError:
        raise NotAClaimFile(path) from None


def _create(path: str, data: bytes) -> bool:
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


def _replace(tmp: str, path: str, data: bytes) -> None:
    """Replace ``path`` by a file holding ``data``, written at ``tmp`` first."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _unlink(path: str) -> None:
    """Remove ``path`` if it is there."""
    with suppress(FileNotFoundError):
        os.unlink(path)


def _digests(directory: str, dirs: bool, strays: list[str] | None) -> Iterator[str]:
    """Yield the names in ``directory`` that are digests of entries of the layout's kind
    (directories if ``dirs``, else files); add the paths of the others to ``strays``."""
    for entry in _entries(directory):
        if _DIGEST.match(entry.name) and entry.is_dir(follow_symlinks=False) == dirs:
            yield entry.name
        elif strays is not None:
            strays.append(entry.path)


def _entries(directory: str) -> Iterator[os.DirEntry[str]]:
    """Yield the entries of ``directory`` but dot files (nothing if it does not exist)."""
    try:
        with os.scandir(directory) as it:
            for entry in it:
                if not entry.name.startswith("."):
                    yield entry
    except FileNotFoundError:
        return


def _names(directory: str) -> Iterator[str]:
    """Yield the names in ``directory`` but dot files (nothing if it does not exist)."""
    return (entry.name for entry in _entries(directory))
