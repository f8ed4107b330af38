"""The watchdog's rules, pure: one observation plus what earlier ticks saw → what to do.

Only definitive signals act. A dead pane is tmux's own report that the process exited; an
absence (session gone, agent or poller missing) needs two consecutive observations, and the
poller must stay missing past its grace; an observation that timed out or was denied is
ambiguous and triggers nothing, not even progress toward a trigger.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from loomtui.states import GONE, MISSING, PRESENT
from loomtui.states import UNKNOWN as TMUX_UNKNOWN

# What a look can lead to, and the recovery causes the watchdog reports (a subset of policy.CAUSES).
StepKind = Literal["recover", "dismiss_modal", "ambiguous", "repair_socket", "alert"]
Cause = Literal["crash", "exit", "tmux_gone", "poller_missing", "resume_failed"]

MODAL_COOLDOWN = 5.0
# The lines of a screen that say what its process said last: a CLI whose resume finds no
# conversation says so and exits, and tmux adds its "Pane is dead" line below.
LAST_SAID = 6
MODAL_PRESSES = 2  # a dialog still there after this many presses is not the dialog we know


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
    # When tmux says "gone": does the server that runs the agent still run, unreachable on its
    # socket (deleted by a /tmp cleaner)? A relaunch then would start a second agent.
    socket_lost: bool = False


@dataclass(frozen=True)
class Looks:
    """What earlier ticks of this process saw; losing it (a restart) only delays a trigger."""

    gone: int = 0
    agent_missing: int = 0
    poller_missing: int = 0
    poller_missing_since: float | None = None   # monotonic
    last_modal_at: float | None = None          # monotonic
    modal_presses: int = 0                      # presses while one dialog stays on screen
    ambiguous: bool = False
    ambiguous_since: float | None = None        # monotonic start of a run of unclear looks
    alerted: frozenset[str] = frozenset()       # operator alerts already sent for the current runs


def _with(mem: Looks, **changes: Any) -> Looks:
    """`replace`, but the same Looks when nothing changes: a healthy tick builds nothing new."""
    for name, value in changes.items():
        if getattr(mem, name) != value:
            return replace(mem, **changes)
    return mem


@dataclass(frozen=True)
class Settings:
    boot_grace: float
    poller_grace: float
    resume_failed_match: str
    modals: tuple[tuple[str, tuple[str, ...]], ...] = ()
    ambiguous_alert: float = 600.0


@dataclass(frozen=True)
class Step:
    kind: StepKind
    cause: Cause | None = None
    keys: tuple[str, ...] = ()
    note: str = ""


# The configuration as these rules read it (loomtui.config.Config has it; the core may not import it).
class _Modal(Protocol):
    @property
    def match(self) -> str: ...

    @property
    def keys(self) -> list[str]: ...


class _AgentKeys(Protocol):
    @property
    def boot_grace(self) -> float: ...

    @property
    def resume_failed_match(self) -> str: ...

    @property
    def modals(self) -> Sequence[_Modal]: ...


class _WatchdogKeys(Protocol):
    @property
    def poller_grace(self) -> float: ...

    @property
    def ambiguous_alert(self) -> float: ...


class Configured(Protocol):
    @property
    def agent(self) -> _AgentKeys: ...

    @property
    def watchdog(self) -> _WatchdogKeys: ...


def settings_from(config: Configured, *, has_dialogs: bool) -> Settings:
    """`has_dialogs` is the driver's: without dialogs (the stream-json driver) the pane shows the
    assistant's own text, which may quote a dialog's words, so no modal is ever looked for."""
    agent = config.agent
    return Settings(
        boot_grace=agent.boot_grace,
        poller_grace=config.watchdog.poller_grace,
        resume_failed_match=agent.resume_failed_match,
        modals=tuple((m.match, tuple(m.keys)) for m in agent.modals) if has_dialogs else (),
        ambiguous_alert=config.watchdog.ambiguous_alert,
    )


def said_last(pattern: str, screen: str | None) -> bool:
    """`pattern` in the screen's last LAST_SAID lines that are not blank: what the process said as
    it ended (or says now). Searched through the whole history, a resumed conversation that quoted
    the resume failure's phrase (an agent at work on Loom itself), redrawn by the TUI before a
    crash in its boot grace, was taken for a failed resume, and the conversation started fresh."""
    if not screen:
        return False
    tail = [line for line in screen.splitlines() if line.strip()][-LAST_SAID:]
    return re.search(pattern, "\n".join(tail)) is not None


def exit_cause(obs: Observation, s: Settings) -> Cause:
    booting = obs.since_launch is not None and obs.since_launch < max(s.boot_grace, 1.0)
    if obs.last_mode == "resume" and booting and said_last(s.resume_failed_match, obs.screen):
        return "resume_failed"
    # Killed by a signal or a failing status is a crash; a clean or unreported exit is an exit.
    # Both resume: the label is for the operator, the policy treats them alike.
    if obs.dead_signal or (obs.dead_status not in (None, 0)):
        return "crash"
    return "exit"


def _unclear(mem: Looks, mono: float, why: str, s: Settings) -> tuple[list[Step], Looks]:
    """An ambiguous look: no progress toward any trigger (counters reset), recorded once per run,
    and the operator told once if it lasts: giving up, even on seeing, is never silent."""
    steps = [] if mem.ambiguous else [Step("ambiguous", note=why)]
    since = mem.ambiguous_since if mem.ambiguous_since is not None else mono
    mem = _with(mem, gone=0, agent_missing=0, poller_missing=0, poller_missing_since=None,
                  ambiguous=True, ambiguous_since=since)
    if mono - since >= s.ambiguous_alert and "ambiguous" not in mem.alerted:
        steps.append(Step("alert", note=f"Loom cannot see the agent clearly for {mono - since:.0f}s: {why}"))
        mem = _with(mem, alerted=mem.alerted | {"ambiguous"})
    return steps, mem


def _clear(mem: Looks) -> Looks:
    return _with(mem, ambiguous=False, ambiguous_since=None, alerted=mem.alerted - {"ambiguous"})


def assess(obs: Observation, mem: Looks, s: Settings, mono: float) -> tuple[list[Step], Looks]:
    if obs.tmux == TMUX_UNKNOWN:
        return _unclear(mem, mono, obs.why, s)

    if obs.tmux == GONE and obs.socket_lost:
        # Our tmux server runs but its socket does not answer. Ask it to recreate the socket;
        # never start a second agent beside the first.
        steps, mem = _unclear(mem, mono, "the tmux server runs but its socket is gone", s)
        return [Step("repair_socket", note="the tmux server runs but its socket is gone"), *steps], mem

    if obs.tmux == GONE:
        gone = mem.gone + 1
        mem = Looks(gone=gone, last_modal_at=mem.last_modal_at, alerted=mem.alerted - {"ambiguous"})
        if gone >= 2:
            return [Step("recover", "tmux_gone", note="no tmux session on two looks")], Looks(alerted=mem.alerted)
        return [], mem

    if obs.pane_dead:
        cause = exit_cause(obs, s)
        return [Step("recover", cause, note=f"the agent exited (status {obs.dead_status})")], \
            Looks(alerted=mem.alerted - {"ambiguous"})

    if obs.agent not in (PRESENT, MISSING):
        return _unclear(mem, mono, obs.why or "the process tree could not be read", s)

    if obs.agent == MISSING:
        mem = _with(_clear(mem), gone=0)
        missing = mem.agent_missing + 1
        if missing >= 2:
            return [Step("recover", "exit", note="no agent process in the pane's tree on two looks")], \
                Looks(alerted=mem.alerted)
        return [], _with(mem, agent_missing=missing)

    steps = []
    booting = obs.since_launch is not None and obs.since_launch < s.boot_grace
    if obs.poller_configured and not booting and obs.poller not in (PRESENT, MISSING):
        # The agent is seen but its poller cannot be told: no progress toward poller_missing.
        steps, mem = _unclear(mem, mono, obs.why or "the poller could not be told from the tree", s)
    else:
        mem = _with(_clear(mem), gone=0, agent_missing=0)
        if obs.poller_configured:
            if obs.poller == PRESENT or booting:
                mem = _with(mem, poller_missing=0, poller_missing_since=None)
            else:  # MISSING
                since = mono if mem.poller_missing_since is None else mem.poller_missing_since
                count = mem.poller_missing + 1
                mem = _with(mem, poller_missing=count, poller_missing_since=since)
                if count >= 2 and mono - since >= s.poller_grace:
                    return [Step("recover", "poller_missing",
                                 note=f"poller missing for {mono - since:.0f}s on {count} looks")], \
                        Looks(alerted=mem.alerted)

    if obs.screen:
        matched = next(((p, k) for p, k in s.modals if re.search(p, obs.screen)), None)
        if matched is None:
            mem = _with(mem, modal_presses=0, alerted=mem.alerted - {"modal"})
        else:
            pattern, keys = matched
            cooling = mem.last_modal_at is not None and mono - mem.last_modal_at < MODAL_COOLDOWN
            if mem.modal_presses < MODAL_PRESSES and not cooling:
                steps.append(Step("dismiss_modal", keys=keys, note=pattern))
                mem = _with(mem, last_modal_at=mono, modal_presses=mem.modal_presses + 1)
            elif mem.modal_presses >= MODAL_PRESSES and not cooling and "modal" not in mem.alerted:
                # Pressing on would type into whatever is there; a human has to look.
                steps.append(Step("alert", note=f"a dialog matching {pattern!r} is still on screen after "
                                                f"{MODAL_PRESSES} presses; Loom stopped pressing"))
                mem = _with(mem, alerted=mem.alerted | {"modal"})
    return steps, mem


# -- the stream-json driver's resume check ---------------------------------------------------

# FAILED: the resume found no conversation (the caller starts fresh, discarding it); DIED: the CLI
# exited without saying so (the caller calls that a launch death, and the conversation stays).
WAIT, READY, FAILED, DIED = "wait", "ready", "failed", "died"


@dataclass(frozen=True)
class BootLook:
    """One look at a stream-json agent during its launch check (what the pump and pane said since
    the launch: first `init`, first `result`, an exit)."""

    elapsed: float                       # seconds since the launch
    exited: bool = False                 # the CLI exited (the pane died, or the pump recorded it)
    exit_status: int | None = None
    screen_failed: bool = False          # the CLI's stderr (pane or transcript) shows `agent.resume_failed_match`
    pump_up: bool = False                # the new pump has written its status file
    init_seen: bool = False              # the CLI's system/init event came
    first_result_error: bool | None = None   # the first `result` since the launch: error or not; None = none yet
    busy: bool = False                   # a turn running, or messages queued (a new pump delivers leftovers)
    result_failed: bool = False          # that first result is an error whose words match `resume_failed_match`
    error_before_init: bool = False      # that first result is an error, and no `init` came before it


def stream_boot_verdict(look: BootLook, *, resume: bool, resume_check: float) -> tuple[str, str]:
    """(WAIT | READY | FAILED | DIED, why) for a stream-json launch watched for `resume_check` seconds.

    A resume FAILED only on the CLI's own word that the session is not there: `resume_failed_match`
    on its stderr or in its error result, or an error result with no `init` before it (Claude Code
    prints init once the session is loaded, at the start of a turn; a resume of a session it cannot
    find answers an error result without one, and exits 1: docs/STREAM.md). FAILED discards the
    conversation for a fresh one, so nothing less counts: an error result after init (a queued
    message answered with a usage limit, a prompt too long) is a turn that failed in a loaded
    session, and an exit that says nothing of the session (status 0, a signal, a crash) is DIED,
    the launch's death, whatever the launch (until 2026-12-06 either failed the resume, and a
    conversation that was there was thrown away). A silent resume is neither: Claude Code emits
    init with each turn, never before the first message (tests/e2e/test_claude_code_cli.py), and a
    resume that hangs misses the canary and is recycled. READY early once nothing more can come: a
    successful first turn, or init with nothing pending; else READY when the check ends. Never proof
    of liveness: the canary's witness probe follows.
    """
    if resume and look.screen_failed:
        return FAILED, "the CLI's stderr shows the resume failure"
    if resume and look.result_failed:
        return FAILED, "the CLI's error result says the resume failed"
    if resume and look.error_before_init:
        return FAILED, "the CLI answered with an error result before any init: it loaded no session"
    if look.exited:
        return DIED, f"the CLI exited during the {'resume' if resume else 'launch'} check (status {look.exit_status})"
    if look.first_result_error is False:
        return READY, "a turn succeeded"
    if look.init_seen and look.pump_up and not look.busy:
        return READY, "init came and nothing is pending"
    if look.elapsed < resume_check:
        return WAIT, ""
    return READY, "the check passed"
