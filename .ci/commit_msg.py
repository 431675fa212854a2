"""Check commit messages in Django's form: a subject line of at most 72 characters, then
a blank line before the body (the why).

As pre-commit's ``commit-msg`` hook (``.pre-commit-config.yaml``), on the message being
written: ``.ci/commit_msg.py MESSAGE_FILE``. On commits already made, as ``make lint``
does: ``.ci/commit_msg.py --since REF`` checks every commit after ``REF`` (merges aside,
their subject is git's); a ``REF`` this clone does not have is said and skipped. Exit
status 1, naming each bad message, when one breaks a rule.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

SUBJECT_MAX = 72
#: Git's ``commit --verbose`` line: everything below it is the diff, not the message.
SCISSORS = "# ------------------------ >8 ------------------------"


def problems(message: str) -> list[str]:
    """Return what is wrong with ``message`` (git's comment lines and diff left out)."""
    lines = []
    for line in message.splitlines():
        if line == SCISSORS:
            break
        if not line.startswith("#"):
            lines.append(line.rstrip())
    while lines and not lines[0]:
        lines.pop(0)
    if not lines:
        return ["the message is empty"]
    subject, found = lines[0], []
    if len(subject) > SUBJECT_MAX:
        found.append(
            f"the subject line has {len(subject)} characters, more than {SUBJECT_MAX}: "
            f"{subject[:SUBJECT_MAX]}…"
        )
    if len(lines) > 1 and lines[1]:
        found.append("the second line must be blank: the subject, a blank line, then the body")
    return found


def commits_since(ref: str) -> list[tuple[str, str]] | None:
    """Return ``(short hash, message)`` of each commit after ``ref`` but merges, oldest
    first, or ``None`` when this clone does not know ``ref``."""
    known = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], capture_output=True
    )
    if known.returncode:
        return None
    log = subprocess.run(
        ["git", "log", "--reverse", "--no-merges", "--format=%h%x00%B%x00", f"{ref}..HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    fields = log.split("\0")
    return [(fields[i].strip(), fields[i + 1]) for i in range(0, len(fields) - 1, 2)]


def main(argv: list[str] | None = None) -> int:
    """Check one message file, or every commit since a ref; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("message_file", nargs="?", type=Path, help="the message being written")
    parser.add_argument("--since", metavar="REF", help="check every commit after REF")
    args = parser.parse_args(argv)
    if args.since:
        found = commits_since(args.since)
        if found is None:
            print(f"commit messages: {args.since!r} is not in this clone; not checked")
            return 0
        messages = [(f"commit {sha}", message) for sha, message in found]
    elif args.message_file:
        messages = [("the commit message", args.message_file.read_text(encoding="utf-8"))]
    else:
        parser.error("give a message file or --since REF")
    failed = False
    for name, message in messages:
        for problem in problems(message):
            failed = True
            print(f"{name}: {problem}", file=sys.stderr)
    if failed:
        print("See docs/development.md, 'Commits'.", file=sys.stderr)
    return int(failed)


if __name__ == "__main__":
    sys.exit(main())
