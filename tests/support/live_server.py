"""A real threaded HTTP server running the test project in this process, on a free port:
for the tests whose clients are other processes or a browser."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def serve(*, static: bool = False) -> Iterator[str]:
    """Serve the test project (with its static files if ``static``) until the block
    ends; yield its base URL. The server's host passes Django's Host and Origin checks,
    as with ``LiveServerTestCase``."""
    from django.conf import settings
    from django.core.handlers.wsgi import WSGIHandler
    from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
    from django.test import override_settings

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    app: Any = WSGIHandler()
    if static:
        from django.contrib.staticfiles.handlers import StaticFilesHandler

        app = StaticFilesHandler(app)
    httpd = ThreadedWSGIServer(("127.0.0.1", 0), Quiet, allow_reuse_address=False)
    httpd.set_app(app)
    # shutdown() waits for the loop's next look at its flag: every 0.5 s by default,
    # half a second at the end of each test that serves.
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    hosts = override_settings(ALLOWED_HOSTS=[*settings.ALLOWED_HOSTS, "127.0.0.1"])
    hosts.enable()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}"
    finally:
        hosts.disable()
        httpd.shutdown()
        httpd.server_close()


def send(
    method: str,
    url: str,
    *,
    user: str | None = None,
    password: str = "",
    body: dict[str, Any] | None = None,
    **headers: str,
) -> tuple[int, dict[str, str], bytes]:
    """Send one request with ``urllib``, as ``user`` by HTTP Basic (or anonymously), a
    JSON ``body`` if given, and ``headers`` (``If_Match`` is sent as ``If-Match``);
    return the status, the headers and the raw body, whatever the status."""
    import base64
    import json
    import urllib.error
    import urllib.request

    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if user is not None:
        credentials = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {credentials}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    for name, value in headers.items():
        request.add_header(name.replace("_", "-"), value)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()
