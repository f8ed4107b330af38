"""Reading the clocks, at the edge: the policy gets an Instant and never reads a clock itself.

The clock is a port. Every module that tells the time, waits, or measures a deadline reads it here
(`wall`, `monotonic`, `boot_id`, `now`, `sleep`), never from `time` itself (a hygiene test says so):
the daemon runs on the machine's clocks (`SYSTEM`), and `loom sim` installs its virtual one for a
run (`use`), so the same code that relaunches, probes and waits here runs there on simulated time,
as FoundationDB's real code runs on its simulator's clock.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from loomtui import platform
from loomtui.timing import Instant

# The clock a deadline is measured on within one boot: one that keeps counting while the machine
# sleeps, so a 30-minute hold placed before a night's suspend has ended at wake and the canary is
# due then (time.monotonic stops during suspend on Linux and macOS). Linux: CLOCK_BOOTTIME; macOS:
# CLOCK_MONOTONIC, which there counts sleep (mach_continuous_time); elsewhere time.monotonic.
_SINCE_BOOT = getattr(time, "CLOCK_BOOTTIME", None) if sys.platform.startswith("linux") else \
    getattr(time, "CLOCK_MONOTONIC", None) if sys.platform == "darwin" else None


class Clock(Protocol):
    """What Loom asks of time: the wall clock, the monotonic clock of this boot, which boot, a wait."""

    def wall(self) -> float: ...

    def monotonic(self) -> float: ...

    def boot_id(self) -> str | None: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The machine's clocks: time.time, CLOCK_BOOTTIME (or its platform's like), the kernel's boot id
    (loomtui.platform: /proc on Linux, kern.bootsessionuuid on macOS)."""

    def wall(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.clock_gettime(_SINCE_BOOT) if _SINCE_BOOT is not None else time.monotonic()

    def boot_id(self) -> str | None:
        # The monotonic clock is comparable across processes only within one boot.
        return platform.current().boot_id()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(seconds, 0.0))


SYSTEM = SystemClock()
_current: Clock = SYSTEM


@contextmanager
def use(clock: Clock) -> Iterator[Clock]:
    """Run the block on `clock` (the simulator's), then on the one before; one at a time per process."""
    global _current
    before, _current = _current, clock
    try:
        yield clock
    finally:
        _current = before


def current() -> Clock:
    return _current


def wall() -> float:
    return _current.wall()


def monotonic() -> float:
    return _current.monotonic()


def boot_id() -> str | None:
    return _current.boot_id()


def sleep(seconds: float) -> None:
    _current.sleep(seconds)


def now() -> Instant:
    c = _current
    return Instant(c.wall(), c.monotonic(), c.boot_id())


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


def local_zone():
    """The machine's local time zone, with its daylight-saving rules (cron schedules use it)."""
    from dateutil import tz

    return tz.tzlocal()
