"""``manage.py list_locks``: show who holds and who waits for which key (never tokens).

A backend whose store cannot be read is reported after the claims of the others were
printed, as a ``CommandError`` that names the store and the fix: the command exits
non-zero, without a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from occupy.backends import get_backend
from occupy.conf import occupy_settings
from occupy.exceptions import OccupyError
from occupy.management.trouble import trouble

COLUMNS = ("backend", "key", "owner", "state", "since", "expires", "fence")


class Command(BaseCommand):
    help = "List live lock claims: key, owner, state, since, expires, fence."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--backend",
            action="append",
            dest="aliases",
            metavar="ALIAS",
            help="List only this backend alias (repeatable). Default: all.",
        )

    def handle(self, *args: Any, aliases: list[str] | None, **options: Any) -> None:
        try:
            backends = [get_backend(alias) for alias in aliases or occupy_settings.BACKENDS]
        except OccupyError as e:
            raise CommandError(str(e)) from e
        rows = []
        failures: list[str] = []
        read: list[str] = []
        for backend in backends:
            try:
                claims = list(backend.claims())
            except NotImplementedError as e:
                self.stderr.write(f"{backend.alias}: {e}")
                continue
            except OccupyError as e:
                failures.append(trouble(backend, e))
                continue
            read.append(backend.alias)
            rows += [
                (
                    backend.alias,
                    c.key,
                    c.owner,
                    c.state,
                    c.since.isoformat(timespec="seconds") if c.since else "-",
                    c.expires_at.isoformat(timespec="seconds"),
                    "-" if c.fence is None else str(c.fence),
                )
                for c in claims
            ]
        if rows or read:
            # "No live claims." alone would deny claims on a store it could not read.
            where = f" on {', '.join(map(repr, read))}" if failures else ""
            self._print(rows, f"No live claims{where}.")
        if failures:
            raise CommandError("\n".join(failures))

    def _print(self, rows: Sequence[tuple[str, ...]], empty: str) -> None:
        if not rows:
            self.stdout.write(empty)
            return
        widths = [max(len(r[i]) for r in [COLUMNS, *rows]) for i in range(len(COLUMNS))]
        for row in [COLUMNS, *rows]:
            cells = (value.ljust(width) for value, width in zip(row, widths, strict=True))
            self.stdout.write("  ".join(cells).rstrip())
