"""The agent's turns as its hooks tell them, and what they say of a canary miss (sealed: the
standard library and timing only, `now` passed in).

A turn begins with a UserPromptSubmit and ends with Stop or StopFailure; an `idle_prompt`
notification says no turn is running (unless the turn had an event inside the idle minute it tells
of: the notification was written late, after a new prompt); a SessionStart is a new process, so a
turn still open before it ended with the old one. Loom's own launch is such a boundary (a mark of
source `launch`), and the process it started says so again with its SessionStart, which may be
written late (a hook's command delayed): that one ends nothing, or a turn the new process began
before its SessionStart was written would be taken for ended. A SessionStart of source `compact` is
the same process compacting its conversation, often inside a turn: a sign of life. A SessionEnd is
the process gone: a turn still open ended with it (the stream-json pump says so when its CLI exits,
hooks.pump_marks; the hooks' own SessionEnd is not among the events read). Every hook event read
inside a turn is a sign of life: a turn whose last event is within `quiet` is busy, one that says
nothing for longer is quiet, and a quiet turn, or one older than `max_turn`, counts as a wedge. A
`permission_prompt` notification leaves the turn waiting on the operator until its next event (at
most `max_turn`).

A probe typed while the agent was busy with an earlier prompt may miss because of that turn: its
miss is excused (`excuse`) while the turn is busy or waiting for permission, and for good once the
turn ended by itself (the agent was alive and working); a quiet turn's misses count. A probe that
began a turn of its own is never excused by it. This can withhold a probe, or keep its miss from
counting, never act: only the canary's misses recycle.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from loomtui.hooks.harness_rules import HOLDING
from loomtui.timing import Instant, age, raw_age

PROMPT, STOP, STOP_FAILURE, NOTIFICATION, SESSION_START, SESSION_END = (
    "UserPromptSubmit", "Stop", "StopFailure", "Notification", "SessionStart", "SessionEnd")
# The events that name the tool used (the hooks report PostToolUse; the pump sees the call asked for).
TOOL_EVENTS = ("PostToolUse", "PostToolUseFailure", "PreToolUse")
PERMISSION, IDLE = "permission_prompt", "idle_prompt"
IDLE_WAIT = 60.0  # Claude Code notifies `idle_prompt` once its prompt has waited this long for input
# A SessionStart's sources that are not the CLI's: Loom's own launch (hooks.turns puts it in); and
# the CLI's own that start no process.
LAUNCH, COMPACT = "launch", "compact"
NEW_PROCESS = ("startup", "resume")

# A turn's outcome once it ended.
STOPPED, FAILED, IDLE_END, GONE = "stopped", "failed", "idle", "gone"
# What a miss is excused by ("": it counts).
BUSY, WAITING, REFUSED = "busy", "permission", "refused"
# The current turn, as status and the console say it.
NO_TURN, TURN_BUSY, TURN_QUIET, TURN_LONG, TURN_WAITING = "idle", "busy", "quiet", "too long", "waiting for permission"


@dataclass(frozen=True)
class Mark:
    """One hook event as the turns read it: when, its name, its qualifier (a Notification's type,
    a tool's name, a failure's error type) and, for a notification, its message."""

    at: Instant
    event: str
    source: str = ""
    message: str = ""


@dataclass(frozen=True)
class Turn:
    began: Instant
    last: Instant                  # its latest hook event
    ended: Instant | None = None
    outcome: str = ""              # "" while open; STOPPED, FAILED, IDLE_END or GONE
    waiting: str = ""              # an open permission prompt's message ("" when none is open)
    waiting_since: Instant | None = None
    tool: str = ""                 # the last tool it used
    error: str = ""                # a failed turn's error type
    # The open turn's prompts (its first and those queued into it): a probe's turn whose Stop was
    # lost is split at the first prompt after the probe's ack (closed_by_acks). Empty once ended.
    prompts: tuple[Instant, ...] = ()


def turns(marks: list[Mark]) -> list[Turn]:
    """The turns the events (oldest first) tell of, oldest first."""
    out: list[Turn] = []
    # The open turn, as its fields (a Turn is made when it ends, or at the end: not one per mark,
    # which was most of this function's time with the canary and the hooks loop asking at every look).
    began: Instant | None = None  # None: no turn open
    last: Instant | None = None
    waiting, waiting_since, tool = "", None, ""
    prompts: list[Instant] = []
    announced = True  # the last launch's process has said it started (or there was no launch)

    def close(at: Instant, outcome: str, error: str = "") -> None:
        nonlocal began
        if began is not None:
            out.append(Turn(began, at, at, outcome, "", None, tool, error))
            began = None

    for mark in marks:
        event = mark.event
        if event == SESSION_START:
            if mark.source == COMPACT:
                if began is not None:
                    last = mark.at  # the same turn, alive: nothing else of it changes
            elif not announced and mark.source in NEW_PROCESS:
                announced = True  # the launched process's own start, the boundary already marked
            else:
                if last is not None:
                    close(last, GONE)
                announced = mark.source != LAUNCH
        elif event == SESSION_END:
            close(mark.at, GONE)
        elif event == PROMPT:
            if began is None:
                began, tool, prompts = mark.at, "", []
            # else a prompt queued into a running turn: the same turn, alive
            prompts.append(mark.at)
            last, waiting, waiting_since = mark.at, "", None
        elif event == STOP:
            close(mark.at, STOPPED)
        elif event == STOP_FAILURE:
            close(mark.at, FAILED, mark.source)
        elif event == NOTIFICATION and mark.source == IDLE:
            # The CLI's prompt has sat idle for IDLE_WAIT: a turn with an event inside that wait
            # began after the idle spell it tells of (the notification's hook written late), and
            # goes on.
            if began is None or last is None or raw_age(last, mark.at) >= IDLE_WAIT:
                close(mark.at, IDLE_END)
        elif began is not None:
            waiting = (mark.message or mark.source) if event == NOTIFICATION and mark.source == PERMISSION else ""
            waiting_since = mark.at if waiting else None
            if event in TOOL_EVENTS and mark.source:
                tool = mark.source
            last = mark.at
    if began is not None:
        assert last is not None
        out.append(Turn(began, last, None, "", waiting, waiting_since, tool, "", tuple(prompts)))
    return out


def closed_by_acks(all_turns: list[Turn], acks: list[tuple[Instant, Instant]]) -> list[Turn]:
    """The open turn, if a canary probe began it and acked (`acks`: (sent, acked)): a probe's turn
    is one command and no reply, done once its ack is written. So a Stop hook event that was lost
    does not leave an idle agent looking busy for `quiet`. Events after the ack keep it open (more
    was asked in it), but a prompt after the ack begins a turn of its own: the probe's turn is
    closed at the ack and the open one begins with that prompt. Taken for the probe's, a long turn of
    the operator's after a lost Stop was aged from the probe, and recycled as older than `max_turn`
    while it worked (the simulator's hooked storm, a lost Stop, then a 100-minute turn). In the
    monotonic clock's order where it can be (`after`): by wall time, a clock stepped back made an
    old probe's ack close a busy turn. Split again while a probe began what is left: two probes'
    Stops lost in a row, then the operator's turn, would age that turn from the second probe.

    With the real CLI the probe's own `touch` reports a PostToolUse after its ack is written, so
    the turn's last event is after the ack and the close at the ack alone seldom applies: a probe's
    lost Stop leaves its turn busy until `quiet`, the idle_prompt a minute after it, or the next
    prompt: a wedge found that much later."""
    while True:
        split = _split_at_ack(all_turns, acks)
        if split is all_turns:
            return all_turns
        all_turns = split


def _split_at_ack(all_turns: list[Turn], acks: list[tuple[Instant, Instant]]) -> list[Turn]:
    """closed_by_acks' one step: `all_turns` itself when no probe's ack closes or splits the open turn."""
    turn = current(all_turns)
    if turn is None:
        return all_turns
    for sent, acked in acks:
        if after(sent, turn.began) or after(turn.began, acked):
            continue  # the probe did not begin this turn
        done = Turn(turn.began, acked, acked, STOPPED, "", None, turn.tool)
        if not after(turn.last, acked):
            return [*all_turns[:-1], done]
        # The first prompt after the ack by the clocks' order (a hook written late is later in the list).
        later = None
        for p in turn.prompts:
            if after(p, acked) and (later is None or after(later, p)):
                later = p
        if later is not None:
            rest = tuple(p for p in turn.prompts if not after(later, p))
            return [*all_turns[:-1], done, replace(turn, began=later, prompts=rest)]
    return all_turns


def state(turn: Turn | None, now: Instant, quiet: float, max_turn: float) -> str:
    """The turn's state now: NO_TURN (none open), TURN_WAITING, TURN_BUSY, TURN_QUIET or TURN_LONG."""
    if turn is None or turn.ended is not None:
        return NO_TURN
    if turn.waiting and turn.waiting_since is not None and age(turn.waiting_since, now) < max_turn:
        return TURN_WAITING
    if age(turn.began, now) >= max_turn:
        return TURN_LONG
    if age(turn.last, now) >= quiet:
        return TURN_QUIET
    return TURN_BUSY


def current(all_turns: list[Turn]) -> Turn | None:
    """The turn still open, if any (only the last can be)."""
    return all_turns[-1] if all_turns and all_turns[-1].ended is None else None


def excuse(all_turns: list[Turn], sent: Instant, now: Instant, quiet: float, max_turn: float) -> str:
    """Why a miss of a probe sent at `sent` says nothing about deafness: BUSY, WAITING, REFUSED, or
    "" (it counts).

    The turn that matters is one begun before the probe was typed, not ended by then. Else the
    first turn begun after it (the probe's own, when it began one): failed for a cause no restart
    fixes (a quota, a login: harness_rules.HOLDING), the agent took the line and the API refused
    it. Counted, such misses outlived the rate limit's hold, and at its end the next probe's miss
    (its turn retrying the 429) recycled the agent, then wiped its conversation."""
    own: Turn | None = None
    for turn in reversed(all_turns):
        if after(turn.began, sent):
            own = turn  # begun after the probe (maybe by it): the earliest such is its own
            continue
        if turn.ended is not None and not after(turn.ended, sent):
            break  # the agent was between turns when the probe came
        if turn.ended is not None:
            return BUSY if turn.outcome in (STOPPED, FAILED, IDLE_END) else ""
        now_state = state(turn, now, quiet, max_turn)
        return {TURN_BUSY: BUSY, TURN_WAITING: WAITING}.get(now_state, "")
    return REFUSED if own is not None and own.outcome == FAILED and own.error in HOLDING else ""


def holds_back(all_turns: list[Turn], typed: Instant, now: Instant, quiet: float, max_turn: float) -> str:
    """Why a line typed at `typed` may not be dispatched yet: the turn it was typed into is still
    open and busy (BUSY) or waiting for permission (WAITING): the CLI queues it behind that turn.
    Once the turn ended the line should have been taken: "" then, as when no turn explains it."""
    turn = current(all_turns)
    if turn is None or after(turn.began, typed):
        return ""
    return excuse(all_turns, typed, now, quiet, max_turn)


def after(a: Instant, b: Instant) -> bool:
    """Whether `a` came after `b`: by the monotonic clock where both were read on it in one boot
    (no step of the wall clock moves that order: stepped back an hour during a busy turn, the
    probe sent after it looked sent before the turn began, its miss counted and the busy agent was
    recycled), by wall time otherwise."""
    return raw_age(b, a) > 0


def withholds_probe(all_turns: list[Turn], now: Instant, quiet: float, max_turn: float) -> bool:
    """A probe now would be typed into an open permission prompt: keys meant for the prompt box
    could answer the dialog instead. It waits until the prompt closes, at most `max_turn`."""
    return state(current(all_turns), now, quiet, max_turn) == TURN_WAITING
