"""Fixtures of the telemetry tests: what the session's SDK recorded, and a key family of
each test's own (so that the cumulative figures of the rest of the run do not count)."""

from __future__ import annotations

import uuid

import pytest

from occupy import telemetry
from tests.support.telemetry import Recorded, recorded


@pytest.fixture
def otel() -> Recorded:
    """What the SDK recorded in this session (the telemetry tests need the SDK)."""
    found = recorded()
    if found is None:
        pytest.skip("opentelemetry-sdk is not installed (pip install -e '.[test]')")
    assert telemetry.active()
    return found


@pytest.fixture
def family() -> str:
    """A key family of this test's own."""
    return f"t{uuid.uuid4().hex[:12]}"
