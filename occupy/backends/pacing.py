"""How long a waiter pauses between two tries: :class:`Pacing`, the part of an
:class:`~occupy.backends.attempt.Attempt` that backends whose waiters poll rely on."""

from __future__ import annotations

import random
import time

__all__ = ["Pacing"]


class Pacing:
    """Capped exponential backoff with jitter, and for a waiter that knows its place in
    the queue, pauses paced by how fast the queue moves (see :meth:`note_place`)."""

    #: First and largest pause between two tries while waiting (at the head of a queue,
    #: or where there is none), in seconds.
    first_delay = 0.002
    max_delay = 0.05
    #: How many claims were queued ahead of this attempt's at its last look, where a
    #: polling backend knows (else ``None``; see :meth:`note_place`).
    ahead: int | None = None
    #: The longest pause of a waiter that knows its place in the queue, in seconds.
    longest_queued_pause = 1.0
    _tries = 0
    #: When this waiter first saw its place, and the place then.
    _first_place: tuple[float, int] | None = None

    def note_place(self, ahead: int | None) -> None:
        """Record how many claims are queued ahead of this attempt's (``None``: not known,
        as when it has just queued again), for a backend whose waiters poll.

        The first three in line poll at the pace of a lone waiter: the next in line
        must be ready the moment the head is served, and it learns that it has moved
        up only when it looks. A waiter further back (``k > 2`` ahead) pauses for half
        the time the ``k - 2`` claims ahead of the third should take to be served,
        at the pace the queue has moved since it first looked (one ``max_delay`` per
        claim until it has moved; never faster than ``max_delay``), up to
        :attr:`longest_queued_pause`. So it looks
        about ``log2 k`` times while ``k`` are served before it, and a queue of ``n``
        makes about ``ln n`` polls per release, not ``n``.
        """
        now = time.monotonic()
        first = self._first_place
        if ahead is None or first is None or ahead > first[1]:
            self._first_place = None if ahead is None else (now, ahead)
        self.ahead = ahead

    def _turn(self) -> float:
        """Return the seconds one claim ahead has taken to be served, as far as seen: at
        least ``max_delay``, and while the queue has not moved, all the time since the
        first look (a queue stuck behind a long hold is looked at ever less often)."""
        first, ahead = self._first_place, self.ahead
        if first is None or ahead is None:
            return self.max_delay
        moved = max(first[1] - ahead, 1)
        return max((time.monotonic() - first[0]) / moved, self.max_delay)

    def next_delay(self) -> float:
        """Return the next pause: capped exponential backoff with jitter, or while
        others are queued ahead, one paced by the queue (see :meth:`note_place`)."""
        if self.ahead is not None and self.ahead > 2:
            queued = min((self.ahead - 2) * self._turn() / 2, self.longest_queued_pause)
            return max(queued, self.max_delay) * random.uniform(0.75, 1.0)
        delay: float = min(self.max_delay, self.first_delay * (2 ** min(self._tries, 16)))
        self._tries += 1
        return delay * random.uniform(0.5, 1.0)
