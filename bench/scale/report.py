"""Tables on stdout, and each curve as a PNG with its figures beside it as CSV.

Every table and every plot title starts with the machine line (:mod:`bench.scale.machine`).
matplotlib comes from the ``bench`` extra (``pip install -e ".[bench]"``); without it the
tables and CSV files are still written, and the run says which plots it skipped.
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Panel", "Report", "percentile"]

#: One colour per store in every plot (a series is named for its store, maybe followed
#: by what it shows: "Redis achieved"); further series of a store are dashed, dotted.
COLOURS = {
    "PostgreSQL": "tab:blue",
    "MariaDB": "tab:orange",
    "SQLite": "tab:green",
    "Redis": "tab:red",
    "files": "tab:purple",
    "cache (django-redis)": "tab:brown",
}
STYLES = ["-", "--", ":", "-."]


def percentile(values: Sequence[float], q: float) -> float:
    """Return the ``q``-th percentile (0–100) of ``values``, interpolated."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    if len(ordered) == 1:
        return ordered[0]
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median(values: Sequence[float]) -> float:
    """Return the median of ``values`` (NaN if empty)."""
    return statistics.median(values) if values else float("nan")


@dataclass
class Panel:
    """One plot panel: a line per series, ``{label: [(x, y), …]}``."""

    ylabel: str
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    logy: bool = False
    #: A horizontal line (a target), and its label.
    target: tuple[float, str] | None = None

    def add(self, label: str, x: float, y: float) -> None:
        """Add the point ``(x, y)`` to the series ``label``."""
        self.series.setdefault(label, []).append((x, y))


class Report:
    """Where a run's tables, CSV files and plots go."""

    def __init__(self, out: Path, machine: str) -> None:
        self.out = out
        self.machine = machine
        self.written: list[Path] = []
        self.skipped_plots: list[str] = []
        out.mkdir(parents=True, exist_ok=True)

    def table(
        self,
        title: str,
        header: Sequence[str],
        rows: Sequence[Sequence[Any]],
        notes: Sequence[str] = (),
    ) -> None:
        """Print a table: the machine line first, then the title, header and rows."""
        cells = [[_cell(v) for v in row] for row in rows]
        widths = [
            max(len(str(h)), *(len(r[i]) for r in cells)) if cells else len(str(h))
            for i, h in enumerate(header)
        ]
        print(f"\n{self.machine}")
        print(f"## {title}")
        print(
            "  "
            + "  ".join(
                str(h).rjust(w) if i else str(h).ljust(w)
                for i, (h, w) in enumerate(zip(header, widths, strict=True))
            )
        )
        for row in cells:
            print(
                "  "
                + "  ".join(
                    v.rjust(w) if i else v.ljust(w)
                    for i, (v, w) in enumerate(zip(row, widths, strict=True))
                )
            )
        for note in notes:
            print(f"  {note}")

    def csv(self, name: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> Path:
        """Write ``<name>.csv`` (the machine line as a comment first); return its path."""
        path = self.out / f"{name}.csv"
        with path.open("w", newline="") as f:
            f.write(f"# {self.machine}\n")
            writer = csv.writer(f)
            writer.writerow(header)
            for row in rows:
                writer.writerow([_raw(v) for v in row])
        self.written.append(path)
        return path

    def plot(
        self,
        name: str,
        title: str,
        xlabel: str,
        panels: Sequence[Panel],
        *,
        logx: bool = True,
        xticks: Sequence[float] | None = None,
    ) -> Path | None:
        """Draw ``panels`` side by side into ``<name>.png``; ``None`` without matplotlib."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            from matplotlib.ticker import FuncFormatter, NullFormatter, NullLocator
        except ImportError:
            self.skipped_plots.append(name)
            return None
        fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
        for ax, panel in zip(axes[0], panels, strict=True):
            seen: dict[str, int] = {}
            for label, points in panel.series.items():
                points = sorted(p for p in points if p[1] == p[1])  # drop NaN
                if not points:
                    continue
                store = next((name for name in COLOURS if label.startswith(name)), None)
                nth = seen[store or label] = seen.get(store or label, -1) + 1
                ax.plot(
                    [p[0] for p in points],
                    [p[1] for p in points],
                    marker="o",
                    label=label,
                    color=COLOURS.get(store or ""),
                    linestyle=STYLES[nth % len(STYLES)],
                )
            if panel.target is not None:
                ax.axhline(
                    panel.target[0],
                    color="grey",
                    linestyle="--",
                    linewidth=1,
                    label=panel.target[1],
                )
            if logx:
                ax.set_xscale("log")
            if panel.logy:
                ax.set_yscale("log")
                ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
                ax.yaxis.set_minor_formatter(NullFormatter())
            if xticks:
                ax.set_xticks(list(xticks))
                ax.set_xticklabels([_short(x) for x in xticks])
                ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xlabel(xlabel)
            ax.set_ylabel(panel.ylabel)
            ax.grid(True, which="major", alpha=0.3)
            ax.legend(fontsize=7)
        fig.suptitle(f"{_wrap(self.machine)}\n{title}", fontsize=8)
        fig.tight_layout()
        path = self.out / f"{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        self.written.append(path)
        return path


def _wrap(text: str, width: int = 150) -> str:
    words, lines, line = text.split(" "), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    return "\n".join(lines)


def _short(x: float) -> str:
    if x >= 1_000_000 and x % 1_000_000 == 0:
        return f"{x / 1_000_000:g}M"
    if x >= 1000 and x % 1000 == 0:
        return f"{x / 1000:g}k"
    return f"{x:g}"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if value != value:
            return "–"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.2f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _raw(value: Any) -> Any:
    if isinstance(value, float):
        return "" if value != value else f"{value:.6g}"
    return value
