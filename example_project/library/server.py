"""The example site in a real threaded HTTP server on a free port, for ``race_demo``'s
HTTP rows and the example project's tests.

    python -m example_project.library.server   # prints the base URL, serves until stdin closes
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def serve(host: str = "127.0.0.1") -> Iterator[str]:
    """Serve the project's WSGI application from a thread; yield its base URL
    (``http://127.0.0.1:<port>``) and stop the server on exit."""
    from django.core.handlers.wsgi import WSGIHandler
    from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadedWSGIServer((host, 0), Quiet, allow_reuse_address=False)
    httpd.daemon_threads = True
    from django.conf import settings

    app = WSGIHandler()
    if settings.DEBUG:  # static files as runserver serves them (Swagger UI's, offline)
        from django.contrib.staticfiles.handlers import StaticFilesHandler

        app = StaticFilesHandler(app)
    httpd.set_app(app)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{httpd.server_port}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def main() -> None:
    """Print the base URL on the first line of stdout and serve until stdin closes."""
    import os

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    django.setup()
    with serve() as url:
        sys.stdout.write(f"{url}\n")
        sys.stdout.flush()
        sys.stdin.read()


if __name__ == "__main__":
    main()
