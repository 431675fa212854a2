"""occupy for your own tests: an in-process lock store, a clock you move, fixtures.

    # settings of the test run: every lock in this process's memory
    OCCUPY = {"BACKENDS": {"default": {"BACKEND": "occupy.testing.MemoryBackend"}}}

    from occupy.testing import clock

    def test_an_abandoned_edit_expires(occupy_memory):
        lease = occupy.acquire("book:1", owner="alice", ttl=300)
        clock.advance(301)                   # no sleeping: the store's time moves
        assert occupy.holder("book:1") is None

- :class:`MemoryBackend`: the store, passing the contract every backend passes;
- :data:`clock` (a :class:`StoreClock`): ``clock.advance(seconds)`` expires leases,
  makes the next renewal fail and ``sweep_locks`` find them, at once;
- :func:`memory_backends`: ``override_settings`` that puts occupy backends in memory
  for a test or a block;
- the pytest plugin (:mod:`occupy.testing.pytest_plugin`, loaded by pytest by itself
  once occupy is installed): the fixtures ``occupy_memory`` and ``occupy_clock``;
- :class:`OccupyTestCaseMixin` for ``manage.py test``.

See the docs' "Testing code that uses occupy" for the patterns.
"""

from __future__ import annotations

import unittest
from typing import Any

from django.test.utils import override_settings

from occupy.testing.memory import MemoryAttempt, MemoryBackend, StoreClock, clock

__all__ = [
    "MEMORY_BACKEND",
    "MemoryAttempt",
    "MemoryBackend",
    "OccupyTestCaseMixin",
    "StoreClock",
    "clock",
    "memory_backends",
]

#: The configuration of one memory backend, for ``OCCUPY["BACKENDS"][alias]``.
MEMORY_BACKEND: dict[str, Any] = {"BACKEND": "occupy.testing.MemoryBackend"}


def memory_backends(*aliases: str) -> override_settings:
    """Return ``override_settings`` (a decorator and a context manager) that puts the
    occupy backends ``aliases`` in this process's memory, each new and empty; with no
    alias, every configured one (and ``"default"``). The rest of ``OCCUPY`` stands.

    Enter it when the test starts, not at import: it reads the settings then.
    """
    return _MemoryBackends(aliases)


class _MemoryBackends(override_settings):
    """``override_settings`` whose value is read when it is enabled."""

    def __init__(self, aliases: tuple[str, ...]) -> None:
        self.aliases = aliases
        super().__init__()

    def enable(self) -> None:
        from occupy.conf import occupy_settings

        current = dict(occupy_settings.user_settings)
        backends = dict(current.get("BACKENDS") or {})
        for alias in self.aliases or {"default", *backends}:
            backends[alias] = dict(MEMORY_BACKEND)
        self.options = {"OCCUPY": {**current, "BACKENDS": backends}}
        super().enable()


class OccupyTestCaseMixin(unittest.TestCase):
    """Put occupy's backends in memory for each test of a ``TestCase`` (Django's
    ``SimpleTestCase``, ``TestCase``, … or unittest's), and take the store clock back
    afterwards::

        class EditTests(OccupyTestCaseMixin, TestCase):
            def test_an_abandoned_edit_expires(self):
                occupy.acquire("book:1", ttl=300)
                self.occupy_clock.advance(301)
                self.assertIsNone(occupy.holder("book:1"))

    ``occupy_memory_aliases`` names the aliases (default: every configured one).
    """

    #: The occupy backend aliases to put in memory; empty: every configured one.
    occupy_memory_aliases: tuple[str, ...] = ()
    #: The store clock (:data:`occupy.testing.clock`).
    occupy_clock: StoreClock = clock

    def setUp(self) -> None:
        """Put the backends in memory, undone (and the clock taken back) at cleanup."""
        super().setUp()
        override = memory_backends(*self.occupy_memory_aliases)
        override.enable()
        self.addCleanup(override.disable)
        self.addCleanup(clock.reset)
