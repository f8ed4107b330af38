"""The agent's lifecycle, stated once: which state it is in, derived from plain facts by one pure
function (sealed: no clock read, no store, no tmux). `loom status`, the console and the loops'
boot-grace question all ask it, so they can never disagree about the same facts.

The order is the order of what can be told: no look, then what tmux said (unknown, gone), a pane
whose process exited, then a hold in force (the ceiling's or an operator's: automatic recovery
waits, whatever the pane shows), then the agent's process in the pane's tree, then its boot (launched
less than `boot_grace` ago and not yet seen ready), then a relaunch no canary ack has witnessed
(up is not heard), and only then running.
"""

from __future__ import annotations

from typing import Literal

from loomtui.agent.hold_rules import Hold, active
from loomtui.agent.records import LaunchRecord
from loomtui.states import GONE as TMUX_GONE, MISSING, PRESENT, UP
from loomtui.timing import Instant, age

AgentState = Literal["not_looked", "unknown", "gone", "exited", "held_ceiling", "held_operator",
                     "no_process", "process_unknown", "booting", "unwitnessed", "running"]
NOT_LOOKED: AgentState = "not_looked"            # nobody looked at the pane (a status without a look)
UNKNOWN: AgentState = "unknown"                  # tmux did not answer: neither up nor gone
GONE: AgentState = "gone"                        # tmux said the server or session is not there
EXITED: AgentState = "exited"                    # the pane is there, its process exited
HELD_CEILING: AgentState = "held_ceiling"        # the ceiling's hold: relaunches ran out
HELD_OPERATOR: AgentState = "held_operator"      # an operator's (or the agent's own) hold
NO_PROCESS: AgentState = "no_process"            # the pane's tree has no agent process
PROCESS_UNKNOWN: AgentState = "process_unknown"  # the tree could not be walked
BOOTING: AgentState = "booting"                  # launched within its boot grace, not yet seen ready
UNWITNESSED: AgentState = "unwitnessed"          # relaunched, and no canary ack since: only claimed
RUNNING: AgentState = "running"
STATES: tuple[AgentState, ...] = (NOT_LOOKED, UNKNOWN, GONE, EXITED, HELD_CEILING, HELD_OPERATOR, NO_PROCESS,
                                  PROCESS_UNKNOWN, BOOTING, UNWITNESSED, RUNNING)
HELD: frozenset[AgentState] = frozenset((HELD_CEILING, HELD_OPERATOR))


def booting(launched: LaunchRecord | None, boot_grace: float, now: Instant | float) -> bool:
    """Launched less than `boot_grace` ago (on the clock timing.age trusts) and not yet seen ready:
    typing into it loses the text, and a miss says nothing."""
    if launched is None or launched.seen_ready:
        return False
    at = now if isinstance(now, Instant) else Instant(float(now))
    return age(launched.at, at) < boot_grace


def agent_state(*, tmux: str | None, pane_dead: bool = False, process: str | None = None,
                launched: LaunchRecord | None = None, hold: Hold | None = None, unwitnessed: bool = False,
                boot_grace: float = 0.0, now: Instant | float) -> AgentState:
    """The agent's state from the facts: `tmux` as the driver's look said it (up, gone, unknown;
    None: not looked at), whether the pane's process exited, the agent `process` in the pane's tree
    (present, missing, unknown), the last launch, the hold (judged in force at `now`), and whether
    the last relaunch is still unwitnessed by a canary ack."""
    if tmux is None:
        return NOT_LOOKED
    if tmux == TMUX_GONE:
        return GONE
    if tmux != UP:
        return UNKNOWN  # unknown, or a word no driver says: neither up nor gone
    if pane_dead:
        return EXITED
    if hold is not None and active(hold, now):
        return HELD_CEILING if hold.by == "ceiling" else HELD_OPERATOR
    if process == MISSING:
        return NO_PROCESS
    if process != PRESENT:
        return PROCESS_UNKNOWN
    if booting(launched, boot_grace, now):
        return BOOTING
    if unwitnessed:
        return UNWITNESSED
    return RUNNING
