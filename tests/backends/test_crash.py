"""A holder killed with SIGKILL: its lease expires and another process takes the key."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connections

import occupy
from tests.conftest import backend_params

TTL = 2.0
ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import os, sys, django
os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
django.setup()
from django.db import connections
for alias, name in {names!r}.items():
    connections.settings[alias]["NAME"] = name
from tests.workers import hold_until_killed
hold_until_killed({using!r}, "book:1", {ttl!r})
"""


@pytest.mark.multiprocess
@pytest.mark.parametrize("using", backend_params(["default", "db-postgresql", "db-mysql"]))
def test_a_killed_holders_key_is_free_within_its_ttl_plus_a_second(using: str,
                                                                   live_db: None) -> None:
    names = {alias: connections[alias].settings_dict["NAME"] for alias in connections}
    child = subprocess.Popen([sys.executable, "-c", CHILD.format(names=names, using=using,
                                                                 ttl=TTL)],
                             cwd=ROOT, stdout=subprocess.PIPE, text=True, env=os.environ)
    try:
        assert child.stdout.readline().strip() == "holding"
        os.kill(child.pid, signal.SIGKILL)
        killed = time.monotonic()
        child.wait(timeout=10)
        assert occupy.holder("book:1", using=using).owner == "doomed"
        lease = occupy.acquire("book:1", owner="survivor", timeout=TTL + 1, using=using)
        assert time.monotonic() - killed <= TTL + 1
        occupy.release(lease)
    finally:
        child.kill()
