"""Moments on both clocks, how long since one, and the one backoff: shared by the rules (sealed:
the standard library only, no clock read here) and by the shell that reads the clocks (clock.py).

Within one boot the monotonic clock decides, so a wall-clock step changes nothing; across boots
(another boot id, or none recorded) the stored wall times do; a moment that seems to lie in the
future counts as just now, the safe direction.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Instant:
    """A moment on both clocks: wall (seconds since the epoch) and monotonic on one boot."""

    wall: float
    mono: float | None = None
    boot: str | None = None


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
