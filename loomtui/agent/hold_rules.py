"""What a hold is and what it refuses: pure rules over the hold's record and `now`.

One mechanism for every kind of hold. The ceiling places one when automatic relaunches run out
(released by an operator's relaunch or `loom release`); an operator places one with a reason and
maybe an end (`loom hold --for 30m`); the harness places one when the agent CLI reports a turn
failed for a quota or a login (hooks/harness_rules: timed, and ended by the next turn that
succeeds, or by `loom release`). While a hold is active, automatic destructive actions are
refused with reason `hold`; observation, probes on request, recording and an operator's own
actions go on.

A timed hold lasts its duration (`until` less `since`) on the monotonic clock from its start when
that start was recorded on this boot: a wall clock stepped forward must not end it early, nor one
stepped back make it last a day longer. Across a reboot its stored wall times decide, as the
relaunch windows do (timing.age); `until` stays the wall time it was meant to end, for the eye.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from loomtui.timing import Instant, as_instant, stored
from loomtui.durations import format_duration, parse_duration

By = Literal["ceiling", "operator", "harness"]
BYS = ("ceiling", "operator", "harness")
# What a hold suspends: the actions Loom takes by itself that change the agent's pane or processes.
Guarded = Literal["relaunch", "reap", "dismiss_modal", "nudge"]
GUARDED: frozenset[str] = frozenset(("relaunch", "reap", "dismiss_modal", "nudge"))


@dataclass(frozen=True)
class Hold:
    since: float
    by: By
    reason: str
    until: float | None = None          # None: until released
    cause: str = ""                    # the ceiling's last cause
    refused: tuple[str, ...] = ()      # "action:cause" keys already recorded once for this hold
    actor: str = ""                    # who placed it: tui, cli, telegram or agent ("" the ceiling, old records)
    mono: float | None = None          # the monotonic clock at `since`, on boot `boot` (None: older records)
    boot: str | None = None

    @property
    def start(self) -> Instant:
        return Instant(self.since, self.mono, self.boot)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Hold:
        """A stored record; the ceiling's records from before operator holds have no `by`."""
        by = record.get("by", "ceiling")
        reasons = record.get("reasons") or []
        reason = record.get("reason") or "; ".join(str(r) for r in reasons) or "held at the ceiling"
        until = record.get("until")
        start = stored(float(record.get("ts", 0.0)), record.get("mono"), record.get("boot"))
        return cls(start.wall, by if by in BYS else "ceiling", str(reason),
                   float(until) if until is not None else None, str(record.get("cause") or ""),
                   tuple(str(k) for k in record.get("refused", ())), str(record.get("actor") or ""),
                   start.mono, start.boot)

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ts": self.since, "by": self.by, "reason": self.reason, "until": self.until,
                               "cause": self.cause, "refused": list(self.refused), "actor": self.actor}
        if self.by == "ceiling":
            out["reasons"] = [self.reason]
        if self.mono is not None:
            out["mono"], out["boot"] = self.mono, self.boot
        return out


def _left(hold: Hold, now: Instant | float) -> float | None:
    """Seconds left (negative: past its end), or None for a hold that lasts until released."""
    if hold.until is None:
        return None
    at, start = as_instant(now), hold.start
    if start.boot is not None and start.boot == at.boot and start.mono is not None and at.mono is not None:
        return (hold.until - hold.since) - max(0.0, at.mono - start.mono)
    # By the stored wall times; a start that seems to lie ahead counts as just now (timing.age).
    return hold.until - max(at.wall, hold.since)


def active(hold: Hold | None, now: Instant | float) -> bool:
    """A timed hold ends by itself when its duration has passed; an untimed one only when released.
    `now` is an Instant (a bare wall time is measured by wall time: display paths that have no other)."""
    if hold is None:
        return False
    left = _left(hold, now)
    return left is None or left > 0


def expired(hold: Hold | None, now: Instant | float) -> bool:
    return hold is not None and not active(hold, now)


def remaining(hold: Hold, now: Instant | float) -> float | None:
    """Seconds left, or None for a hold that lasts until released."""
    left = _left(hold, now)
    return None if left is None else max(0.0, left)


def refuses(hold: Hold | None, action: str, *, automatic: bool, now: Instant | float) -> bool:
    """Automatic destructive actions are refused while the hold is active; an operator's never."""
    if action not in GUARDED:
        raise ValueError(f"not an action a hold guards: {action!r}")
    return automatic and active(hold, now)


def first_refusal(hold: Hold, action: str, cause: str) -> bool:
    """Each kind of refusal is recorded once per hold (a tick every 2 s would flood the ledger);
    every refusal is still counted in the metrics."""
    return f"{action}:{cause}" not in hold.refused


def noting(hold: Hold, action: str, cause: str) -> Hold:
    key = f"{action}:{cause}"
    return hold if key in hold.refused else replace(hold, refused=(*hold.refused, key))


def describe(hold: Hold, now: Instant | float) -> str:
    """One line for the header, `loom status` and Telegram: who, why, and how long is left."""
    left = remaining(hold, now)
    tail = "until released" if left is None else f"{format_duration(left)} left"
    who = ("at the ceiling" if hold.by == "ceiling" else f"by the harness ({hold.cause})" if hold.by == "harness"
           else "by the agent" if hold.actor == "agent" else "by the operator")
    return f"held {who}: {hold.reason} ({tail})"


def parse_request(words: list[str]) -> tuple[str, float | None] | None:
    """`30m deploying the new model` → ("deploying the new model", 1800.0); a duration is
    optional, a reason is not (None without one, or with a duration of zero)."""
    duration = None
    if words:
        try:
            duration = parse_duration(words[0])
        except ValueError:
            duration = None
        else:
            words = words[1:]
    reason = " ".join(words)
    if not reason or (duration is not None and duration <= 0):
        return None
    return reason, duration
