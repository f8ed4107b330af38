"""Reading the clocks, at the edge: the policy gets an Instant and never reads a clock itself."""

from __future__ import annotations

import sys
import time
from functools import cache

from loomtui.timing import Instant

_BOOT_ID = "/proc/sys/kernel/random/boot_id"


@cache
def boot_id() -> str | None:
    # The monotonic clock is comparable across processes only within one boot.
    try:
        with open(_BOOT_ID, encoding="ascii") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


# The clock a deadline is measured on within one boot: one that keeps counting while the machine
# sleeps, so a 30-minute hold placed before a night's suspend has ended at wake and the canary is
# due then (time.monotonic stops during suspend on Linux and macOS). Linux: CLOCK_BOOTTIME; macOS:
# CLOCK_MONOTONIC, which there counts sleep (mach_continuous_time); elsewhere time.monotonic.
_SINCE_BOOT = getattr(time, "CLOCK_BOOTTIME", None) if sys.platform.startswith("linux") else \
    getattr(time, "CLOCK_MONOTONIC", None) if sys.platform == "darwin" else None


def monotonic() -> float:
    return time.clock_gettime(_SINCE_BOOT) if _SINCE_BOOT is not None else time.monotonic()


def now() -> Instant:
    return Instant(time.time(), monotonic(), boot_id())


def at_wall(wall: float, reading: Instant | None = None) -> Instant:
    """The Instant of `wall`, a wall time read moments ago on this machine (a probe's send, a run's
    start seen by the sentinel): its monotonic reading is `reading`'s (default: now) minus the wall
    time since.
    Exact unless the wall clock jumped in between; what a deadline then measures is the monotonic
    time from there, which no later jump moves."""
    at = reading or now()
    if at.mono is None:
        return Instant(wall)
    return Instant(wall, at.mono - (at.wall - wall), at.boot)


def instant_from(detail: dict, wall: float) -> Instant:
    """The Instant recorded in an event's detail (wall time from the event itself)."""
    mono = detail.get("mono")
    return Instant(wall, float(mono) if isinstance(mono, (int, float)) else None, detail.get("boot"))


def local_zone():
    """The machine's local time zone, with its daylight-saving rules (cron schedules use it)."""
    from dateutil import tz

    return tz.tzlocal()
