"""The recovery policy: facts, history, config and now in; a decision out. No I/O, no clock.

- Crash-like causes resume the pinned session.
- `preventive` and `resume_failed` go fresh, and so does any session that has already been
  recycled once for `canary_failed`: resuming a wedged session revived the same wedge four
  times in the incident this rule exists for, so repeated wedges are counted per session,
  not only per time window.
- The thrash fuse: `fuse_count` automatic relaunches inside `fuse_window` force fresh.
- The ceiling: `ceiling_count` automatic relaunches inside `ceiling_window` stop automatic
  relaunching, escalate once, and hold until an operator acts.
- Backoff grows between automatic relaunches, capped.
- Operator causes always act, with the mode asked for, and clear a hold.

Windows are measured with the monotonic clock when an entry was recorded on this boot (so a
wall-clock jump changes nothing) and with stored wall times otherwise; an entry that seems to
lie in the future counts as just now, the safe direction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from loomtui.timing import Instant, age, backoff, raw_age

RESUME, FRESH = "resume", "fresh"
RELAUNCH, WAIT, HOLD = "relaunch", "wait", "hold"

CRASH_LIKE = ("crash", "exit", "tmux_gone", "poller_missing", "canary_failed")
ALWAYS_FRESH = ("preventive", "resume_failed")
OPERATOR = ("operator_resume", "operator_fresh")
CAUSES = CRASH_LIKE + ALWAYS_FRESH + OPERATOR
# Not a relaunch, but in the history as one of the operator's: `loom release` of the ceiling's hold
# starts a new budget as a relaunch by hand does (the same relaunches still in the window held the
# agent again at once, and told the operator again, as if the release had done nothing).
RELEASE = "operator_release"


@dataclass(frozen=True)
class Relaunch:
    at: Instant
    cause: str
    mode: str
    old_session: str | None = None
    new_session: str | None = None

    @property
    def automatic(self) -> bool:
        return self.cause not in OPERATOR and self.cause != RELEASE


@dataclass(frozen=True)
class Limits:
    fuse_window: float = 900.0
    fuse_count: int = 3
    ceiling_window: float = 3600.0
    ceiling_count: int = 6
    backoff_base: float = 5.0
    backoff_max: float = 300.0


@dataclass(frozen=True)
class Situation:
    """Everything the decision depends on, gathered by the shell."""

    cause: str
    pinned: str | None
    history: tuple[Relaunch, ...] = ()   # oldest first, in the order they happened (the ledger's)
    held: bool = False
    # Sessions that were ever recycled for canary_failed (older than any window too).
    canary_recycled: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class Decision:
    action: str
    mode: str | None = None
    wait: float = 0.0
    escalate: bool = False
    reasons: tuple[str, ...] = ()

    @property
    def launch_mode(self) -> str:
        """A relaunch's mode (resume or fresh): every relaunch decided has one."""
        if self.mode is None:
            raise ValueError(f"a {self.action} decision has no launch mode")
        return self.mode


def counted(history: tuple[Relaunch, ...], window: float, now: Instant) -> list[Relaunch]:
    """Automatic relaunches inside `window` and after the last operator action. `history` is in the
    order the relaunches happened (the ledger's), which their times need not tell: sorted by age, an
    operator's relaunch dated in the future (another boot, its wall clock ahead) came last and
    cleared every automatic relaunch after it, turning the ceiling, the fuse and the backoff off
    for as long as the clock stayed behind."""
    out: list[Relaunch] = []
    for r in history:
        if not r.automatic:
            out.clear()  # an operator action starts a new budget
            continue
        if age(r.at, now) < window:
            out.append(r)
    return out


def decide(s: Situation, limits: Limits, now: Instant) -> Decision:
    if s.cause not in CAUSES:
        raise ValueError(f"unknown cause {s.cause!r}")
    if s.cause in OPERATOR:
        mode = RESUME if s.cause == "operator_resume" else FRESH
        return Decision(RELAUNCH, mode, reasons=("operator action",))
    if s.held:
        return Decision(HOLD, reasons=("held at the ceiling until an operator acts",))

    in_ceiling = counted(s.history, limits.ceiling_window, now)
    if len(in_ceiling) >= limits.ceiling_count:
        return Decision(
            HOLD,
            escalate=True,
            reasons=(f"ceiling: {len(in_ceiling)} automatic relaunches within {limits.ceiling_window:g}s",),
        )

    # A relaunch dated in the future (the wall clock went back, or another boot) still counts
    # toward the fuse and the ceiling, but cannot hold the next one off: that would wait as
    # long as the clock is wrong, silently. The ceiling still bounds a storm.
    dated = [r for r in in_ceiling if raw_age(r.at, now) >= 0]
    if dated:
        latest = min(age(r.at, now) for r in dated)
        needed = backoff(len(in_ceiling), limits.backoff_base, limits.backoff_max)
        if latest < needed:
            return Decision(WAIT, wait=needed - latest,
                            reasons=(f"backoff: {needed:g}s after relaunch {len(in_ceiling)}",))

    reasons: list[str] = []
    mode = RESUME
    if s.cause in ALWAYS_FRESH:
        mode = FRESH
        reasons.append(f"{s.cause} always starts fresh")
    if s.pinned is not None and s.pinned in s.canary_recycled:
        mode = FRESH
        reasons.append("this session was already recycled for canary_failed")
    in_fuse = counted(s.history, limits.fuse_window, now)
    if len(in_fuse) >= limits.fuse_count:
        mode = FRESH
        reasons.append(f"fuse: {len(in_fuse)} automatic relaunches within {limits.fuse_window:g}s")
    if s.pinned is None and mode == RESUME:
        mode = FRESH
        reasons.append("no pinned session")
    if not reasons:
        reasons.append(f"{s.cause} resumes the pinned session")
    return Decision(RELAUNCH, mode, reasons=tuple(reasons))


class _Limited(Protocol):
    """The watchdog's keys the policy reads (loomtui.config.WatchdogConfig has them)."""

    @property
    def fuse_window(self) -> float: ...

    @property
    def fuse_count(self) -> int: ...

    @property
    def ceiling_window(self) -> float: ...

    @property
    def ceiling_count(self) -> int: ...

    @property
    def backoff_base(self) -> float: ...

    @property
    def backoff_max(self) -> float: ...


class Configured(Protocol):
    @property
    def watchdog(self) -> _Limited: ...


def limits_from(config: Configured) -> Limits:
    w = config.watchdog
    return Limits(w.fuse_window, w.fuse_count, w.ceiling_window, w.ceiling_count, w.backoff_base, w.backoff_max)
