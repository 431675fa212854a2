"""``manage.py sweep_locks``: delete expired claims from every backend that keeps them.

Each backend sweeps and signals (:meth:`~occupy.backends.base.BaseBackend.clear_expired`,
as Django's ``clearsessions`` asks ``SessionStore.clear_expired()``); this command picks
the backends, checks the batch size and prints.

Quiet for cron at ``-v 0`` (nothing unless something failed); at ``-v 1`` one line per
backend, saying so where the store drops expired claims itself; at ``-v 2`` every key
removed as well. A backend whose store cannot be used is reported after the others were
swept, as a ``CommandError`` that names the store and the fix: the command exits
non-zero, without a traceback.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from occupy.backends import get_backend
from occupy.backends.base import DEFAULT_SWEEP_BATCH, MAX_SWEEP_BATCH, BaseBackend
from occupy.conf import occupy_settings
from occupy.exceptions import OccupyError
from occupy.management.trouble import trouble
from occupy.validation import printable


class Command(BaseCommand):
    help = (
        "Delete expired lock claims, in batches, without loading them into memory. "
        "Safe to run while locks are taken and renewed; expired claims already count "
        "as absent, so this only reclaims space. -v 0 prints nothing unless something "
        "failed; -v 2 lists the keys removed."
    )
    # A cron job's command, as Django's migrate skips them: the project's warnings
    # (checked when it was deployed) would make every run print, and cron mail it.
    requires_system_checks: list[str] = []

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
            default=DEFAULT_SWEEP_BATCH,
            metavar="N",
            help=(
                f"Claims deleted per statement (about as many on PostgreSQL), 1 to "
                f"{MAX_SWEEP_BATCH:,} (default {DEFAULT_SWEEP_BATCH:,})."
            ),
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would be deleted; delete nothing."
        )

    def handle(
        self, *args: Any, aliases: list[str] | None, batch_size: int, **options: Any
    ) -> None:
        if not 1 <= batch_size <= MAX_SWEEP_BATCH:
            raise CommandError(
                f"--batch-size must be between 1 and {MAX_SWEEP_BATCH:,}, not {batch_size}."
            )
        try:
            backends = [get_backend(alias) for alias in aliases or occupy_settings.BACKENDS]
        except OccupyError as e:
            raise CommandError(str(e)) from e
        failures = [
            failed for backend in backends if (failed := self.sweep(backend, batch_size, **options))
        ]
        if failures:
            raise CommandError("\n".join(failures))

    def sweep(
        self, backend: BaseBackend, batch_size: int, *, dry_run: bool, verbosity: int, **_: Any
    ) -> str | None:
        """Sweep ``backend`` and say what went; return the line that reports its store's
        failure, if it failed."""
        if backend.expires_by_itself:
            if verbosity >= 1:
                self.stdout.write(
                    f"{backend.alias}: nothing to sweep (the store drops expired claims itself)"
                )
            return None
        removed: list[str] = []
        listing = removed.append if verbosity >= 2 else None
        verb = "would remove" if dry_run else "removed"
        try:
            count = backend.clear_expired(batch_size=batch_size, dry_run=dry_run, removed=listing)
        except OccupyError as e:
            return trouble(backend, e)
        finally:
            for key in removed:
                self.stdout.write(f"{backend.alias}: {verb} {printable(key)}")
        if verbosity >= 1:
            verb = "would delete" if dry_run else "deleted"
            self.stdout.write(
                f"{backend.alias}: {verb} {count} expired claim{'' if count == 1 else 's'}"
            )
        return None
