"""What the commands print for an operator: keys and owners with their control
characters escaped, whatever wrote them (before occupy refused them, another program).

Before, ``list_locks`` wrote ESC and BEL bytes and U+202E to the terminal as they were,
and a key holding a newline (which ``acquire`` accepted) forged an extra row."""

from __future__ import annotations

import io
import re
import time

import pytest
from django.core.management import call_command

from occupy.backends import get_backend

#: What must never reach the terminal raw: the controls the values below hold (newlines
#: are looked for as rows).
CONTROL_CHARACTERS = re.compile("[\x07\x1b\u202e]")

#: A key that would forge a row, and an owner that would set the terminal's title, ring
#: its bell and reverse the rest of the line.
KEY = "book:1\nforged:2  mallory  using"
OWNER = "\x1b]0;owned\x07\u202eecila"


def _plant(alias: str, key: str, owner: str, ttl: float) -> None:
    """Grant ``key`` to ``owner`` below the API's checks, as a store written before them
    (or by another program) holds it."""
    lease = get_backend(alias).attempt(key, owner, ttl).try_acquire()
    assert lease is not None


@pytest.mark.parametrize("alias", ["default", "files"])
def test_list_locks_escapes_control_characters(live_db: None, alias: str) -> None:
    _plant(alias, KEY, OWNER, 60)
    out = io.StringIO()
    call_command("list_locks", backend=[alias], stdout=out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, lines  # the header and one row: nothing forged
    assert not CONTROL_CHARACTERS.search(out.getvalue().replace("\n", ""))
    assert "book:1\\nforged:2" in lines[1]
    assert "\\x1b]0;owned\\x07\\u202eecila" in lines[1]


@pytest.mark.parametrize("alias", ["default", "files"])
def test_sweep_locks_escapes_the_keys_it_lists(live_db: None, alias: str) -> None:
    _plant(alias, KEY, OWNER, 0.05)
    time.sleep(0.2)
    out = io.StringIO()
    call_command("sweep_locks", backend=[alias], verbosity=2, stdout=out)
    assert "removed book:1\\nforged:2  mallory  using" in out.getvalue()
    assert not CONTROL_CHARACTERS.search(out.getvalue().replace("\n", ""))


def test_an_occupation_is_shown_escaped(live_db: None) -> None:
    from occupy.models import Occupation

    _plant("default", KEY, OWNER, 60)
    shown = str(Occupation.objects.get())
    assert not CONTROL_CHARACTERS.search(shown)
    assert shown == "book:1\\nforged:2  mallory  using (using by \\x1b]0;owned\\x07\\u202eecila)"
