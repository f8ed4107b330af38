"""When a job should next have run, and whether it missed: pure functions of times.

A cron schedule's slots come from the shell (`cron`, a `Cron`: loomtui/sentinel/cron.py computes
them with croniter in the machine's local zone, as cron itself uses): when an expression fires is
a library's arithmetic on a zone's rules, kept out of the sealed core; what a missed slot or a
late start is, is decided here. `every 10m` means a run at most 10 minutes after the one before.
Nothing here reads the clock or the process's time zone.

Wall-clock jumps. A cron schedule is wall time by nature: cron fires a slot when the wall clock
passes it, so the slots are computed on the wall clock and nothing here could be measured on the
monotonic one. But a step of the wall clock changes which slots cron ever saw. Stepped forward
a day, the slots in the day it skipped never came due (cron did not run them, and the job is
not to blame); stepped back a day, the last run's start lies a day ahead, and measured from it
nothing would be missed for a day. What shows a job truly missed a slot is that the slot came
due on a wall clock that ran smoothly, and the grace passed after it. So the sentinel notices
a step between two of its passes (`timing.clock_jump`: the wall time that passed against the
monotonic time that did, on one boot) and starts the wait over from where the clock landed
(`wait_from`): the job's next slot after the landing is the first it can miss. A start that lies
ahead of the wall clock (a step back, noticed or not: another boot) never holds the wait off.
The cost is at most one slot: a run missed just before a step, still inside its grace, is
reported at the next slot instead. A suspend is no step: Loom's monotonic clock counts the
time asleep (clock.monotonic: CLOCK_BOOTTIME), so the two clocks agree after it, and a slot
that came due while the machine slept is reported as missed when the grace has passed: the job
did not run, and the operator hears of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from loomtui.durations import parse_duration
from loomtui.timing import JUMP_TOLERANCE



class Cron(Protocol):
    """The slots of a cron expression, as epoch seconds, in the zone the shell chose."""

    def next_slot(self, expression: str, after: float) -> float:
        """The first slot strictly after `after`."""

    def prev_slot(self, expression: str, before: float) -> float:
        """The last slot strictly before `before`."""


def period(schedule: str) -> float | None:
    """Seconds of an `every ...` schedule; None for cron."""
    text = schedule.strip()
    if text.lower().startswith("every "):
        return parse_duration(text[6:])
    return None


def next_due(schedule: str, after: float, *, cron: Cron) -> float:
    """The first time after `after` at which a run is expected to start."""
    every = period(schedule)
    if every is not None:
        return after + every
    return cron.next_slot(schedule.strip(), after)


def wait_from(candidates: Iterable[float | None], now: float, tolerance: float = JUMP_TOLERANCE) -> float:
    """Where a schedule's wait runs from: the latest of `candidates` (the last run's start, when
    watching began, the last missed slot reported, where a clock step landed) that does not lie
    ahead of `now`; `now` when all do (the wall clock went back past them all)."""
    usable = [c for c in candidates if c is not None and c <= now + tolerance]
    return max(usable) if usable else now


MAX_STEPS = 10_000  # bounds the walk over a long outage of a very frequent cron schedule


def missed(schedule: str, reference: float, now: float, grace: float, *,
           cron: Cron) -> tuple[float, float] | None:
    """(first, last) due times missed since `reference` (the last run's start, or when watching
    began, or the last missed time already reported); None when nothing is past its grace.

    Callers move the reference to `last`, so each missed run is reported once.
    """
    if not schedule.strip():
        return None
    try:
        first = next_due(schedule, reference, cron=cron)
    except ValueError:
        # A cron schedule past its last date (a year field: "0 0 1 12 * 0 2023"): no run is due any more.
        # Raised, it ended every sentinel pass, and no job was scanned or escalated again.
        return None
    if now <= first + grace:
        return None
    every = period(schedule)
    if every is not None:
        steps = int((now - grace - first) // every)
        return first, first + max(0, steps) * every
    last = first
    for _ in range(MAX_STEPS):
        try:
            nxt = next_due(schedule, last, cron=cron)
        except ValueError:
            break  # its last date was `last`
        if now <= nxt + grace:
            break
        last = nxt
    return first, last


def drift(schedule: str, started: float, previous_start: float | None, *, cron: Cron) -> float | None:
    """How late a run started against its schedule (negative: early); None when unknowable.

    Cron: against the last due time at or before the start. `every N`: against the run before
    plus N (the first run of an `every` job has nothing to be late against).
    """
    text = schedule.strip()
    if not text:
        return None
    every = period(text)
    if every is not None:
        return None if previous_start is None else started - (previous_start + every)
    # The slot before a hair after the start counts a run that started exactly on time as on time.
    return started - cron.prev_slot(text, started + 1e-6)


def run_allowance(schedule: str, started: float, grace: float, *, cron: Cron) -> float | None:
    """How long a run that started at `started` may go on before it is overdue: the gap of its
    job's schedule that the start falls in (`every N`: N; cron: from the slot at or before the
    start to the next one), and the missed-run grace; None when nothing bounds it (no schedule, or a
    cron expression past its last date). The whole gap, not the time left to the next slot: a run
    started by hand half an hour before a daily slot is not overdue 40 minutes in.

    A run still going past that is a failure of its own: a job hung on a mount never ends, so it
    never exits non-zero, and cron goes on starting new runs beside it, so no slot is missed either
    (one that waits behind a lock would show as missed: the sentinel tells the overrun instead)."""
    if not schedule.strip():
        return None
    try:
        due = next_due(schedule, started, cron=cron)
    except ValueError:
        return None
    every = period(schedule)
    if every is not None:
        return every + grace
    try:
        # The slot strictly before a hair after the start: a run that started on its slot is in the
        # gap that slot opens.
        opened = cron.prev_slot(schedule.strip(), started + 1e-6)
    except ValueError:
        opened = started  # no slot before it: from the start
    return due - min(opened, started) + grace
