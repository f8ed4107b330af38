"""The watchdog's rules, pure: one observation plus what earlier ticks saw → what to do.

Only definitive signals act. A dead pane is tmux's own report that the process exited; an
absence (session gone, agent or poller missing) needs two consecutive observations, and the
poller must stay missing past its grace; an observation that timed out or was denied is
ambiguous and triggers nothing, not even progress toward a trigger.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from .driver import GONE, UNKNOWN as TMUX_UNKNOWN
from .proctree import MISSING, PRESENT

MODAL_COOLDOWN = 5.0


@dataclass(frozen=True)
class Observation:
    tmux: str                              # up / gone / unknown
    pane_dead: bool = False
    dead_status: int | None = None         # tmux does not always learn it (3.3a loses it in a race)
    dead_signal: int | None = None
    agent: str = "unknown"                 # present / missing / unknown
    poller: str = "unknown"
    poller_configured: bool = False
    since_launch: float | None = None      # seconds; None = never launched
    last_mode: str | None = None           # mode of the last launch
    screen: str | None = None              # visible screen, or history when the pane is dead
    why: str = ""


@dataclass(frozen=True)
class Memory:
    """What earlier ticks of this process saw; losing it (a restart) only delays a trigger."""

    gone: int = 0
    agent_missing: int = 0
    poller_missing: int = 0
    poller_missing_since: float | None = None   # monotonic
    last_modal_at: float | None = None          # monotonic
    ambiguous: bool = False


@dataclass(frozen=True)
class Settings:
    boot_grace: float
    poller_grace: float
    resume_failed_match: str
    modals: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Step:
    kind: str                       # recover / dismiss_modal / ambiguous
    cause: str | None = None
    keys: tuple[str, ...] = ()
    note: str = ""


def settings_from(config: object) -> Settings:
    agent = config.agent  # type: ignore[attr-defined]
    return Settings(
        boot_grace=agent.boot_grace,
        poller_grace=config.watchdog.poller_grace,  # type: ignore[attr-defined]
        resume_failed_match=agent.resume_failed_match,
        modals=tuple((m.match, tuple(m.keys)) for m in agent.modals),
    )


def exit_cause(obs: Observation, s: Settings) -> str:
    booting = obs.since_launch is not None and obs.since_launch < max(s.boot_grace, 1.0)
    if (obs.last_mode == "resume" and booting and obs.screen
            and re.search(s.resume_failed_match, obs.screen)):
        return "resume_failed"
    # Killed by a signal or a failing status is a crash; a clean or unreported exit is an exit.
    # Both resume: the label is for the operator, the policy treats them alike.
    if obs.dead_signal or (obs.dead_status not in (None, 0)):
        return "crash"
    return "exit"


def assess(obs: Observation, mem: Memory, s: Settings, mono: float) -> tuple[list[Step], Memory]:
    # An ambiguous look is recorded once when a run of them starts, not on every tick.
    was_ambiguous = mem.ambiguous
    if obs.tmux == TMUX_UNKNOWN:
        steps = [] if was_ambiguous else [Step("ambiguous", note=obs.why)]
        return steps, replace(mem, ambiguous=True)
    mem = replace(mem, ambiguous=False)

    if obs.tmux == GONE:
        gone = mem.gone + 1
        mem = Memory(gone=gone, last_modal_at=mem.last_modal_at)
        if gone >= 2:
            return [Step("recover", "tmux_gone", note="no tmux session on two looks")], Memory()
        return [], mem
    mem = replace(mem, gone=0)

    if obs.pane_dead:
        cause = exit_cause(obs, s)
        return [Step("recover", cause, note=f"the agent exited (status {obs.dead_status})")], Memory()

    steps: list[Step] = []
    if obs.agent == MISSING:
        missing = mem.agent_missing + 1
        if missing >= 2:
            return [Step("recover", "exit", note="no agent process in the pane's tree on two looks")], Memory()
        mem = replace(mem, agent_missing=missing)
    elif obs.agent == PRESENT:
        mem = replace(mem, agent_missing=0)
    else:
        if not was_ambiguous:
            steps.append(Step("ambiguous", note=obs.why or "the process tree could not be read"))
        mem = replace(mem, ambiguous=True)

    if obs.poller_configured and obs.agent == PRESENT:
        booting = obs.since_launch is not None and obs.since_launch < s.boot_grace
        if obs.poller == PRESENT or booting:
            mem = replace(mem, poller_missing=0, poller_missing_since=None)
        elif obs.poller == MISSING:
            since = mono if mem.poller_missing_since is None else mem.poller_missing_since
            count = mem.poller_missing + 1
            mem = replace(mem, poller_missing=count, poller_missing_since=since)
            if count >= 2 and mono - since >= s.poller_grace:
                steps.append(Step("recover", "poller_missing",
                                  note=f"poller missing for {mono - since:.0f}s on {count} looks"))
                return steps, Memory()

    if obs.agent == PRESENT and obs.screen:
        cooling = mem.last_modal_at is not None and mono - mem.last_modal_at < MODAL_COOLDOWN
        for pattern, keys in s.modals:
            if not cooling and re.search(pattern, obs.screen):
                steps.append(Step("dismiss_modal", keys=keys, note=pattern))
                mem = replace(mem, last_modal_at=mono)
                break
    return steps, mem
