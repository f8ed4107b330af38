"""What `loom hosts` shows: each host's agents, read from its own `loom status --json --list`
(untrusted JSON: parsed with json.loads, every field checked for its type, every string made
printable), or why the host is not there to ask."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any

from loomtui.config import LOCAL_HOST
from loomtui.durations import format_duration
from loomtui.hosts.reach import Unreachable
from loomtui.report.check_rules import supervisor_stale_after
from loomtui.text import printable

# The remote command `loom hosts` runs on each host: every agent's object, whatever their number.
STATUS_WORDS = ["status", "--json", "--list"]
MAX_PUSHES = 16  # a host's push heartbeats shown (its answer is untrusted: bounded)
# How old a host's supervisor heartbeat may be and still say someone supervises its agents, where
# its status does not say (an older Loom): `loom check`'s rule, which is the same for any watchdog
# interval. A host that says judges its own.
STALE_AFTER = supervisor_stale_after(0.0)


@dataclass(frozen=True)
class PushBeat:
    """A push heartbeat's last beat ([[heartbeat]]) as a host's status reported it: the host's, the
    same in each of its agents' objects. `age` None and `beat` false: it never beat."""

    name: str
    age: float | None = None  # seconds since it beat, by the host's own clock
    beat: bool = False        # it has beaten (an older Loom says when, `at`, but not how long ago)
    says: str = ""
    sent: bool = False
    error: str = ""
    why: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"age": self.age, "says": self.says or None, "sent": self.sent, "error": self.error or None,
                "why": self.why or None}

    def words(self) -> str:
        """What it said, when, and why, or what went wrong."""
        if self.age is None and not self.beat:
            return "no beat yet"
        ago = "(age unknown)" if self.age is None else format_duration(max(self.age, 0)) + " ago"
        if self.says == "skip":
            line = f"skipped {ago}"
        elif self.sent:
            line = f"{self.says or '?'} sent {ago}"
        else:
            line = f"{self.says or '?'} NOT sent {ago} ({self.error})"
        return line + (f": {self.why}" if self.why else "")


@dataclass(frozen=True)
class AgentRow:
    name: str
    state: str
    canary_result: str | None       # the last probe's result (None: no probe yet)
    canary_age: float | None
    queue: int                       # open and claimed items
    hold: str                        # "" when nothing holds it; else who and why
    heartbeat_age: float | None      # the host's supervisor's heartbeat (None: none yet)
    pushes: tuple[PushBeat, ...] = ()  # the host's push heartbeats, each as it last beat
    stale_after: float = STALE_AFTER   # the host's own rule for a heartbeat too old

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "state": self.state,
                "canary": None if self.canary_result is None else {"result": self.canary_result, "age": self.canary_age},
                "queue": self.queue, "hold": self.hold or None, "heartbeat_age": self.heartbeat_age,
                "supervised": self.supervised, "heartbeat_push": {p.name: p.as_json() for p in self.pushes}}

    @property
    def supervised(self) -> bool:
        """The host's `loom supervise` beat lately: someone watches this agent. Its state and canary
        are what they were when it last looked; without it nothing recovers the agent."""
        return self.heartbeat_age is not None and self.heartbeat_age <= self.stale_after

    def canary(self) -> str:
        if self.canary_result is None:
            return "no probe yet"
        return f"{self.canary_result} {format_duration(max(self.canary_age or 0, 0))} ago"

    def heartbeat(self) -> str:
        if self.heartbeat_age is None:
            return "none"
        ago = f"{format_duration(max(self.heartbeat_age, 0))} ago"
        return ago if self.supervised else f"STALE {ago}"


@dataclass(frozen=True)
class HostView:
    host: str
    agents: tuple[AgentRow, ...] = ()
    unreachable: Unreachable | None = None   # ssh could not reach it: nothing is said of its agents
    error: str = ""                          # reached, but its Loom failed or did not answer in JSON

    def error_words(self) -> str:
        """Why its agents are not shown, when it was reached (or is this machine) but said nothing usable."""
        if self.host == LOCAL_HOST:
            return f"this machine's agents could not be read: {self.error}"
        return f"reached, but its Loom did not answer: {self.error}"

    @property
    def pushes(self) -> tuple[PushBeat, ...]:
        """The host's push heartbeats (every agent's status carries the same: the first's)."""
        return self.agents[0].pushes if self.agents else ()

    def as_json(self) -> dict[str, Any]:
        return {"host": self.host, "reachable": self.unreachable is None,
                "unreachable_since": self.unreachable.since if self.unreachable else None,
                "why": self.unreachable.why if self.unreachable else (self.error or None),
                "agents": [a.as_json() for a in self.agents]}


def loads(text: str) -> Any:
    """Another host's JSON, parsed: ValueError for anything that is not JSON, a nesting too deep for
    the parser included (its RecursionError is no ValueError: one host's answer of `[[[[...` ended
    `loom hosts`, and the console's hosts view, for every host)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deep") from None


def finite_number(value: Any) -> float | None:
    """A finite number, or None (JSON from another host may say 1e400, or an integer of 400 digits)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _text(value: Any, limit: int = 200) -> str:
    return printable(str(value)[:limit]) if value is not None else ""


def _table(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def push_beats(value: Any, limit: int | None = MAX_PUSHES) -> tuple[PushBeat, ...]:
    """The `heartbeat_push` object of a status (name to last beat), field by field; () if none.
    `limit` bounds another host's (None: this machine's own, every one)."""
    table = _table(value) or {}
    out = []
    for name, beat in list(table.items())[:limit]:
        doc = _table(beat) or {}
        age = finite_number(doc.get("age"))
        out.append(PushBeat(name=_text(name, 64), age=age, beat=age is not None or finite_number(doc.get("at")) is not None,
                            says=_text(doc.get("says"), 16), sent=doc.get("sent") is True, error=_text(doc.get("error")),
                            why=_text(doc.get("why"))))
    return tuple(out)


def agent_row(data: Any) -> AgentRow:
    """One agent's object of `loom status --json` (`as_agent_json`); ValueError when it is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not isinstance(data.get("state"), str):
        raise ValueError("an agent without a name or a state")
    canary = _table(data.get("canary"))
    queue = _table(data.get("queue")) or {}
    hold = _table(data.get("hold"))
    supervisor = _table(data.get("supervisor")) or {}
    unresolved = sum(n for k in ("open", "claimed") if isinstance(n := queue.get(k), int) and not isinstance(n, bool))
    return AgentRow(
        name=_text(data["name"], 64), state=_text(data["state"], 64),
        canary_result=_text(canary.get("result"), 32) or None if canary else None,
        canary_age=finite_number(canary.get("age")) if canary else None,
        queue=unresolved,
        hold=f"{_text(hold.get('by'), 32) or 'held'}: {_text(hold.get('reason'))}" if hold else "",
        heartbeat_age=finite_number(supervisor.get("heartbeat_age")),
        pushes=push_beats(data.get("heartbeat_push")),
        stale_after=_positive(supervisor.get("stale_after")) or STALE_AFTER)


def _positive(value: Any) -> float | None:
    number = finite_number(value)
    return number if number is not None and number > 0 else None


def parse_status(stdout: str) -> tuple[AgentRow, ...]:
    """The agents in a host's `loom status --json --list` output; ValueError when it is not that."""
    return status_rows(loads(stdout))


def status_rows(data: Any) -> tuple[AgentRow, ...]:
    """The agents of that output once parsed (a caller that reads more of it parses it once)."""
    if not isinstance(data, list):
        raise ValueError("not a list of agents")
    rows: dict[str, AgentRow] = {}
    for item in data:
        row = agent_row(item)
        rows.setdefault(row.name, row)  # a name twice (a hostile host): the first, each row its own key
    return tuple(rows.values())


def since(moment: float, now: float) -> str:
    """`2026-12-02 07:41:02 (3m ago)` in the local zone."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(moment))
    return f"{stamp} ({format_duration(max(now - moment, 0))} ago)"


def lines(views: list[HostView], now: float) -> list[str]:
    """The table: a line per host and agent; a host that did not answer says since when, in place."""
    header = ("HOST", "AGENT", "STATE", "LAST CANARY", "QUEUE", "HOLD", "HEARTBEAT")
    rows: list[tuple[str, ...] | str] = [header]
    for view in views:
        if view.unreachable is not None:
            rows.append(f"{view.host}  unreachable since {since(view.unreachable.since, now)}: {view.unreachable.why}")
        elif view.error:
            rows.append(f"{view.host}  {view.error_words()}")
        else:
            rows += [(view.host, a.name, a.state, a.canary(), str(a.queue), a.hold or "-", a.heartbeat())
                     for a in view.agents]
            rows += [f"{view.host}  heartbeat push {p.name}: {p.words()}" for p in view.pushes]
    table = [r for r in rows if isinstance(r, tuple)]
    widths = [max(len(r[i]) for r in table) for i in range(len(header) - 1)]
    return [r if isinstance(r, str) else "  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1]
            for r in rows]
