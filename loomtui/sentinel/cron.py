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
        from croniter import croniter  # only a config with cron schedules pays for it

        return float(croniter(expression, dt.datetime.fromtimestamp(after, self.tz)).get_next(float))

    def prev_slot(self, expression: str, before: float) -> float:
        """The last slot strictly before `before`."""
        from croniter import croniter

        return float(croniter(expression, dt.datetime.fromtimestamp(before, self.tz)).get_prev(float))


def in_zone(tz: dt.tzinfo) -> CronSlots:
    return CronSlots(tz)
