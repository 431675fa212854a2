"""occupy's pytest plugin: fixtures for tests of code that takes locks.

pytest loads it by itself once occupy is installed (the ``pytest11`` entry point); no
configuration. It imports nothing of Django's until a fixture is used.

- ``occupy_memory``: every occupy backend in this process's memory for the test, new
  and empty (:func:`occupy.testing.memory_backends`); returns the store clock.
- ``occupy_clock``: the store clock (:data:`occupy.testing.clock`), taken back to the
  real time after the test.

With pytest-django, the backends' own database connections are closed before the test
databases are dropped (a session left open would keep PostgreSQL from dropping them).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from occupy.testing.memory import StoreClock

__all__ = ["occupy_clock", "occupy_memory"]


@pytest.fixture
def occupy_clock() -> Iterator[StoreClock]:
    """Return the memory stores' clock (``occupy_clock.advance(31)``), reset after."""
    from occupy.testing import clock

    yield clock
    clock.reset()


@pytest.fixture
def occupy_memory(occupy_clock: StoreClock) -> Iterator[StoreClock]:
    """Put every occupy backend in memory for the test; return the store clock."""
    from occupy.testing import memory_backends

    with memory_backends():
        yield occupy_clock


@pytest.fixture(scope="session")
def _occupy_backends_closed(django_db_setup: None) -> Iterator[None]:
    """Close what the backends hold once the tests are done: set up after pytest-django's
    test databases, so torn down before they are dropped."""
    yield
    from occupy.backends import reset_backends

    reset_backends()


@pytest.fixture(autouse=True)
def _occupy_backends_closed_before_teardown(request: pytest.FixtureRequest) -> None:
    """Arrange :func:`_occupy_backends_closed` for a run whose tests use the database."""
    if "django_db_setup" in request.fixturenames:
        request.getfixturevalue("_occupy_backends_closed")
