"""``FileBackend``: locks as files under ``LOCATION``, seed 000's filesystem variant.

The seed keeps two directories, ``pending`` and ``using``: a claimant writes a pending
file, looks for other pending files, then for a file in ``using``, and moves on from
there. Layout here, under ``LOCATION``::

    using/<digest>              the granted claim of a key (at most one)
    pending/<digest>/<ticket>   queued claims, served in ticket (arrival) order
    fences/<digest>             the key's last retired claim: its fence outlives it
    locks/<xx>                  256 lock files: each step on a key holds one (flock)
    tmp/                        rewrites are written here, then renamed into place

What the seed gets wrong, and what this does instead:

- Its checks and writes are separate steps, so two claimants can both see nothing and
  both move in. Here each step on a key (grant, release, extend, expiry) holds an
  exclusive ``flock`` on the key's lock file for a few system calls; the kernel drops it
  if the process dies. POSIX has no compare-and-delete, so without it a late release
  could delete the next holder's claim. A key's claim file is created once, with
  ``O_CREAT | O_EXCL``; release renames it into ``fences/`` and the next grant rewrites
  it there and renames it back, so no file is created or deleted per grant (creating
  one costs more than the rest of a grant on ext4). Extend and resume write a
  temporary file and ``rename`` it over the claim.
- Ties are broken by random sleeps, which can livelock. Here waiters queue as pending
  files named by ticket; the oldest live one is served first, and a newcomer is not
  granted while any live claim is pending (the pending check comes before the using
  check, as in the seed).
- No expiry, so a crashed holder blocks the key forever. Here every claim carries its
  expiry (written into the granted claim; a pending claim's expiry is its mtime, pushed
  forward by its waiter's heartbeat), and an expired claim counts as absent.

A file in ``using/`` that is not a claim occupy wrote (torn by a power cut, left by an
older version or another program) is held by an unknown holder
(:data:`~occupy.backends.claims.UNKNOWN_OWNER`, fence 0), never free: it expires
``FOREIGN_TTL`` after it was last written (its mtime), since nothing in it says when
its holder's lease ends. Then it counts as expired like any claim: the next grant
replaces it (its fence comes from the clock floor) and ``sweep_locks`` removes it.
``list_locks`` shows it under its path.

Every time is this host's clock (there is no server clock): hosts sharing the
directory over a network filesystem must keep their clocks in step. The fence is
``max(last fence + 1, clock in µs)``, the last fence being read from ``fences/``, so it
rises across releases, expiry, sweeps and restarts. Nothing is fsynced: after a power
cut a key may have no holder, and fences fall back to the clock floor.

OPTIONS: ``POLL_INTERVAL`` (longest pause between two tries while waiting, default
0.05 s), ``PENDING_TTL`` (how long a waiter's queued claim outlives its last heartbeat,
default 10 s), ``FOREIGN_TTL`` (how long an unreadable claim file holds its key after
it was last written, default 600 s). POSIX only (``fcntl``).
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Iterable, Mapping
from contextlib import suppress
from typing import Any

from django.core.checks import CheckMessage, Warning

from occupy.backends.base import Attempt, BaseBackend, Claim
from occupy.backends.claims import UNKNOWN_OWNER, Entry, digest, from_us, now_us
from occupy.backends.file import claimfiles as fio
from occupy.backends.options import Option, where
from occupy.exceptions import OccupyError
from occupy.leases import Holder, Lease

__all__ = ["FileBackend"]

#: How long sweep keeps a key's fence file after its fence fell behind the clock.
FENCE_MEMORY_US = 3600 * 1_000_000
_DIRS = ("using", "pending", "fences", "locks", "tmp")


class FileBackend(BaseBackend):
    """Locks stored as files in a directory (see the module docstring)."""

    #: A ``LOCATION`` that cannot be used (under a regular file, not writable, a
    #: network filesystem gone) fails with one of these.
    store_errors = (OSError,)

    requires_location = True
    options_schema = {
        "POLL_INTERVAL": Option(float, 0.05, "longest pause between two tries while "
                                "waiting", positive=True),
        "PENDING_TTL": Option(float, 10, "how long a waiter's queued claim outlives its "
                              "last heartbeat", positive=True),
        "FOREIGN_TTL": Option(float, 600, "how long a claim file occupy cannot read counts "
                              "as held", positive=True),
    }

    @classmethod
    def config_problems(cls, alias: str, params: Mapping[str, Any],
                        options: Mapping[str, Any]) -> list[str]:
        """Add: ``LOCATION`` must be a path."""
        location = params.get("LOCATION")
        if location and not isinstance(location, str | os.PathLike):
            return [f"{where(alias)}['LOCATION'] must be the path of a directory, not "
                    f"{location!r}."]
        return super().config_problems(alias, params, options)

    @classmethod
    def check(cls, alias: str, params: Mapping[str, Any]) -> list[CheckMessage]:
        """Add ``occupy.W003`` (a relative ``LOCATION``) and ``occupy.W005`` (a
        ``LOCATION`` this process cannot write)."""
        messages = super().check(alias, params)
        location = params.get("LOCATION")
        if not location or not isinstance(location, str | os.PathLike):
            return messages
        location = os.fspath(location)
        if not os.path.isabs(location):
            messages.append(Warning(
                f"occupy backend {alias!r} has the relative LOCATION {location!r}: "
                "processes started in different directories would not see each other's "
                "locks.",
                hint=f"Use an absolute path, e.g. {os.path.abspath(location)!r}.",
                obj=where(alias), id="occupy.W003",
            ))
        existing = os.path.abspath(location)  # the directory, or its nearest ancestor
        while not os.path.exists(existing) and os.path.dirname(existing) != existing:
            existing = os.path.dirname(existing)
        if not (os.path.isdir(existing) and os.access(existing, os.W_OK | os.X_OK)):
            messages.append(Warning(
                f"occupy backend {alias!r} cannot write its LOCATION {location!r} "
                f"({existing!r} is not a directory this process can write).",
                hint="Create the directory and let the site's user write it.",
                obj=where(alias), id="occupy.W005",
            ))
        return messages

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        super().__init__(alias, params)
        self.root = os.path.abspath(os.fspath(self.location))
        self.poll_interval = float(self.options["POLL_INTERVAL"])
        self.pending_ttl = float(self.options["PENDING_TTL"])
        self.foreign_ttl = float(self.options["FOREIGN_TTL"])
        self.locks = fio.KeyLocks(f"{self.root}/locks")

    def __repr__(self) -> str:
        return f"<FileBackend alias={self.alias!r} location={self.root!r}>"

    def drop_claim(self, key: str) -> None:
        """Delete the granted claim on ``key`` behind its holder's back (a test hook)."""
        os.unlink(self.using_path(key))

    # --- paths and files --------------------------------------------------------------
    def using_path(self, key: str) -> str:
        """Return the path of ``key``'s granted claim."""
        return f"{self.root}/using/{digest(key)}"

    def _claim(self, d: str) -> Entry | None:
        """Return the key's claim (held under the key's lock), or ``None``; a file that is
        not a claim occupy wrote as a foreign one (see the module docstring)."""
        path = f"{self.root}/using/{d}"
        data = fio.read(path)
        if data is None:
            return None
        entry = fio.load(data)
        if entry is not fio.DEAD:
            return entry
        written = fio.mtime_us(path)
        if written is None:
            return None
        # The token is empty, which no lease has: nobody can release or extend it.
        return Entry("", UNKNOWN_OWNER, 0, 1, written + round(self.foreign_ttl * 1e6),
                     written, path)

    def _last_fence(self, d: str) -> int:
        data = fio.read(f"{self.root}/fences/{d}")
        return 0 if data is None else fio.load(data).fence

    def _retire(self, d: str) -> None:
        """Move the key's claim to ``fences/``, where its fence outlives it."""
        try:
            os.replace(f"{self.root}/using/{d}", f"{self.root}/fences/{d}")
        except FileNotFoundError:
            self._make_dirs()
            with suppress(FileNotFoundError):
                os.replace(f"{self.root}/using/{d}", f"{self.root}/fences/{d}")

    def _unwind(self, d: str, claim: Entry) -> None:
        """Undo one level of the key's claim; retire it on its last (under the key's lock)."""
        if claim.depth > 1:
            self._rewrite(d, claim._replace(depth=claim.depth - 1))
        else:
            self._retire(d)

    def _rewrite(self, d: str, entry: Entry) -> None:
        """Replace the key's claim with ``entry`` (held under the key's lock)."""
        tmp = f"{self.root}/tmp/{d}.{os.getpid()}.{threading.get_ident()}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except FileNotFoundError:
            self._make_dirs()
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, fio.dump(entry))
        finally:
            os.close(fd)
        os.replace(tmp, f"{self.root}/using/{d}")

    def _make_dirs(self) -> None:
        for name in _DIRS:
            os.makedirs(f"{self.root}/{name}", exist_ok=True)

    def _lease(self, key: str, owner: str, ttl: float, entry: Entry) -> Lease:
        return Lease(key=key, owner=owner, token=entry.token, fence=entry.fence,
                     expires_at=from_us(entry.expires_us), ttl=ttl, using=self.alias,
                     depth=entry.depth, backend=self)

    def close(self) -> None:
        """Close this process's lock files."""
        self.locks.close()

    # --- the contract -------------------------------------------------------------
    def attempt(self, key: str, owner: str, ttl: float) -> FileAttempt:
        """Return an attempt to take ``key`` (see :class:`FileAttempt`)."""
        return FileAttempt(self, key, owner, ttl)

    def release(self, lease: Lease) -> None:
        """Retire the lease's claim (or undo one level of it); never another's claim."""
        d = digest(lease.key)
        lost = None
        with self.reaching(lease.key), self.locks.hold(d):
            claim = self._claim(d)
            if claim is None or claim.token != lease.token:
                lost = "it expired or was taken over before release"
            elif not claim.live(now_us()):
                self._retire(d)
                lost = "it expired before release"
            else:
                self._unwind(d, claim)
        if lost:  # outside the key's lock: lease_lost receivers may lock keys themselves
            raise lease.mark_lost(lost)

    def extend(self, lease: Lease, ttl: float) -> None:
        """Move the lease's expiry to ``ttl`` seconds after this host's now."""
        d = digest(lease.key)
        with self.reaching(lease.key), self.locks.hold(d):
            claim = self._claim(d)
            now = now_us()
            held = claim is not None and claim.token == lease.token and claim.live(now)
            if held:
                claim = claim._replace(expires_us=now + round(ttl * 1e6))
                self._rewrite(d, claim)
        if not held:
            raise lease.mark_lost("it expired or was taken over before it was extended")
        lease.expires_at = from_us(claim.expires_us)

    def resume(self, key: str, token: str, ttl: float, *, deeper: bool = True) -> Lease | None:
        """Return the lease ``token`` holds on ``key`` (a level deeper if ``deeper``,
        kept at least ``ttl`` more), or ``None``."""
        d = digest(key)
        with self.locks.hold(d):
            claim = self._claim(d)
            now = now_us()
            if claim is None or claim.token != token or not claim.live(now):
                return None
            claim = claim._replace(depth=claim.depth + int(deeper),
                                   expires_us=max(claim.expires_us, now + round(ttl * 1e6)))
            self._rewrite(d, claim)
        return self._lease(key, claim.owner, ttl, claim)

    def takeover(self, key: str, owner: str, ttl: float) -> tuple[Lease, Holder | None]:
        """Grant ``key`` to ``owner`` now with a higher fence, whoever holds it (under
        the key's lock: the claim is retired, its fence kept, and a new one granted);
        return the lease and the holder replaced."""
        d = digest(key)
        attempt = FileAttempt(self, key, owner, ttl)
        with self.locks.hold(d):
            now = now_us()
            claim = self._claim(d)
            previous = None
            if claim is not None:
                if claim.live(now):
                    previous = Holder(owner=claim.owner, expires_at=from_us(claim.expires_us),
                                      fence=claim.fence, since=from_us(claim.since_us))
                self._retire(d)
            lease = attempt._grant(now)
        if lease is None:  # only if flock is not shared on this filesystem
            raise OccupyError(f"{key!r} could not be taken over: another process wrote its "
                              "claim at the same moment (is flock shared here?).", key=key)
        return lease, previous

    def holder(self, key: str) -> Holder | None:
        """Return who holds ``key`` (owner, expiry, fence; never the token), or ``None``."""
        d = digest(key)
        with self.reaching(key), self.locks.hold(d):
            claim = self._claim(d)
        if claim is None or not claim.live(now_us()):
            return None
        return Holder(owner=claim.owner, expires_at=from_us(claim.expires_us),
                      fence=claim.fence, since=from_us(claim.since_us))

    def is_held(self, lease: Lease) -> bool:
        """Return whether the lease's token still holds an unexpired claim."""
        d = digest(lease.key)
        with self.reaching(lease.key), self.locks.hold(d):
            claim = self._claim(d)
        return claim is not None and claim.token == lease.token and claim.live(now_us())

    def sweep(self, *, batch_size: int = 1000, dry_run: bool = False) -> int:
        """Remove expired claims and return how many (or would be, if ``dry_run``).

        Directories are streamed (``os.scandir``), so memory stays flat whatever their
        size; ``batch_size`` is accepted for the contract. Each claim is checked again
        under its key's lock, so a claim renewed meanwhile is kept. Fence files whose
        fence fell an hour behind the clock (the clock floor covers them) and stray
        temporary files go too, uncounted.
        """
        with self.reaching(None):
            return self._sweep(now_us(), dry_run)

    def _sweep(self, now: int, dry_run: bool) -> int:
        count = 0
        for d in fio.names(f"{self.root}/using"):
            with self.locks.hold(d):
                claim = self._claim(d)
                if claim is not None and not claim.live(now):
                    count += 1
                    if not dry_run:
                        self._retire(d)
        for d in fio.names(f"{self.root}/pending"):
            with self.locks.hold(d):
                for name in fio.names(f"{self.root}/pending/{d}"):
                    path = f"{self.root}/pending/{d}/{name}"
                    if fio.expires_ns(path) <= now * 1000:
                        count += 1
                        if not dry_run:
                            fio.unlink(path)
                if not dry_run:
                    fio.rmdir(f"{self.root}/pending/{d}")
        if not dry_run:
            self._sweep_leftovers(now)
        return count

    def _sweep_leftovers(self, now: int) -> None:
        for d in fio.names(f"{self.root}/fences"):
            with self.locks.hold(d):
                if self._last_fence(d) < now - FENCE_MEMORY_US:
                    fio.unlink(f"{self.root}/fences/{d}")
        for name in fio.names(f"{self.root}/tmp"):
            path = f"{self.root}/tmp/{name}"
            try:
                if os.stat(path).st_mtime_ns < (now - 60_000_000) * 1000:
                    fio.unlink(path)
            except FileNotFoundError:
                pass

    def claims(self) -> Iterable[Claim]:
        """Yield every live claim, granted and queued, ordered by key."""
        with self.reaching(None):
            return self._claims(now_us())

    def _claims(self, now: int) -> list[Claim]:
        found = []
        for d in fio.names(f"{self.root}/using"):
            with self.locks.hold(d):
                claim = self._claim(d)
            if claim is not None and claim.live(now):
                foreign = not claim.token
                found.append(Claim(claim.key, claim.owner, "using",
                                   None if foreign else from_us(claim.since_us),
                                   from_us(claim.expires_us), None if foreign else claim.fence))
        for d in fio.names(f"{self.root}/pending"):
            with self.locks.hold(d):
                for name in sorted(fio.names(f"{self.root}/pending/{d}")):
                    path = f"{self.root}/pending/{d}/{name}"
                    expires = fio.expires_ns(path)
                    data = fio.read(path)
                    if data is None or expires <= now * 1000:
                        continue
                    try:
                        owner, key, since = data.decode("utf-8").split("\0")
                        int(since)
                    except ValueError:  # not a queued claim occupy wrote: it expires
                        continue
                    found.append(Claim(key, owner, "pending", from_us(int(since)),
                                       from_us(expires // 1000), None))
        found.sort(key=lambda c: (c.key, c.state != "using"))
        return found


class FileAttempt(Attempt):
    """One try at a key: the fast path, then a pending claim that waits its turn."""

    def __init__(self, backend: FileBackend, key: str, owner: str, ttl: float) -> None:
        super().__init__(backend, key, owner, ttl)
        self.backend: FileBackend = backend
        self.max_delay = backend.poll_interval
        self.digest = digest(key)
        self.ticket: str | None = None  # our pending file's name, once queued
        self.beat_at = 0.0
        self.seen: Entry | None = None
        self.in_doubt = False

    @property
    def queue(self) -> str:
        return f"{self.backend.root}/pending/{self.digest}"

    def try_acquire(self) -> Lease | None:
        """Grant the key if no live claim is ahead of us and none is using it; else
        return ``None``."""
        self.in_doubt = True
        with self.backend.reaching(self.key), self.backend.locks.hold(self.digest):
            lease = self._try(now_us())
        self.in_doubt = False
        return lease

    def _try(self, now: int) -> Lease | None:
        # The seed's order: pending claims first, then the using claim. Under the key's
        # lock both reads are one step; the order still decides who is served.
        ahead = self._pending_ahead(now)
        claim = self.backend._claim(self.digest)
        self.seen = claim
        if claim is not None and claim.live(now):
            self._heartbeat()  # held, whoever by: owners do not re-enter (occupy.reentry)
            return None
        if ahead:
            self._heartbeat()
            return None
        if claim is not None:
            self.backend._retire(self.digest)  # expired: its fence goes to fences/
        return self._grant(now)

    def _pending_ahead(self, now: int) -> bool:
        """Return whether a live pending claim is ahead of ours (of any, if we are not
        queued); remove the expired ones passed on the way."""
        try:
            names = sorted(os.listdir(self.queue))
        except FileNotFoundError:
            names = []
        if self.ticket is not None and self.ticket not in names:
            # Our claim expired while we stalled and was removed: queue again, last.
            self._enqueue(names)
            names = sorted(os.listdir(self.queue))
        for name in names:
            if name == self.ticket:
                return False
            path = f"{self.queue}/{name}"
            if fio.expires_ns(path) > now * 1000:
                return True
            fio.unlink(path)
        return False

    def _grant(self, now: int) -> Lease | None:
        """Write our claim into ``using/`` (no claim is there: we checked, under the lock).

        The key's last claim, kept in ``fences/``, is rewritten in place and renamed
        back into ``using/``; only a key without one gets a new file (``O_EXCL``).
        Creating a file is the slowest step on a journaling filesystem, so a key
        reuses one file for ever.
        """
        b = self.backend
        fences = f"{b.root}/fences/{self.digest}"
        using = f"{b.root}/using/{self.digest}"
        expires = now + round(self.ttl * 1e6)
        try:
            fd = os.open(fences, os.O_RDWR)
        except FileNotFoundError:
            entry = Entry(self.token, self.owner, now, 1, expires, now, self.key)
            try:
                created = fio.create(using, fio.dump(entry))
            except FileNotFoundError:
                b._make_dirs()
                created = fio.create(using, fio.dump(entry))
            if not created:  # only if flock is not shared on this filesystem
                return None
        else:
            try:
                last = fio.load(os.pread(fd, 65536, 0)).fence
                entry = Entry(self.token, self.owner, max(last + 1, now), 1, expires, now,
                              self.key)
                os.pwrite(fd, fio.dump(entry), 0)
            finally:
                os.close(fd)
            os.rename(fences, using)
        self._dequeue()
        return b._lease(self.key, self.owner, self.ttl, entry)

    def enqueue(self) -> None:
        """Write the pending claim that holds this caller's place in the queue."""
        with self.backend.reaching(self.key), self.backend.locks.hold(self.digest):
            try:
                names = os.listdir(self.queue)
            except FileNotFoundError:
                names = []
            self._enqueue(names)

    def _enqueue(self, names: list[str]) -> None:
        # Tickets rise under the key's lock: after the newest queued one, and the clock.
        last = max((int(name.split("-", 1)[0]) for name in names
                    if name.split("-", 1)[0].isdigit()), default=0)
        ticket = f"{max(time.time_ns(), last + 1):020d}-{secrets.token_hex(4)}"
        data = "\0".join((self.owner, self.key, str(now_us()))).encode("utf-8")
        path = f"{self.queue}/{ticket}"
        try:
            fio.create(path, data)
        except FileNotFoundError:
            os.makedirs(self.queue, exist_ok=True)
            fio.create(path, data)
        self.ticket = ticket
        self._heartbeat(force=True)

    def _heartbeat(self, force: bool = False) -> None:
        """Push our pending claim's expiry (its mtime) ``PENDING_TTL`` past now."""
        pending_ttl = self.backend.pending_ttl
        if self.ticket is None or (not force and time.monotonic() - self.beat_at
                                   < pending_ttl / 3):
            return
        expires = time.time_ns() + round(pending_ttl * 1e9)
        with suppress(FileNotFoundError):  # removed as expired: the next try queues again
            os.utime(f"{self.queue}/{self.ticket}", ns=(expires, expires))
        self.beat_at = time.monotonic()

    def _dequeue(self) -> None:
        if self.ticket is not None:
            fio.unlink(f"{self.queue}/{self.ticket}")
            fio.rmdir(self.queue)
            self.ticket = None

    def cancel(self) -> None:
        """Remove our pending claim, and a grant we may have made without hearing of it."""
        with self.backend.reaching(self.key), self.backend.locks.hold(self.digest):
            self._dequeue()
            if self.in_doubt:
                claim = self.backend._claim(self.digest)
                if claim is not None and claim.token == self.token:
                    # If it was re-entered meanwhile (by its token), only our level goes.
                    self.backend._unwind(self.digest, claim)

    def current_holder(self) -> tuple[Holder | None, float | None]:
        """Return the holder the last try saw and its seconds left, for the error."""
        claim = self.seen
        now = now_us()
        if claim is None or not claim.live(now):
            return None, None
        holder = Holder(owner=claim.owner, expires_at=from_us(claim.expires_us),
                        fence=claim.fence, since=from_us(claim.since_us))
        return holder, (claim.expires_us - now) / 1e6
