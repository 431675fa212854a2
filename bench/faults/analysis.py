"""What a store's ledger says after a soak: the figures of the report and the verdict.

The rule (also in docs/benchmarks/faults.md). A store **fails** when any of these is
not zero:

- **overlaps**: two sections of one key whose fenced writes were both accepted while
  their read-to-write spans (in the ledger's order) intersect;
- **lost increments**: accepted writes (the ledger's own count) minus the counter's
  value, summed over the keys;
- **fence violations**: two grants of one key with the same fence, or a grant whose
  fence is not above a fence of that key recorded before it was requested (a fence
  that went down);
- **unexplained refusals**: a fenced read or write refused (someone else's higher
  fence was already recorded) in a section that was not paused past its ttl, did not
  last its ttl, and did not hold its grant across a restart that lost the store's data:
  two holders at once that only the fence caught.

A store where no section ran at all fails too: nothing was checked.

Refusals with a reason are counted, not failed: a holder paused past its ttl (its
write *must* be refused when someone took the key meanwhile), a section that outlived
its ttl on a loaded machine, and **grants lost with the store's data** (a Redis restart
without persistence forgets every key, so a second holder can come in within the ttl
of the lost grant; the fence refuses the first one's stale step).
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from bench.faults.ledger import SectionRow

__all__ = ["Fault", "Tally", "tally"]


@dataclass(frozen=True)
class Fault:
    """A fault the coordinator injected, and when (``time.monotonic()``)."""

    kind: str
    started: float
    ended: float
    #: Whether it destroyed what the store held (a restart without persistence).
    loses_data: bool = False
    detail: str = ""


@dataclass
class Tally:
    """The figures of one store's soak."""

    sections: int = 0
    accepted: int = 0
    refused: int = 0
    unfinished: int = 0
    overlaps: int = 0
    lost_increments: int = 0
    fence_violations: int = 0
    #: Refusals by reason: ``paused``, ``outlived ttl``, ``lost with the store's data``,
    #: ``unexplained``.
    refusals: Counter[str] = field(default_factory=Counter)
    paused: int = 0
    paused_accepted: int = 0
    #: Sections whose grant was live when a restart lost the store's data.
    grants_lost: int = 0
    #: The longest time, in seconds, a key went without a grant while workers wanted it.
    longest_unobtainable: float = 0.0
    #: Which key that was, when, and the faults around it.
    longest_context: str = ""
    faults: Counter[str] = field(default_factory=Counter)
    #: Exceptions the workers met: occupy's by class, and foreign ones by text.
    exceptions: Counter[str] = field(default_factory=Counter)
    foreign: Counter[str] = field(default_factory=Counter)
    #: What went wrong, one line each (the first few of each kind).
    problems: list[str] = field(default_factory=list)

    @property
    def failures(self) -> int:
        """Return the number of violations of the rule (see the module docstring)."""
        return (
            self.overlaps
            + self.lost_increments
            + self.fence_violations
            + self.refusals["unexplained"]
            + (self.sections == 0)
        )

    @property
    def passed(self) -> bool:
        """Return whether the store passed."""
        return self.failures == 0


def _note(tally: Tally, kind: str, text: str, limit: int = 5) -> None:
    if sum(p.startswith(kind) for p in tally.problems) < limit:
        tally.problems.append(f"{kind}: {text}")


def overlaps(sections: Iterable[SectionRow]) -> list[tuple[SectionRow, SectionRow]]:
    """Return the pairs of accepted sections of one key whose spans, from fenced read to
    fenced write in the ledger's order, intersect."""
    by_key: dict[str, list[SectionRow]] = defaultdict(list)
    for s in sections:
        if s.write_ok and s.write_seq is not None:
            by_key[s.key].append(s)
    pairs: list[tuple[SectionRow, SectionRow]] = []
    for rows in by_key.values():
        rows.sort(key=lambda s: s.read_seq)
        open_rows: list[SectionRow] = []
        for s in rows:
            open_rows = [
                o for o in open_rows if o.write_seq is not None and o.write_seq > s.read_seq
            ]
            pairs.extend((o, s) for o in open_rows)
            open_rows.append(s)
    return pairs


def fence_violations(sections: Sequence[SectionRow]) -> list[tuple[str, SectionRow]]:
    """Return the sections whose grant broke the fence's promise, with why: a fence
    another grant of the key also got, or one not above a fence of the key recorded
    before this grant was requested."""
    found: list[tuple[str, SectionRow]] = []
    by_key: dict[str, list[SectionRow]] = defaultdict(list)
    for s in sections:
        by_key[s.key].append(s)
    for rows in by_key.values():
        seen: dict[int, SectionRow] = {}
        for s in rows:
            if s.fence in seen:
                found.append(
                    (f"fence {s.fence} granted twice (sections {seen[s.fence].id} and {s.id})", s)
                )
            seen.setdefault(s.fence, s)
        rows = sorted(rows, key=lambda s: s.read_seq)
        seqs = [s.read_seq for s in rows]
        highest: list[int] = []  # highest fence among rows[: i + 1]
        for s in rows:
            highest.append(max(s.fence, highest[-1]) if highest else s.fence)
        for s in rows:
            before = bisect.bisect_left(seqs, s.after_seq)  # recorded before the request
            if before and highest[before - 1] > s.fence:
                found.append(
                    (
                        f"fence {s.fence} (section {s.id}) below {highest[before - 1]}"
                        " recorded before it was requested",
                        s,
                    )
                )
    return found


def _lost_with_data(s: SectionRow, until: float, faults: Sequence[Fault]) -> bool:
    return any(f.loses_data and s.t_grant < f.started < until for f in faults)


def longest_gap(sections: Iterable[SectionRow], ended: float) -> tuple[float, str, float]:
    """Return the longest time a key went without a grant, from the store's first grant
    (when the workers were up) to ``ended``: (seconds, key, when the gap began)."""
    grants: dict[str, list[float]] = defaultdict(list)
    for s in sections:
        grants[s.key].append(s.t_grant)
    if not grants:
        return 0.0, "", 0.0
    first = min(min(times) for times in grants.values())
    longest = (0.0, "", 0.0)
    for key, times in grants.items():
        points = [first, *sorted(times), ended]
        for a, b in itertools.pairwise(points):
            longest = max(longest, (b - a, key, a))
    return longest


def tally(
    sections: Sequence[SectionRow],
    records: dict[str, tuple[int, int]],
    faults: Sequence[Fault],
    *,
    ttl: float,
    started: float,
    ended: float,
    outcomes: dict[tuple[str, str], int] | None = None,
) -> Tally:
    """Return the figures of a store's soak from its ledger and the faults injected."""
    t = Tally(sections=len(sections))
    if not sections:
        _note(t, "no section ran", "the workers never got a key (see their logs: --keep)")
    for f in faults:
        t.faults[f.kind] += 1
    for s in sections:
        _tally_section(t, s, faults, ttl=ttl, ended=ended)
    for a, b in overlaps(sections):
        t.overlaps += 1
        _note(
            t,
            "overlap",
            f"key {a.key}: section {a.id} (fence {a.fence}, "
            f"{a.read_seq}–{a.write_seq}) and {b.id} (fence {b.fence}, "
            f"{b.read_seq}–{b.write_seq}) both accepted",
        )
    _tally_records(t, sections, records)
    for why, _s in fence_violations(sections):
        t.fence_violations += 1
        _note(t, "fence", why)
    _tally_longest_gap(t, sections, faults, ttl=ttl, started=started, ended=ended)
    for (kind, detail), n in (outcomes or {}).items():
        if kind == "foreign":
            t.foreign[detail] += n
        else:
            t.exceptions[f"{kind}: {detail}" if detail else kind] += n
    return t


def _tally_section(
    t: Tally, s: SectionRow, faults: Sequence[Fault], *, ttl: float, ended: float
) -> None:
    """Count one section: accepted, unfinished, or refused (and why)."""
    t.paused += s.paused
    if not s.read_ok:
        refused_at: float | None = s.t_grant
    elif s.write_seq is None:
        t.unfinished += 1
        return
    elif s.write_ok:
        t.accepted += 1
        t.paused_accepted += s.paused
        if s.t_write is not None and _lost_with_data(s, s.t_write, faults):
            t.grants_lost += 1
        return
    else:
        refused_at = s.t_write
    t.refused += 1
    until = refused_at if refused_at is not None else ended
    if _lost_with_data(s, until, faults):
        t.grants_lost += 1
    t.refusals[_refusal_reason(t, s, until, faults, ttl=ttl)] += 1


def _refusal_reason(
    t: Tally, s: SectionRow, until: float, faults: Sequence[Fault], *, ttl: float
) -> str:
    """Return why section ``s`` was refused at ``until``; note an unexplained one."""
    if s.paused:
        return "paused"
    if _lost_with_data(s, until, faults):
        return "lost with the store's data"
    if until - s.t_call >= ttl:
        return "outlived ttl"
    _note(
        t,
        "unexplained refusal",
        f"section {s.id} (key {s.key}, fence {s.fence}, "
        f"worker {s.worker}) {'read' if not s.read_ok else 'write'} refused "
        f"{until - s.t_call:.3f} s after acquire was called",
    )
    return "unexplained"


def _tally_records(
    t: Tally, sections: Sequence[SectionRow], records: dict[str, tuple[int, int]]
) -> None:
    """Count the increments lost: each key's counter against its accepted writes."""
    accepted_rows = Counter(s.key for s in sections if s.write_ok)
    for key, (value, accepted) in records.items():
        if accepted != value:
            t.lost_increments += abs(accepted - value)
            _note(t, "lost increments", f"key {key}: {accepted} accepted writes, counter {value}")
        if accepted != accepted_rows[key]:
            # One transaction writes both: the ledger disagreeing with itself is a loss.
            t.lost_increments += abs(accepted - accepted_rows[key])
            _note(
                t,
                "lost increments",
                f"key {key}: {accepted} accepted by the counter, "
                f"{accepted_rows[key]} sections recorded as accepted",
            )


def _tally_longest_gap(
    t: Tally,
    sections: Sequence[SectionRow],
    faults: Sequence[Fault],
    *,
    ttl: float,
    started: float,
    ended: float,
) -> None:
    """Set the longest time a key could not be had, with the faults around it."""
    t.longest_unobtainable, key, since = longest_gap(sections, ended)
    if key:
        before = [
            f"{f.kind} at {f.started - since:+.1f} s"
            for f in faults
            if since - 2 * ttl - 5 < f.started < since + t.longest_unobtainable
        ]
        t.longest_context = (
            f"key {key} from {since - started:.1f} s into the soak; "
            f"faults around it: {', '.join(before) or 'none'}"
        )
