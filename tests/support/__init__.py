"""What the tests share besides fixtures: backend and database aliases to run on, clean-up,
worker processes and their workers, a live HTTP server, users, a browser, the example site.

Test modules and ``conftest.py`` files import from here; no test module imports from a
``conftest.py``. Modules whose functions run in worker processes (:mod:`.multiproc`,
:mod:`.exclusion`, :mod:`.model_workers`, :mod:`.api_clients`) import Django models
inside their functions only: a child imports them before it sets Django up (the fork
server has done so already, :mod:`.forkserver_preload`, unless its set-up failed).
"""
