"""``python -m bench telemetry`` draws its histogram only when asked (``--draw PATH``):
a run leaves the checkout, and the how-to's picture in ``docs/images/``, as they were."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import bench.telemetry


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch, settings: Any) -> list[Path]:
    """Where the bench drew, its measurements replaced by a histogram of three waits."""
    settings.SKIPS = {}
    paths: list[Path] = []
    monkeypatch.setattr(bench.telemetry, "setup_django", lambda: None)
    monkeypatch.setattr(bench.telemetry, "uncontended", lambda *args: ([], {}))
    monkeypatch.setattr(bench.telemetry, "report", lambda *args: None)
    monkeypatch.setattr(bench.telemetry, "contended_histogram", lambda seconds: {0.01: 3})
    monkeypatch.setattr(bench.telemetry, "draw", lambda buckets, path, s: paths.append(path))
    return paths


def test_a_run_draws_nothing(drawn: list[Path]) -> None:
    bench.telemetry.main([])
    bench.telemetry.main(["--quick"])
    assert drawn == []


def test_draw_draws_where_it_is_told(drawn: list[Path], tmp_path: Path) -> None:
    bench.telemetry.main(["--quick", "--draw", str(tmp_path / "wait.png")])
    assert drawn == [tmp_path / "wait.png"]
