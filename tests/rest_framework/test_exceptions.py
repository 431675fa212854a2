"""occupy's DRF exceptions answer through DRF's own exception handler too: a project
with its own ``EXCEPTION_HANDLER`` that calls DRF's still sends ``Retry-After``."""

from __future__ import annotations

import pytest
from rest_framework.views import exception_handler

from occupy.http import Problem
from occupy.rest_framework.exceptions import from_problem


@pytest.mark.parametrize(("status", "code"), [(423, "locked"), (503, "store_unavailable")])
def test_drf_s_own_handler_sets_retry_after_from_the_exception_s_wait(
    status: int, code: str
) -> None:
    problem = Problem(status=status, code=code, detail="x", headers={"Retry-After": "7"})
    exc = from_problem(problem)
    assert exc.wait == 7  # as on DRF's Throttled
    response = exception_handler(exc, {})
    assert response is not None
    assert (response.status_code, response["Retry-After"]) == (status, "7")


def test_an_answer_without_retry_after_has_no_wait() -> None:
    exc = from_problem(Problem(status=412, code="precondition_failed", detail="x"))
    assert exc.wait is None
    response = exception_handler(exc, {})
    assert response is not None and not response.has_header("Retry-After")
