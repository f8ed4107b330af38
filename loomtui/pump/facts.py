"""What the pump says about its CLI, as the supervisor reads it: `pump.json` as `StreamFacts`
(with the last turn's `TurnResult`), and a `Delivery`, the pump's receipt for a line.

Types and a reader only: the drivers, `loom status` and the launch code use them; the pump itself
writes pump.json (runner.py). Stands alone like the rest of pump/: no store, config or agent.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TurnResult:
    """The CLI's last `result` event, as the pump recorded it."""

    ts: float
    is_error: bool
    subtype: str
    seq: int | None = None
    denials: tuple[str, ...] = ()     # tool names only: a denied call's input may hold anything


@dataclass(frozen=True)
class StreamFacts:
    """What the pump knows for sure (pump.json): facts about the CLI, never proof that it is alive
    (stdout can stop while the session goes on; the canary stays the authority)."""

    pump_pid: int
    current: bool                     # written by the pump running in the pane now (not a dead one's)
    cli_pid: int | None = None
    started: float | None = None
    session_id: str | None = None     # from the CLI's system/init event; None until it came
    turn: str = "idle"                # idle / running
    turn_started: float | None = None
    turn_seq: int | None = None
    queue: int = 0                    # messages waiting for the turn to end
    turns: int = 0                    # turns ended since this pump started
    last_result: TurnResult | None = None
    cli_exit: dict | None = None      # {"ts", "status", "signal"} once the CLI exited

    @property
    def running(self) -> bool:
        return self.turn == "running"


@dataclass(frozen=True)
class Delivery:
    """The pump's receipt for a line: delivered (written to the CLI's stdin) or queued (behind a
    running turn). A line typed into a screen has no receipt: the tmux driver returns None."""

    state: str                        # delivered / queued
    seq: int | None = None
    position: int | None = None       # place in the queue, when queued

    def as_detail(self) -> dict[str, object]:
        detail: dict[str, object] = {"delivery": self.state}
        if self.seq is not None:
            detail["seq"] = self.seq
        if self.position is not None:
            detail["position"] = self.position
        return detail


def facts_from(doc: dict[str, Any], pane_pid: int | None) -> StreamFacts | None:
    """pump.json as facts; `current` when the pump that wrote it is the pane's process now."""
    pid = doc.get("pid")
    if not isinstance(pid, int):
        return None
    result = doc.get("last_result")
    last = None
    if isinstance(result, dict):
        denials = result.get("denials") or ()
        last = TurnResult(
            ts=_number(result.get("ts")) or 0.0,
            is_error=bool(result.get("is_error")),
            subtype=str(result.get("subtype") or ""),
            seq=result.get("seq") if isinstance(result.get("seq"), int) else None,
            denials=tuple(str(d) for d in denials) if isinstance(denials, (list, tuple)) else (),
        )
    cli_exit = doc.get("cli_exit")
    return StreamFacts(
        pump_pid=pid,
        current=pane_pid is not None and pid == pane_pid,
        cli_pid=doc.get("cli_pid") if isinstance(doc.get("cli_pid"), int) else None,
        started=_number(doc.get("started")),
        session_id=doc.get("session_id") if isinstance(doc.get("session_id"), str) else None,
        turn="running" if doc.get("turn") == "running" else "idle",
        turn_started=_number(doc.get("turn_started")),
        turn_seq=doc.get("turn_seq") if isinstance(doc.get("turn_seq"), int) else None,
        queue=_count(doc.get("queue")),
        turns=_count(doc.get("turns")),
        last_result=last,
        cli_exit=cli_exit if isinstance(cli_exit, dict) else None,
    )


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def read_facts(state_dir: Path, pane_pid: int | None) -> StreamFacts | None:
    """The pump's status file as facts, or None (no pump has written one, or it is unreadable)."""
    from loomtui.pump import client as pump_client  # here: the socket client only a stream-json agent needs

    try:
        doc = pump_client.status(state_dir)
    except (OSError, ValueError, pump_client.PumpError):
        return None
    return facts_from(doc, pane_pid) if isinstance(doc, dict) else None
