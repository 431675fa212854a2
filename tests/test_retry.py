"""retry_on_conflict: re-runs on VersionConflict only, a bounded number of times."""

from __future__ import annotations

import asyncio

import pytest

import occupy


def conflict() -> occupy.VersionConflict:
    return occupy.VersionConflict("Book 1 changed", pk=1)


def test_it_retries_until_the_function_succeeds() -> None:
    calls = []

    @occupy.retry_on_conflict(attempts=3, backoff=0)
    def save(value: str) -> str:
        calls.append(value)
        if len(calls) < 3:
            raise conflict()
        return "saved"

    assert save("x") == "saved" and calls == ["x", "x", "x"]
    assert save.__name__ == "save"


def test_it_raises_the_last_conflict_after_all_attempts() -> None:
    calls = []

    @occupy.retry_on_conflict
    def save() -> None:
        calls.append(1)
        raise conflict()

    with pytest.raises(occupy.VersionConflict):
        save()
    assert len(calls) == 3  # the default


def test_other_errors_are_not_retried() -> None:
    calls = []

    @occupy.retry_on_conflict(attempts=5, backoff=0)
    def save() -> None:
        calls.append(1)
        raise occupy.FencedOut("a newer lease wrote", pk=1)

    with pytest.raises(occupy.FencedOut):
        save()
    assert calls == [1]


def test_async_functions() -> None:
    calls = []

    @occupy.retry_on_conflict(attempts=2, backoff=0.001)
    async def save() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise conflict()
        return "saved"

    assert asyncio.run(save()) == "saved" and len(calls) == 2


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"attempts": 0}, ValueError),
        ({"attempts": 1.5}, TypeError),
        ({"attempts": True}, TypeError),
        ({"backoff": -1}, ValueError),
        ({"backoff": float("inf")}, ValueError),
        ({"backoff": "1"}, TypeError),
    ],
)
def test_bad_arguments(kwargs: dict, error: type) -> None:
    with pytest.raises(error, match=next(iter(kwargs))):
        occupy.retry_on_conflict(**kwargs)
