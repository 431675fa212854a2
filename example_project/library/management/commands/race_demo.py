"""``manage.py race_demo``: replay four races between writers with several processes
(a student and an admin edit one book, a borrow counter, a stock decrement, a task
pool), first with plain Django and then with each occupy technique, also over HTTP
against the example API, and print what each lost or refused. It deletes the rows it
made."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from example_project.library.http_races import HTTP_ROWS
from example_project.library.races import ROWS


class Command(BaseCommand):
    help = (
        "Replay races between writers with several processes, plain Django then "
        "occupy, and show the updates each lost or refused."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--only",
            metavar="WORDS",
            help="Run only the rows whose race or technique contains WORDS.",
        )

    def handle(self, *args: Any, only: str | None, **options: Any) -> None:
        rows = [
            r
            for r in [*ROWS, *HTTP_ROWS]
            if not only or only.lower() in f"{r.race} {r.technique}".lower()
        ]
        header = ("race", "technique", "updates", "lost", "refused", "seconds")
        lines = []
        notes = []
        for row in rows:
            self.stderr.write(f"running: {row.race} — {row.technique} …")
            outcome = row.run()
            lines.append(
                (
                    row.race,
                    row.technique,
                    str(outcome.updates),
                    str(outcome.lost),
                    str(outcome.refused),
                    f"{outcome.seconds:.2f}",
                )
            )
            if outcome.note:
                notes.append(f"{row.technique}: {outcome.note}")
        widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]
        for line in [header, tuple("-" * w for w in widths), *lines]:
            cells = (value.ljust(width) for value, width in zip(line, widths, strict=True))
            self.stdout.write("  ".join(cells).rstrip())
        self.stdout.write(
            "\nupdates: the changes the clients tried to save\n"
            "lost:    those another process's save silently overwrote (nobody was told)\n"
            "refused: those occupy turned away with an error instead (nothing written, the\n"
            "         client knows; counted after its retries, if it retries)\n"
            "seconds: how long the race took, from the first process's start to the last\n"
            "         one's end\n"
        )
        for note in notes:
            self.stdout.write(f"  {note}")
