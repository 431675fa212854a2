"""The example API under gunicorn with threads on PostgreSQL leaves no session of
occupy's open: the server-side sessions on its database are as many after a run of
requests as before (``python -m bench sessions`` does 10,000).

Before, each worker thread kept a connection of occupy's own open for good, so the
sessions grew with the threads that served a lease request.
"""

from __future__ import annotations

import time

import pytest
from django.conf import settings

from tests.support.gunicorn_site import lease_cycles, run_gunicorn, sessions_on

REQUESTS = 400
#: How long a closed session may take to leave pg_stat_activity: a bound on a wait.
SETTLE_WITHIN = 10.0

pytestmark = [
    pytest.mark.skipif("postgresql" in settings.SKIPS, reason=settings.SKIPS.get("postgresql", "")),
    pytest.mark.slow,  # a gunicorn and 400 requests: about 40 s
]


def test_sessions_stay_flat_under_gunicorn_threads() -> None:
    pytest.importorskip("gunicorn", reason="gunicorn is not installed: pip install gunicorn")
    database = f"occupy_sessions{settings.SUFFIX}"
    with run_gunicorn(database) as book_urls:
        before = sessions_on(database)
        lease_cycles(book_urls, REQUESTS)
        deadline = time.monotonic() + SETTLE_WITHIN
        while (after := sessions_on(database)) > before and time.monotonic() < deadline:
            time.sleep(0.1)
    assert after <= before
