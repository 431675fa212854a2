"""The checks ``make lint`` and pre-commit run beside ruff: commit messages in Django's
form (``.ci/commit_msg.py``) and modules of at most 400 lines (``.ci/module_size.py``).
Each is run as a program, as the hook and the Makefile run it, on inputs that break its
rule and on inputs that keep it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GOOD_SUBJECT = "Add a check of commit messages"


def run(script: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / ".ci" / script), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def check_message(tmp_path: Path, message: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "COMMIT_EDITMSG"
    path.write_text(message, encoding="utf-8")
    return run("commit_msg.py", str(path))


@pytest.mark.parametrize(
    "message",
    [
        f"{GOOD_SUBJECT}\n",
        f"{GOOD_SUBJECT}\n\nWhy: the body may have lines of any length, as long as it likes to.\n",
        "x" * 72 + "\n",
        # git's comments and the diff of `commit --verbose` are not the message
        f"{GOOD_SUBJECT}\n# Please enter the commit message\n"
        "# ------------------------ >8 ------------------------\n" + "y" * 100 + "\n",
        f"\n\n{GOOD_SUBJECT}\n\nBody.\n",
    ],
)
def test_a_message_in_djangos_form_passes(tmp_path: Path, message: str) -> None:
    done = check_message(tmp_path, message)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("message", "says"),
    [
        ("x" * 73 + "\n", "the subject line has 73 characters, more than 72"),
        (f"{GOOD_SUBJECT}\nno blank line before the body\n", "the second line must be blank"),
        ("# only a comment\n\n", "the message is empty"),
    ],
)
def test_a_message_out_of_form_fails_naming_the_rule(
    tmp_path: Path, message: str, says: str
) -> None:
    done = check_message(tmp_path, message)
    assert done.returncode == 1
    assert says in done.stderr


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def test_commits_since_a_ref_are_checked_and_older_ones_are_not(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "An old subject " + "z" * 80)
    git(tmp_path, "branch", "base")
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", GOOD_SUBJECT)
    assert run("commit_msg.py", "--since", "base", cwd=tmp_path).returncode == 0
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "A new subject " + "w" * 80)
    done = run("commit_msg.py", "--since", "base", cwd=tmp_path)
    assert done.returncode == 1
    assert "has 94 characters" in done.stderr and "An old subject" not in done.stderr
    unknown = run("commit_msg.py", "--since", "nowhere", cwd=tmp_path)
    assert unknown.returncode == 0 and "'nowhere' is not in this clone" in unknown.stdout


def package(tmp_path: Path, sizes: dict[str, int]) -> Path:
    """Make a checkout under ``tmp_path`` whose ``occupy`` modules have these lengths."""
    for name, lines in sizes.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n" * lines, encoding="utf-8")
    return tmp_path


def test_this_checkout_has_no_module_over_the_limit() -> None:
    done = run("module_size.py")
    assert done.returncode == 0, done.stderr


def test_a_module_of_400_lines_passes_and_one_of_401_fails(tmp_path: Path) -> None:
    root = package(
        tmp_path,
        {"occupy/a.py": 400, "occupy/backends/base.py": 900},
    )
    assert run("module_size.py", str(root)).returncode == 0
    package(tmp_path, {"occupy/sub/b.py": 401})
    done = run("module_size.py", str(root))
    assert done.returncode == 1
    assert "occupy/sub/b.py: 401 lines, more than 400" in done.stderr


def test_an_exception_that_is_no_longer_needed_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = importlib.util.spec_from_file_location("module_size", ROOT / ".ci" / "module_size.py")
    assert spec is not None and spec.loader is not None
    module_size = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module_size)
    monkeypatch.setattr(module_size, "PENDING", {"occupy/big.py": "a split under way"})
    assert module_size.problems(package(tmp_path, {"occupy/big.py": 512})) == []
    # The split of a pending module landed: its line in PENDING must go too.
    assert module_size.problems(package(tmp_path, {"occupy/big.py": 200})) == [
        "occupy/big.py is no longer over 400 lines: remove it from PENDING"
    ]
