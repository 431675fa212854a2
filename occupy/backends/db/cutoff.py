"""Cut a connection whose database server does not answer in time.

A server that stalls (paused, swapped out, behind a broken network) answers neither a
statement nor its own statement timeout, and the drivers block on the socket until it
does. :data:`cutoffs` shuts such a socket down when the caller's time is up, from one
thread per process: ``shutdown``, never ``close``, so the descriptor stays the
driver's, and the blocked call fails at once as a dropped connection.

The thread must outlive anything a caller arms: a cut too far ahead to wait for in
one go (past ``threading.TIMEOUT_MAX``) is waited for in steps, and a thread that died
all the same is started again by the next :meth:`Cutoffs.arm`, so that no call can
switch the protection off for the rest of the process.

Arming and disarming cost no thread switch in the common case: the thread is woken only
by a cut due before the moment it already sleeps until (it pops the cuts disarmed in
the meantime when it wakes), so a steady stream of statements that each answer in time
wakes it about once per bound, not once per statement.
"""

from __future__ import annotations

import heapq
import itertools
import math
import os
import socket
import threading
import time
from dataclasses import dataclass, field

__all__ = ["Cut", "Cutoffs", "cutoffs"]


@dataclass(order=True)
class Cut:
    """A socket to shut down at ``at`` (``time.monotonic()``), unless disarmed first."""

    at: float
    #: Arming order: among cuts due at once, the first armed comes first.
    sequence: int
    fd: int = field(compare=False)
    armed: bool = field(default=True, compare=False)
    #: Whether the socket was shut down.
    done: bool = field(default=False, compare=False)


class Cutoffs:
    """Sockets to shut down at given times, unless disarmed first."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[Cut] = []
        self._order = itertools.count()
        self._pid = 0
        self._thread: threading.Thread | None = None
        #: When the thread wakes next by itself (``time.monotonic()``; inf: only when
        #: notified). A cut due later needs no wake-up: the thread looks again then.
        self._wakes_at = math.inf

    def arm(self, fd: int, at: float) -> Cut:
        """Shut ``fd`` down at ``at`` (``time.monotonic()``); return the cut to disarm."""
        entry = Cut(at, next(self._order), fd)
        with self._cond:
            if self._pid != os.getpid():  # first use, or a forked child: no thread yet
                self._heap = []
                self._pid = os.getpid()
                self._thread = None
                self._wakes_at = math.inf
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="occupy-cutoff", daemon=True)
                self._thread.start()
            heap = self._heap
            while heap and not heap[0].armed:
                heapq.heappop(heap)
            heapq.heappush(heap, entry)
            # Waking the thread for every statement cost an uncontended acquire a
            # context switch; one due after the thread's own wake-up can wait for it.
            if entry.at < self._wakes_at:
                self._cond.notify()
        return entry

    def disarm(self, entry: Cut) -> bool:
        """Cancel a cut that has not happened (after this, it never will); return
        whether it had happened."""
        with self._cond:
            entry.armed = False
            return entry.done

    def _run(self) -> None:
        with self._cond:
            while True:
                heap = self._heap
                while heap and not heap[0].armed:
                    heapq.heappop(heap)
                if not heap:
                    self._wakes_at = math.inf
                    self._cond.wait()
                    continue
                wait = heap[0].at - time.monotonic()
                if wait > 0:
                    wait = min(wait, _LONGEST_WAIT)
                    self._wakes_at = time.monotonic() + wait
                    self._cond.wait(wait)
                    continue
                # Under the lock: the statement's thread cannot disarm (and go on to
                # close the descriptor) while it is shut down.
                entry = heapq.heappop(heap)
                entry.done = True
                _shutdown(entry.fd)


#: The longest single wait of the thread: ``Condition.wait`` refuses more than
#: ``threading.TIMEOUT_MAX`` with ``OverflowError``.
_LONGEST_WAIT = min(threading.TIMEOUT_MAX, 3600.0)


def _shutdown(fd: int) -> None:
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.close()


cutoffs = Cutoffs()


def _after_fork() -> None:
    # The parent's thread did not come along, and may have held the lock at the fork.
    cutoffs._cond = threading.Condition()
    cutoffs._pid = 0
    cutoffs._thread = None


os.register_at_fork(after_in_child=_after_fork)
