"""``manage.py race_demo``: replay the seeds' races with several processes, first with
plain Django and then with each occupy technique, also over HTTP against the example
API, and print what each lost."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from example_project.library.http_races import HTTP_ROWS
from example_project.library.races import ROWS


class Command(BaseCommand):
    help = "Replay the seeds' races with several processes and show the lost updates."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--only", metavar="WORDS",
                            help="Run only the rows whose technique or race contains WORDS.")

    def handle(self, *args: Any, only: str | None, **options: Any) -> None:
        rows = [r for r in [*ROWS, *HTTP_ROWS]
                if not only or only.lower() in f"{r.technique} {r.race}".lower()]
        header = ("technique", "race", "ops", "lost updates", "refused", "ms/op")
        lines = []
        notes = []
        for row in rows:
            self.stderr.write(f"running: {row.technique} — {row.race} …")
            outcome = row.run()
            lines.append((row.technique, row.race, str(outcome.operations), str(outcome.lost),
                          str(outcome.refused),
                          f"{1000 * outcome.seconds / max(outcome.operations, 1):.1f}"))
            if outcome.note:
                notes.append(f"{row.technique}: {outcome.note}")
        widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]
        for line in [header, tuple("-" * w for w in widths), *lines]:
            cells = (value.ljust(width) for value, width in zip(line, widths, strict=True))
            self.stdout.write("  ".join(cells).rstrip())
        self.stdout.write(
            "\nlost updates: changes another process's save() silently overwrote. "
            "refused: writes occupy turned away with an error instead of losing data "
            "(after the client's retries, if it retries)."
        )
        for note in notes:
            self.stdout.write(f"  {note}")
