"""This process's memory as Linux reports it, for the benchmarks that show it flat."""

from __future__ import annotations

__all__ = ["reset_peak_rss", "status_kib"]


def status_kib(field: str) -> int:
    """Return a ``/proc/self/status`` figure in KiB (``"VmRSS"``, ``"VmHWM"``)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise LookupError(field)


def reset_peak_rss() -> bool:
    """Reset this process's peak resident memory (``VmHWM``), so that it measures one
    phase only; return whether the kernel allowed it."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return True
    except OSError:
        return False
