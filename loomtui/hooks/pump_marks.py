"""The stream-json pump's transcript read as turn marks, the same `Mark`s the hooks give
(hooks.turn_rules judges both): sealed, the standard library and the turn rules only.

The pump knows its side of the CLI's stdin for sure, and what the CLI printed:

- a line it wrote (`in`) begins a turn, dated when it was written, but only once the CLI answered
  it with an event on stdout (Claude Code opens every turn with `system/init`); a background
  task's `system` events are no answer (they come whenever the task does). A line written into a
  CLI that never says a word is no turn: its probe's miss counts, as with no source of turns at all
  (a CLI hung on its resume, or one that stopped reading between turns). A line the pump queued
  behind a running turn has no `in` until it is written, so it begins nothing before then;
- a `system/init` the pump marked `own_turn` begins a turn the CLI took by itself (a background
  task's end told to the model), dated by the init: the pump holds lines until its `result`, so a
  probe queued behind it is excused as one behind any other turn (the pump knows, from all it has
  seen, whether a turn of its own ran; a part of the transcript read alone would not);
- every event the CLI prints in a turn is a sign of life (an `assistant` tool call names its tool);
- its `result` ends the turn: Stop, or StopFailure when `is_error` (the subtype as its error);
- the pump's start is a new CLI process, and the CLI's exit (or a spawn that failed) ends it: a
  turn still open ended with it (GONE: its misses count).

What the CLI wrote to stderr is no sign of the turn's progress and is left out. None of this says
the agent hears: only a canary's ack does. A turn may excuse misses (turn_rules.excuse, bounded by
`turn_quiet` and `max_turn`), never cause anything.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from loomtui.hooks.turn_rules import PROMPT, SESSION_END, SESSION_START, STOP, STOP_FAILURE, Mark
from loomtui.timing import Instant, stored

# The pump's transcript directions and records (pump.transcript's; named again here to stay sealed).
IN, OUT, PUMP = "in", "out", "pump"
STARTED, CLI_EXIT, SPAWN_FAILED, WRITE_FAILED = "started", "cli_exit", "spawn_failed", "write_failed"

# A SessionStart of this source is a pump's start: a new CLI process that always ends a turn still
# open (never taken for the announcement of Loom's launch, which a late hook may be: turn_rules).
PUMP_START = "pump"
# A mark of the CLI's own words inside a turn: a sign of life, nothing more.
STREAM_EVENT = "StreamEvent"
TOOL_CALL = "PreToolUse"


class Entry(Protocol):
    """One transcript record (pump.transcript.Record): when, which way, what."""

    @property
    def ts(self) -> float: ...

    @property
    def dir(self) -> str: ...

    @property
    def data(self) -> dict[str, Any]: ...

    @property
    def mono(self) -> float | None: ...

    @property
    def boot(self) -> str | None: ...


@dataclass(frozen=True)
class Read:
    """What the conversion carries from one stretch of the transcript to the next."""

    written: Instant | None = None  # a line the pump wrote that the CLI has not answered yet


def marks(entries: Iterable[Entry], carried: Read = Read()) -> tuple[list[Mark], Read]:
    """The marks the records (oldest first) tell of, and what the next stretch starts from."""
    out: list[Mark] = []
    written = carried.written
    for entry in entries:
        # On both clocks where the record kept them: a turn's age and quiet are then monotonic time,
        # which a step of the wall clock does not move (a day back would excuse a wedge for a day).
        at = stored(float(entry.ts), entry.mono, entry.boot)
        if entry.dir == IN:
            written = at  # a line the CLI has not answered yet is superseded: it began nothing
        elif entry.dir == OUT:
            event = entry.data.get("event")
            if written is not None and _answers(event):
                out.append(Mark(written, PROMPT))
                written = None
            elif written is None and _is_init(event) and entry.data.get("own_turn") is True:
                out.append(Mark(at, PROMPT))  # the CLI's own turn
            out.append(_said(at, event))
        elif entry.dir == PUMP:
            what = entry.data.get("what")
            if what == STARTED:
                written = None
                out.append(Mark(at, SESSION_START, PUMP_START))
            elif what in (CLI_EXIT, SPAWN_FAILED):
                written = None
                out.append(Mark(at, SESSION_END))
            elif what == WRITE_FAILED:
                written = None  # the line never reached the CLI
    return out, Read(written)


def _is_init(event: Any) -> bool:
    return isinstance(event, dict) and event.get("type") == "system" and event.get("subtype") == "init"


def _answers(event: Any) -> bool:
    """Whether an event shows the CLI took the line written last: any but a `system` event other
    than `init` (a background task's, which comes between turns too)."""
    return not (isinstance(event, dict) and event.get("type") == "system" and not _is_init(event))


def _said(at: Instant, event: Any) -> Mark:
    """One event the CLI printed (a line that was not JSON: no event) as a mark."""
    if not isinstance(event, dict):
        return Mark(at, STREAM_EVENT)
    if event.get("type") == "result":
        if event.get("is_error") is True:
            subtype = event.get("subtype")
            return Mark(at, STOP_FAILURE, subtype if isinstance(subtype, str) and subtype else "error")
        return Mark(at, STOP)
    if event.get("type") == "assistant":
        tool = _tool(event.get("message"))
        if tool:
            return Mark(at, TOOL_CALL, tool)
    return Mark(at, STREAM_EVENT)


def _tool(message: Any) -> str:
    """The name of the last tool an assistant message calls ("" when it calls none)."""
    content = message.get("content") if isinstance(message, dict) else None
    blocks = content if isinstance(content, list) else []
    names = [str(b["name"]) for b in blocks
             if isinstance(b, dict) and b.get("type") == "tool_use" and isinstance(b.get("name"), str) and b["name"]]
    return names[-1][:100] if names else ""


def compact(found: list[Mark], limit: int) -> list[Mark]:
    """The latest `limit` of the marks, each run of signs of life between two other marks cut to its
    latest tool call and its latest other event: all a turn reads of them is its last sign and its
    last tool (a long turn prints thousands). The same marks make the same turns, so a reader may
    compact as it goes."""
    out: list[Mark] = []
    for mark in found:
        if mark.event in (STREAM_EVENT, TOOL_CALL):
            run = len(out)
            while run > 0 and out[run - 1].event in (STREAM_EVENT, TOOL_CALL):
                run -= 1
            out = out[:run] + [m for m in out[run:] if m.event != mark.event] + [mark]
        else:
            out.append(mark)
    return out[-limit:] if limit > 0 else []
