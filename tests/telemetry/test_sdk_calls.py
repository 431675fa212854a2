"""What an uncontended acquire + release costs in SDK calls, counted with a recording
double of the SDK (tests/support/otel_double.py) in a process of its own: one
synchronous call by default (the hold histogram), and one span besides when every
section is traced."""

from __future__ import annotations

import pytest

from tests.support import multiproc
from tests.support.aliases import backend_params
from tests.support.otel_double import count_calls

HOLD = "meter_provider.get_meter('occupy').create_histogram('occupy.lease.hold.duration').record"
TRACER = "tracer_provider.get_tracer('occupy')"


@pytest.mark.multiprocess
@pytest.mark.parametrize("alias", backend_params(["default", "redis"]))
def test_an_uncontended_pair_makes_one_sdk_call_and_no_span(alias: str, live_db: None) -> None:
    [found] = multiproc.collect(multiproc.start(count_calls, [(alias, False, 3)]))
    assert found == [[HOLD]] * 6


@pytest.mark.multiprocess
@pytest.mark.parametrize("alias", backend_params(["default", "redis"]))
def test_every_section_traced_is_one_span_per_pair(alias: str, live_db: None) -> None:
    [found] = multiproc.collect(multiproc.start(count_calls, [(alias, True, 3)]))
    section = [f"{TRACER}.start_span", HOLD, f"{TRACER}.start_span('occupy.lock').end"]
    assert found == [section] * 6
