"""Reading the clocks, at the edge: the policy gets an Instant and never reads a clock itself."""

from __future__ import annotations

import time
from functools import cache

from loomtui.agent.policy import Instant

_BOOT_ID = "/proc/sys/kernel/random/boot_id"


@cache
def boot_id() -> str | None:
    # The monotonic clock is comparable across processes only within one boot.
    try:
        with open(_BOOT_ID, encoding="ascii") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def now() -> Instant:
    return Instant(time.time(), time.monotonic(), boot_id())


def instant_from(detail: dict, wall: float) -> Instant:
    """The Instant recorded in an event's detail (wall time from the event itself)."""
    mono = detail.get("mono")
    return Instant(wall, float(mono) if isinstance(mono, (int, float)) else None, detail.get("boot"))


def local_zone():
    """The machine's local time zone, with its daylight-saving rules (cron schedules use it)."""
    from dateutil import tz

    return tz.tzlocal()
