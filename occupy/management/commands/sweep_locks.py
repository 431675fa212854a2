"""``manage.py sweep_locks``: delete expired claims from every backend that keeps them."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from occupy import signals
from occupy.backends import get_backend
from occupy.conf import occupy_settings
from occupy.exceptions import OccupyError


class Command(BaseCommand):
    help = (
        "Delete expired lock claims, in batches, without loading them into memory. "
        "Safe to run while locks are taken and renewed; expired claims already count "
        "as absent, so this only reclaims space."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--using", action="append", metavar="ALIAS",
                            help="Sweep only this backend alias (repeatable). Default: all.")
        parser.add_argument("--batch-size", type=int, default=1000, metavar="N",
                            help="Claims deleted per statement (default 1000).")
        parser.add_argument("--dry-run", action="store_true",
                            help="Count what would be deleted; delete nothing.")

    def handle(self, *args: Any, using: list[str] | None, batch_size: int, dry_run: bool,
               **options: Any) -> None:
        if batch_size < 1:
            raise CommandError(f"--batch-size must be at least 1, not {batch_size}.")
        try:
            aliases = using or list(occupy_settings.BACKENDS)
            backends = [get_backend(alias) for alias in aliases]
        except OccupyError as e:
            raise CommandError(str(e)) from e
        verb = "would delete" if dry_run else "deleted"
        for backend in backends:
            count = backend.sweep(batch_size=batch_size, dry_run=dry_run)
            if count and not dry_run:
                signals.lease_expired.send(sender=type(backend), key=None, count=count)
            self.stdout.write(f"{backend.alias}: {verb} {count} expired claim"
                              f"{'' if count == 1 else 's'}")
