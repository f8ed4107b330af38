"""The pump's turns and queue: pure functions of (state, event) -> (new state, what to do).

A message is written to the CLI only between turns: Claude Code merges lines written during a
running turn into one later turn (and older versions did not keep them at all,
anthropics/claude-code#41230), so one line per turn is what pairs each message with its answer.
While a turn runs, accepted messages wait in order and are written one per turn, as each
turn ends with the CLI's `result` event. The CLI also takes turns of its own: a background task
(Bash's `run_in_background`, an agent run in the background) that ends is told to the model in a
turn no line began, `system/init` to `result` (Claude Code 2.1.332). Such a turn runs as any other:
lines wait for its `result`. After the CLI has exited, or once its stdin is broken,
nothing more is accepted. The state only grows by events; `now` is an argument.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Union

IDLE, RUNNING = "idle", "running"
# A kept message written to this many CLIs that each exited before showing they read it is set aside
# by the next pump (runner: renamed .undelivered, said in the transcript), not written again: one
# that ends the CLI before it reads it was written to every launch until the watchdog's ceiling.
MAX_UNREAD = 3
SET_ASIDE = ".undelivered"  # the suffix a set-aside message's queue file takes
# After the CLI's exit, how long its last output may take to arrive before the pump records what it
# left unread (the stream-json driver spares a stopped pump longer than this: LAST_GRACE).
DRAIN = 5.0
EXITED = "the agent's CLI has exited"
INPUT_CLOSED = "the agent's CLI no longer reads its input"
# A refusal's code in the pump's answer (docs/STREAM.md): the CLI has exited, or it no longer reads
# its input (a write to its stdin failed: the kernel's word that no line can reach it again).
EXITED_CODE, INPUT_CLOSED_CODE = "exited", "input_closed"


@dataclass(frozen=True)
class LastResult:
    ts: float
    is_error: bool
    subtype: str
    seq: int | None             # the input whose turn it ended (None: a result outside a turn of ours)
    denials: tuple[str, ...]    # the tools the CLI's permissions refused in that turn

    def record(self) -> dict[str, Any]:
        return {"ts": self.ts, "is_error": self.is_error, "subtype": self.subtype, "seq": self.seq,
                "denials": list(self.denials)}


@dataclass(frozen=True)
class CliExit:
    ts: float
    status: int | None          # the exit status, or None when a signal ended it
    signal: int | None

    def record(self) -> dict[str, Any]:
        return {"ts": self.ts, "status": self.status, "signal": self.signal}


@dataclass(frozen=True)
class State:
    ready: bool = False                 # the CLI is running and its stdin takes writes
    turn_seq: int | None = None         # the input whose turn is running; None between turns
    turn_started: float | None = None
    queue: tuple[int, ...] = ()         # accepted, waiting for the turn to end, in order
    next_seq: int = 1
    turns: int = 0                      # turns ended since the pump started
    session_id: str | None = None
    last_result: LastResult | None = None
    cli_exit: CliExit | None = None
    input_closed: bool = False
    own_since: float | None = None      # a turn the CLI began by itself (its `init` with no line of ours)
    wrote: bool = False                 # a line was written to this CLI: only then has it a task of its own

    @property
    def running(self) -> bool:
        return self.turn_seq is not None or self.own_since is not None


# Events.

@dataclass(frozen=True)
class Send:
    now: float


@dataclass(frozen=True)
class Ready:
    """The CLI was started; what is written now waits in its stdin until it reads."""
    now: float


@dataclass(frozen=True)
class Output:
    now: float
    event: dict[str, Any]               # one event from the CLI's stdout ({} for a line that was not JSON)


@dataclass(frozen=True)
class InputClosed:
    """A write to the CLI's stdin failed (broken pipe): that message was not delivered."""
    now: float
    seq: int


@dataclass(frozen=True)
class Exited:
    now: float
    status: int | None
    signal: int | None = None


Event = Union[Send, Ready, Output, InputClosed, Exited]


# What to do.

@dataclass(frozen=True)
class Write:
    """Write message `seq` to the CLI's stdin now."""
    seq: int


@dataclass(frozen=True)
class Queued:
    """Message `seq` waits; `position` 1 is written next."""
    seq: int
    position: int


@dataclass(frozen=True)
class Refused:
    reason: str
    code: str = ""


Action = Union[Write, Queued, Refused]


def start(pending: tuple[int, ...] = (), next_seq: int = 1) -> State:
    """A new pump: `pending` are the messages an earlier pump accepted and never wrote, in order."""
    ordered = tuple(sorted(set(pending)))
    return State(queue=ordered, next_seq=max((next_seq, *(s + 1 for s in ordered))))


def step(state: State, event: Event) -> tuple[State, tuple[Action, ...]]:
    if isinstance(event, Send):
        return _send(state, event.now)
    if isinstance(event, Ready):
        if state.cli_exit is not None or state.input_closed:
            return state, ()
        return _next_turn(replace(state, ready=True), event.now)
    if isinstance(event, Output):
        return _output(state, event)
    if isinstance(event, InputClosed):
        # The line never reached the CLI, so no turn runs for it, and no later line can be written.
        ended = state.turn_seq == event.seq
        return replace(state, input_closed=True, turn_seq=None if ended else state.turn_seq,
                       turn_started=None if ended else state.turn_started), ()
    if isinstance(event, Exited):
        return replace(state, ready=False, turn_seq=None, turn_started=None, own_since=None,
                       cli_exit=CliExit(event.now, event.status, event.signal)), ()
    raise TypeError(f"not a pump event: {event!r}")


def _send(state: State, now: float) -> tuple[State, tuple[Action, ...]]:
    if state.cli_exit is not None:
        return state, (Refused(EXITED, EXITED_CODE),)
    if state.input_closed:
        return state, (Refused(INPUT_CLOSED, INPUT_CLOSED_CODE),)
    seq = state.next_seq
    state = replace(state, next_seq=seq + 1)
    if state.ready and not state.running and not state.queue:
        return _begin(state, seq, now), (Write(seq),)
    queue = state.queue + (seq,)
    return replace(state, queue=queue), (Queued(seq, len(queue)),)


def result_turn(state: State, event: dict[str, Any]) -> dict[str, int | bool]:
    """What an event's transcript record says of its turn, before the rules take it in: a `result`'s
    `turn`, the line whose turn it ends (the pump writes one line a turn), or `own_turn`, a turn the
    CLI began by itself (no line's answer); an `init`'s `own_turn`, when it begins one (the turns
    read from the transcript begin it there, whatever part of it they read: hooks.pump_marks)."""
    if _begins_own_turn(state, event):
        return {"own_turn": True}
    if event.get("type") != "result":
        return {}
    if state.turn_seq is not None:
        return {"turn": state.turn_seq}
    return {"own_turn": True} if state.own_since is not None else {}


def _begins_own_turn(state: State, event: dict[str, Any]) -> bool:
    """An `init` with no line of ours in it: the CLI's own turn (a background task's end told to the
    model). Not before the first line: a CLI that speaks at its start (Loom's demo agent) has begun
    no task yet."""
    return (event.get("type") == "system" and event.get("subtype") == "init" and not state.running
            and state.wrote and state.cli_exit is None)


def _output(state: State, event: Output) -> tuple[State, tuple[Action, ...]]:
    kind = event.event.get("type")
    if kind == "system" and event.event.get("subtype") == "init":
        session = event.event.get("session_id")
        if isinstance(session, str) and session:
            state = replace(state, session_id=session)
        if _begins_own_turn(state, event.event):
            # A line written now would be merged into it: they wait for its `result`.
            state = replace(state, own_since=event.now)
        return state, ()
    if kind != "result":
        return state, ()
    result = LastResult(event.now, event.event.get("is_error") is True, _text(event.event.get("subtype")),
                        state.turn_seq, denials(event.event))
    state = replace(state, last_result=result)
    if not state.running:
        return state, ()
    state = replace(state, turn_seq=None, turn_started=None, own_since=None, turns=state.turns + 1)
    return _next_turn(state, event.now)


def _next_turn(state: State, now: float) -> tuple[State, tuple[Action, ...]]:
    # Not into a closed input either: the end of a turn the CLI took by itself after its stdin broke.
    if not state.ready or state.running or not state.queue or state.input_closed:
        return state, ()
    seq, rest = state.queue[0], state.queue[1:]
    return _begin(replace(state, queue=rest), seq, now), (Write(seq),)


def _begin(state: State, seq: int, now: float) -> State:
    return replace(state, turn_seq=seq, turn_started=now, wrote=True)


def denials(result: dict[str, Any]) -> tuple[str, ...]:
    """The tool names in a result's `permission_denials` (objects with `tool_name`, or bare names)."""
    found = []
    items = result.get("permission_denials")
    for item in items if isinstance(items, list) else ():
        name = item.get("tool_name") if isinstance(item, dict) else item
        if isinstance(name, str) and name:
            found.append(name[:100])
    return tuple(found)


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def status(state: State) -> dict[str, Any]:
    """The turn and queue fields of pump.json (docs/STREAM.md)."""
    return {
        "session_id": state.session_id,
        "turn": RUNNING if state.running else IDLE,
        # The CLI's own turn: running, no seq, since its init.
        "turn_started": state.turn_started if state.turn_seq is not None else state.own_since,
        "turn_seq": state.turn_seq,
        "queue": len(state.queue),
        "turns": state.turns,
        "last_result": state.last_result.record() if state.last_result else None,
        "cli_exit": state.cli_exit.record() if state.cli_exit else None,
    }
