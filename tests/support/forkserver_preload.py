"""Imported by the fork server of :mod:`.multiproc` (never by the tests): Django set up once
with the suite's settings, so that each worker process forked from that server starts
with Django, DRF and occupy imported instead of importing them again (about 1.4 s of CPU
a worker, a few hundred workers in a run).

The fork server is a fresh, single-threaded interpreter, not the pytest process: nothing
here has opened a connection or started a thread, so forking it is as clean as a spawn.
Should the set-up fail, the fork server goes on without it and each worker sets Django
up itself (:func:`.multiproc._child` always calls ``django.setup()``).
"""

from __future__ import annotations

import os

os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"  # as multiproc._child sets it
try:
    import django

    django.setup()
    import occupy.api  # noqa: F401  (the rest of what a worker uses, imported once)
    import tests.testapp.models  # noqa: F401
except Exception:  # the workers set Django up themselves, and fail there visibly
    pass
