"""When a job should next have run, and whether it missed: pure functions of times.

A cron schedule fires in the given time zone (the shell passes the machine's local zone, as
cron itself uses); `every 10m` means a run at most 10 minutes after the one before. Nothing
here reads the clock or the process's time zone.
"""

from __future__ import annotations

import datetime as dt

from loomtui.durations import parse_duration


def period(schedule: str) -> float | None:
    """Seconds of an `every ...` schedule; None for cron."""
    text = schedule.strip()
    if text.lower().startswith("every "):
        return parse_duration(text[6:])
    return None


def next_due(schedule: str, after: float, *, tz: dt.tzinfo) -> float:
    """The first time after `after` at which a run is expected to start."""
    every = period(schedule)
    if every is not None:
        return after + every
    from croniter import croniter

    start = dt.datetime.fromtimestamp(after, tz)
    return float(croniter(schedule.strip(), start).get_next(float))


MAX_STEPS = 10_000  # bounds the walk over a long outage of a very frequent cron schedule


def missed(schedule: str, reference: float, now: float, grace: float, *,
           tz: dt.tzinfo) -> tuple[float, float] | None:
    """(first, last) due times missed since `reference` (the last run's start, or when watching
    began, or the last missed time already reported); None when nothing is past its grace.

    Callers move the reference to `last`, so each missed run is reported once.
    """
    if not schedule.strip():
        return None
    first = next_due(schedule, reference, tz=tz)
    if now <= first + grace:
        return None
    every = period(schedule)
    if every is not None:
        steps = int((now - grace - first) // every)
        return first, first + max(0, steps) * every
    last = first
    for _ in range(MAX_STEPS):
        nxt = next_due(schedule, last, tz=tz)
        if now <= nxt + grace:
            break
        last = nxt
    return first, last


def drift(schedule: str, started: float, previous_start: float | None, *, tz: dt.tzinfo) -> float | None:
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
    from croniter import croniter

    # get_prev from a hair after the start counts a run that started exactly on time as on time.
    start = dt.datetime.fromtimestamp(started + 1e-6, tz)
    return started - float(croniter(text, start).get_prev(float))
