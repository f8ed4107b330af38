"""Cron slots in a time zone, computed by croniter: the shell's half of sentinel/schedule.py.

The sealed rules in schedule.py decide what a missed run or a late start is; when a cron
expression fires is a third-party library's arithmetic on a time zone's rules, which the
sealed core may not import. The shell (the sentinel tick, metrics, the console, the simulator)
builds one of these for the zone it means (the machine's local zone, as cron itself uses) and
hands it to the rules.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass


@dataclass(frozen=True)
class CronSlots:
    """The `schedule.Cron` the rules take: slots of a cron expression in `tz`, as epoch seconds."""

    tz: dt.tzinfo

    def next_slot(self, expression: str, after: float) -> float:
        """The first slot strictly after `after`."""
        return self._slot(expression, after, forward=True)

    def prev_slot(self, expression: str, before: float) -> float:
        """The last slot strictly before `before`."""
        return self._slot(expression, before, forward=False)

    def _slot(self, expression: str, at: float, *, forward: bool) -> float:
        from croniter import croniter  # only a config with cron schedules pays for it

        slots = croniter(expression, dt.datetime.fromtimestamp(at, self.tz))
        step = slots.get_next if forward else slots.get_prev
        slot = float(step(float))
        while self._repeated(expression, slot):
            slot = float(step(float))
        return slot

    def _repeated(self, expression: str, slot: float) -> bool:
        """A slot in the hour a clock set back repeats (autumn's), of a job at a fixed time: cron
        runs such a job once there, at the first (cron(8): a job whose minute and hour are not
        wildcards is not run again in a repeated interval), where croniter gives both. A job with a
        wildcard minute or hour runs in both, as cron runs it."""
        fields = expression.split()
        if len(fields) < 2 or fields[0].startswith("*") or fields[1].startswith("*"):
            return False
        return dt.datetime.fromtimestamp(slot, self.tz).fold == 1


def in_zone(tz: dt.tzinfo) -> CronSlots:
    return CronSlots(tz)
