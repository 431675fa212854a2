"""Cut a connection whose database server does not answer in time.

A server that stalls (paused, swapped out, behind a broken network) answers neither a
statement nor its own statement timeout, and the drivers block on the socket until it
does. :data:`cutoffs` shuts such a socket down when the caller's time is up, from one
thread per process: ``shutdown``, never ``close``, so the descriptor stays the
driver's, and the blocked call fails at once as a dropped connection.
"""

from __future__ import annotations

import heapq
import itertools
import os
import socket
import threading
import time

__all__ = ["Cutoffs", "cutoffs"]


class Cutoffs:
    """Sockets to shut down at given times, unless disarmed first."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        # Entries: [at (monotonic), sequence, file descriptor, armed, cut].
        self._heap: list[list] = []
        self._order = itertools.count()
        self._pid = 0

    def arm(self, fd: int, at: float) -> list:
        """Shut ``fd`` down at ``at`` (``time.monotonic()``); return the entry to disarm."""
        entry = [at, next(self._order), fd, True, False]
        with self._cond:
            if self._pid != os.getpid():  # first use, or a forked child: no thread yet
                self._heap = []
                self._pid = os.getpid()
                threading.Thread(target=self._run, name="occupy-cutoff", daemon=True).start()
            heap = self._heap
            while heap and not heap[0][3]:
                heapq.heappop(heap)
            heapq.heappush(heap, entry)
            if heap[0] is entry:
                self._cond.notify()
        return entry

    def disarm(self, entry: list) -> bool:
        """Cancel a cut that has not happened (after this, it never will); return
        whether it had happened."""
        with self._cond:
            entry[3] = False
            return entry[4]

    def _run(self) -> None:
        with self._cond:
            while True:
                heap = self._heap
                while heap and not heap[0][3]:
                    heapq.heappop(heap)
                if not heap:
                    self._cond.wait()
                    continue
                wait = heap[0][0] - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                # Under the lock: the statement's thread cannot disarm (and go on to
                # close the descriptor) while it is shut down.
                entry = heapq.heappop(heap)
                entry[4] = True
                _shutdown(entry[2])


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


os.register_at_fork(after_in_child=_after_fork)
