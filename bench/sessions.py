"""Server-side sessions of the example API under gunicorn with threads (PostgreSQL).

The example project is served by gunicorn (2 ``gthread`` workers of 4 threads) on a
database of the bench's own; 8 client threads send 10,000 API requests (pairs that take
a book's edit lease and give it back). The sessions connected to the database
(``pg_stat_activity``) are counted before the requests, every 2,000 requests, and after
(and sampled while the requests run, for the peak): with Django's default
``CONN_MAX_AGE = 0`` neither Django nor occupy keeps a session open between requests,
so the count stays flat. Run: ``python -m bench sessions``.
"""

from __future__ import annotations

import os
import threading
import time

REQUESTS = 10_000
STEP = 2_000
DATABASE = f"occupy_bench_sessions{os.environ.get('OCCUPY_TEST_SUFFIX', '')}"


def main() -> None:
    """Serve the example API, send the requests, print the sessions counted."""
    try:
        import gunicorn  # noqa: F401
        import psycopg  # noqa: F401
    except ImportError as e:
        print(f"Sessions under gunicorn: skipped ({e.name} is not installed)")
        return
    from tests.support.gunicorn_site import lease_cycles, run_gunicorn, sessions_on

    print(
        f"\nServer-side sessions on the example API's database, gunicorn 2 workers × 4 "
        f"threads, {REQUESTS:,} requests from 8 clients (PostgreSQL)"
    )
    with run_gunicorn(DATABASE) as book_urls:
        counts = [(0, sessions_on(DATABASE))]
        peak = 0
        running = threading.Event()
        running.set()

        def sample() -> None:
            nonlocal peak
            while running.is_set():
                peak = max(peak, sessions_on(DATABASE))
                time.sleep(0.05)

        sampler = threading.Thread(target=sample)
        sampler.start()
        started = time.perf_counter()
        try:
            for done in range(STEP, REQUESTS + 1, STEP):
                lease_cycles(book_urls, STEP)
                counts.append((done, sessions_on(DATABASE)))
        finally:
            running.clear()
            sampler.join()
        elapsed = time.perf_counter() - started
        time.sleep(1.0)  # sessions closed by the last requests leave the server
        counts.append((REQUESTS, sessions_on(DATABASE)))
    print("  requests   sessions")
    for requests, sessions in counts:
        print(f"  {requests:>8,}   {sessions:>8}")
    print(
        f"  ({REQUESTS / elapsed:,.0f} requests/s; the last row is after 1 s of quiet; "
        f"at most {peak} sessions while requests ran)"
    )


if __name__ == "__main__":
    main()
