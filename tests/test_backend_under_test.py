"""The generic suite runs on a backend under test as docs/backends/writing.md has a
third party run it: ``OCCUPY_TEST_BACKEND`` names the class, and ``pytest tests -m
extra`` selects every test bound to it, with no list of files or backends to keep up
to date. Checked in a pytest of its own, collecting only, as the author's run would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Tests that must run on a backend under test whose store other processes see: first
#: the three that take a key from several OS processes.
SHARED_STORE_TESTS = [
    "tests/test_reentry.py::test_the_same_owner_in_another_process_competes[extra]",
    "tests/test_reentry.py::test_a_worker_whose_release_failed_does_not_starve_the_others[extra]",
    "tests/test_takeover.py::test_a_conditional_takeover_never_replaces_a_grant_it_did_not_read"
    "[extra]",
    "tests/backends/test_arrival_order.py::test_waiters_are_served_in_arrival_order[extra]",
    "tests/backends/test_contract.py::test_acquire_and_release[extra]",
]


def collect(tmp_path: Path, backend: str, **env: str) -> list[str]:
    """Return the ids ``pytest -m extra`` collects from the files of
    :data:`SHARED_STORE_TESTS` with ``backend`` as the backend under test."""
    files = sorted({test.split("::")[0] for test in SHARED_STORE_TESTS})
    config = {"LOCATION": str(tmp_path / "claims")}
    args = ["--collect-only", "-q", "-p", "no:cacheprovider", "-m", "extra", *files]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *args],
        cwd=ROOT,
        env={
            **os.environ,
            "OCCUPY_TEST_BACKEND": backend,
            "OCCUPY_TEST_BACKEND_CONFIG": json.dumps(config),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return [line for line in result.stdout.splitlines() if "::" in line]


@pytest.mark.slow
def test_every_generic_test_binds_a_shared_backend_under_test(tmp_path: Path) -> None:
    """A backend under test whose store other processes see (here the file backend,
    named as a third party would) gets the races of several processes and the
    arrival-order test too, not only the built-in backends; only its own tests run."""
    collected = collect(tmp_path, "occupy.backends.file.FileBackend")
    assert set(SHARED_STORE_TESTS) <= set(collected), collected
    assert all(test.endswith("[extra]") or "[extra-" in test for test in collected), collected


@pytest.mark.slow
def test_a_one_process_backend_under_test_skips_only_the_process_tests(tmp_path: Path) -> None:
    """``OCCUPY_TEST_BACKEND_ONE_PROCESS=1``: the tests of several OS processes leave it
    out, and the rest still bind it."""
    collected = collect(
        tmp_path, "tests.support.backends.QueuedMemoryBackend", OCCUPY_TEST_BACKEND_ONE_PROCESS="1"
    )
    processes, others = SHARED_STORE_TESTS[:3], SHARED_STORE_TESTS[3:]
    assert not set(processes) & set(collected), collected
    assert set(others) <= set(collected), collected
