"""A recording double of an OpenTelemetry SDK: every call occupy makes on a meter
provider, a tracer provider or anything they return is recorded by its path, e.g.
``meter('occupy').create_histogram('occupy.lease.hold.duration').record``.

Set once per process (the API sets its providers once), so it is installed in a process
of its own: :func:`count_calls` runs there, through ``tests.support.multiproc``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Recorder", "count_calls"]


class Recorder:
    """Stands for any SDK object: a call on it is recorded and answers another one."""

    def __init__(self, calls: list[str], path: str) -> None:
        self._calls = calls
        self._path = path

    def __getattr__(self, name: str) -> Recorder:
        return Recorder(self._calls, f"{self._path}.{name}" if self._path else name)

    def __call__(self, *args: Any, **kwargs: Any) -> Recorder:
        self._calls.append(self._path)
        named = f"({args[0]!r})" if args and isinstance(args[0], str) else "()"
        return Recorder(self._calls, f"{self._path}{named}")


def count_calls(alias: str, every_section: bool, pairs: int) -> list[list[str]]:
    """Install the double as the SDK, then return the calls of each of ``pairs``
    uncontended acquire + release pairs, and of as many ``occupy.lock`` blocks."""
    from django.conf import settings
    from django.test import override_settings
    from opentelemetry import metrics, trace

    import occupy

    calls: list[str] = []
    metrics.set_meter_provider(Recorder(calls, "meter_provider"))  # type: ignore[arg-type]
    trace.set_tracer_provider(Recorder(calls, "tracer_provider"))  # type: ignore[arg-type]
    telemetry = {"TRACE_EVERY_SECTION": every_section}
    found = []
    with override_settings(OCCUPY={**settings.OCCUPY, "TELEMETRY": telemetry}):
        key = f"double-{alias}:1"
        occupy.release(occupy.acquire(key, backend=alias))  # the instruments are made once
        for _ in range(pairs):
            del calls[:]
            occupy.release(occupy.acquire(key, timeout=0, backend=alias))
            found.append(list(calls))
        for _ in range(pairs):
            del calls[:]
            with occupy.lock(key, timeout=0, backend=alias):
                pass
            found.append(list(calls))
    return found
