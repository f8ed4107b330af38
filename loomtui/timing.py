"""Moments on both clocks, how long since one, and the one backoff: shared by the rules (sealed:
the standard library only, no clock read here) and by the shell that reads the clocks (clock.py).

Within one boot the monotonic clock decides, so a wall-clock step changes nothing; across boots
(another boot id, or none recorded) the stored wall times do; a moment that seems to lie in the
future counts as just now, the safe direction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Instant:
    """A moment on both clocks: wall (seconds since the epoch) and monotonic on one boot."""

    wall: float
    mono: float | None = None
    boot: str | None = None


def stored(wall: float, mono: Any, boot: Any) -> Instant:
    """The Instant a stored record kept (a hold's start, a launch, its first sighting ready): its
    monotonic reading only when it is a number (records from before Loom kept both clocks have
    none), its boot only when it names one."""
    reading = float(mono) if isinstance(mono, (int, float)) and not isinstance(mono, bool) else None
    return Instant(wall, reading, str(boot) if boot else None)


def raw_age(then: Instant, now: Instant) -> float:
    """Seconds from `then` to `now`; negative when a wall clock says `then` lies in the future."""
    if then.boot is not None and then.boot == now.boot and then.mono is not None and now.mono is not None:
        return now.mono - then.mono
    return now.wall - then.wall


def age(then: Instant, now: Instant) -> float:
    return max(0.0, raw_age(then, now))


def as_instant(now: Instant | float) -> Instant:
    """`now` as an Instant: a bare wall time (a caller that has only that) is measured by wall time."""
    return now if isinstance(now, Instant) else Instant(float(now))


def backoff(attempts: int, base: float, cap: float) -> float:
    """Seconds to wait after `attempts` consecutive failures (0 → none, 1 → base), doubling to `cap`.

    The one backoff of Loom: relaunches, the daemon's crashed loops, Telegram's retries.
    """
    if attempts <= 0:
        return 0.0
    return min(base * (2 ** min(attempts - 1, 30)), cap)


# A disagreement of the two clocks smaller than this between two readings is drift or a slew, not
# a step of the wall clock.
JUMP_TOLERANCE = 60.0


def clock_jump(before: Instant | None, now: Instant) -> float:
    """How far the wall clock was stepped between two readings (forward positive): the wall time
    that passed less the monotonic time that did. 0.0 when it cannot be told (no earlier reading,
    or one of another boot, whose monotonic clock started again)."""
    if before is None or before.boot is None or before.boot != now.boot or before.mono is None or now.mono is None:
        return 0.0
    return (now.wall - before.wall) - (now.mono - before.mono)


def stepped(before: Instant | None, now: Instant, tolerance: float = JUMP_TOLERANCE) -> bool:
    return abs(clock_jump(before, now)) > tolerance
