"""``manage.py sweep_locks``: delete expired claims from every backend that keeps them.

Quiet for cron at ``-v 0`` (nothing unless something failed); at ``-v 1`` one line per
backend, saying so where the store drops expired claims itself; at ``-v 2`` every key
removed as well. A backend whose store cannot be used is reported after the others were
swept, as a ``CommandError`` that names the store and the fix: the command exits
non-zero, without a traceback.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from occupy import signals
from occupy.backends import get_backend
from occupy.conf import occupy_settings
from occupy.exceptions import OccupyError
from occupy.management.trouble import trouble


class Command(BaseCommand):
    help = (
        "Delete expired lock claims, in batches, without loading them into memory. "
        "Safe to run while locks are taken and renewed; expired claims already count "
        "as absent, so this only reclaims space. -v 0 prints nothing unless something "
        "failed; -v 2 lists the keys removed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--backend",
            action="append",
            dest="aliases",
            metavar="ALIAS",
            help="Sweep only this backend alias (repeatable). Default: all.",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            default=1000,
            metavar="N",
            help="Claims deleted per statement (default 1000).",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would be deleted; delete nothing."
        )

    def handle(
        self,
        *args: Any,
        aliases: list[str] | None,
        batch_size: int,
        dry_run: bool,
        verbosity: int = 1,
        **options: Any,
    ) -> None:
        if batch_size < 1:
            raise CommandError(f"--batch-size must be at least 1, not {batch_size}.")
        try:
            aliases = aliases or list(occupy_settings.BACKENDS)
            backends = [get_backend(alias) for alias in aliases]
        except OccupyError as e:
            raise CommandError(str(e)) from e
        verb = "would delete" if dry_run else "deleted"
        failures: list[str] = []
        for backend in backends:
            if backend.expires_by_itself:
                if verbosity >= 1:
                    self.stdout.write(
                        f"{backend.alias}: nothing to sweep (the store drops expired claims itself)"
                    )
                continue
            removed: list[str] = []
            try:
                if verbosity >= 2:
                    count = backend.sweep(
                        batch_size=batch_size, dry_run=dry_run, removed=removed.append
                    )
                else:
                    count = backend.sweep(batch_size=batch_size, dry_run=dry_run)
            except OccupyError as e:
                failures.append(trouble(backend, e))
                if removed:
                    self._list(backend.alias, removed, dry_run)
                continue
            if count and not dry_run:
                signals.lease_expired.send(sender=type(backend), key=None, count=count)
            if verbosity >= 2:
                self._list(backend.alias, removed, dry_run)
            if verbosity >= 1:
                self.stdout.write(
                    f"{backend.alias}: {verb} {count} expired claim{'' if count == 1 else 's'}"
                )
        if failures:
            raise CommandError("\n".join(failures))

    def _list(self, alias: str, keys: list[str], dry_run: bool) -> None:
        verb = "would remove" if dry_run else "removed"
        for key in keys:
            self.stdout.write(f"{alias}: {verb} {key}")
