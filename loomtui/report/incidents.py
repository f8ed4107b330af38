"""Ledger events grouped from a failure to its recovery: the console's incident timeline.

An incident opens at the first sign of trouble (a canary miss, an automatic relaunch, a
failed resume, an escalation) and closes at the first canary ack after it: until the
canary proves the agent hears again, it is not recovered, however alive it looks. Once the
incident has relaunched the agent, only an ack from that launch or a later one closes it
(the ack that witnesses the relaunch): an ack from the agent that was replaced proves
nothing about the new one. Pure: events in (oldest first), incidents out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from loomtui.agent.policy import OPERATOR


class TimelineEvent(Protocol):
    """A ledger event as the grouping reads it (ledger.TimelineEvent has these fields)."""

    # Read-only: the ledger's events are frozen.
    @property
    def id(self) -> int: ...

    @property
    def ts(self) -> float: ...

    @property
    def kind(self) -> str: ...

    @property
    def cause(self) -> str | None: ...

    @property
    def detail(self) -> dict[str, Any]: ...


# The kinds the timeline reads; everything else is ordinary traffic (injections, heartbeats).
KINDS = (
    "relaunch", "relaunch_failed", "resume_failed", "canary", "escalation", "hold_cleared",
    "foreign_poller_reaped", "modal_dismissed", "loop_error", "queue_new", "queue_escalate", "queue_reopen",
    "queue_witness", "queue_retire", "launch_died", "operator_alert", "store_salvaged", "tmux_socket_repair",
    "observation_ambiguous",
)
ONGOING, RECOVERED, HELD, NOTE = "ongoing", "recovered", "held", "note"


@dataclass
class Incident:
    first_id: int
    start: float
    end: float | None = None
    status: str = ONGOING
    title: str = ""
    causes: list[str] = field(default_factory=list)
    modes: list[str] = field(default_factory=list)
    old_session: str | None = None
    new_session: str | None = None
    relaunches: int = 0
    misses: int = 0
    escalated: bool = False
    event_ids: list[int] = field(default_factory=list)
    last_relaunch: int = 0               # event id of the incident's latest relaunch
    witness: int | None = None           # event id of the ack that closed it

    def duration(self, now: float) -> float:
        return max(0.0, (self.end if self.end is not None else now) - self.start)

    @property
    def key(self) -> str:
        return f"i{self.first_id}"


def _starts_trouble(e: TimelineEvent) -> bool:
    if e.kind == "canary":
        return e.detail.get("result") == "miss"
    if e.kind == "relaunch":
        return e.cause not in OPERATOR
    return e.kind in ("resume_failed", "relaunch_failed", "escalation", "launch_died")


def _note(e: TimelineEvent) -> Incident | None:
    """Events that are incidents of their own: acted on and done in one step."""
    titles = {
        "foreign_poller_reaped": f"foreign poller {e.detail.get('pid', '?')} reaped",
        "modal_dismissed": "dialog dismissed",
        "loop_error": f"loop {e.detail.get('loop', '?')} failed: {e.detail.get('type', '')}",
        "queue_new": f"job {e.detail.get('job', '?')} failed: queue item {e.detail.get('item', '?')}",
        "queue_escalate": f"queue item {e.detail.get('item', '?')} sent to the operator",
        "queue_reopen": f"queue item {e.detail.get('item', '?')} reopened: the claim did not hold",
        "queue_witness": f"queue item {e.detail.get('item', '?')} witnessed fixed",
        "queue_retire": f"queue item {e.detail.get('item', '?')} retired: job {e.detail.get('job', '?')} left the config",
        "hold_cleared": "hold cleared by the operator",
        "operator_alert": f"told the operator: {e.detail.get('note', '')}",
        "store_salvaged": f"damaged store replaced; old file kept at {e.detail.get('moved_to', '?')}",
        "tmux_socket_repair": "tmux socket recreated (the server ran on without it)",
        "observation_ambiguous": f"could not see clearly: {e.detail.get('why', '')}",
    }
    if e.kind in titles:
        return Incident(e.id, e.ts, e.ts, NOTE, titles[e.kind], event_ids=[e.id])
    if e.kind == "relaunch" and e.cause in OPERATOR:
        inc = Incident(e.id, e.ts, e.ts, NOTE, f"operator relaunch ({e.detail.get('mode', '?')})", event_ids=[e.id])
        _absorb(inc, e)
        return inc
    return None


def _absorb(inc: Incident, e: TimelineEvent) -> None:
    if e.id not in inc.event_ids:
        inc.event_ids.append(e.id)
    if e.kind == "relaunch":
        inc.relaunches += 1
        inc.last_relaunch = max(inc.last_relaunch, e.id)
        if e.cause and e.cause not in inc.causes:
            inc.causes.append(e.cause)
        # Text only: another host's ledger (the console reads it over ssh) may hold anything.
        mode, old, new = (e.detail.get(k) for k in ("mode", "old_session", "new_session"))
        if isinstance(mode, str) and mode:
            inc.modes.append(mode)
        if inc.old_session is None and isinstance(old, str):
            inc.old_session = old
        inc.new_session = (new if isinstance(new, str) else None) or inc.new_session
    elif e.kind == "canary" and e.detail.get("result") == "miss":
        inc.misses += 1
    elif e.kind == "resume_failed" and "resume_failed" not in inc.causes:
        inc.causes.append("resume_failed")
    elif e.kind == "escalation":
        inc.escalated = True
        inc.status = HELD
        if e.cause and e.cause not in inc.causes:
            inc.causes.append(e.cause)
    elif e.kind in ("relaunch_failed", "launch_died") and e.kind not in inc.causes:
        inc.causes.append(e.kind)


def _title(inc: Incident) -> str:
    causes = ", ".join(inc.causes) or ("canary misses" if inc.misses else "trouble")
    bits = [causes]
    if inc.relaunches:
        bits.append(f"{inc.relaunches} relaunch{'es' if inc.relaunches != 1 else ''} ({'→'.join(inc.modes)})")
    if inc.misses:
        bits.append(f"{inc.misses} miss{'es' if inc.misses != 1 else ''}")
    if inc.escalated:
        bits.append("escalated")
    return "; ".join(bits)


def heard_again(inc: Incident, e: TimelineEvent) -> bool:
    """An ack that proves the agent of this incident hears: `ok`, and from the incident's latest
    launch or a later one (events written before acks named their launch count as before)."""
    if e.kind != "canary" or e.detail.get("result") != "ok":
        return False
    launch = e.detail.get("launch")
    return not isinstance(launch, int) or launch >= inc.last_relaunch


def group(events: Sequence[TimelineEvent]) -> list[Incident]:
    """Incidents, oldest first. `events` must be oldest first."""
    out: list[Incident] = []
    current: Incident | None = None
    for e in events:
        if current is not None:
            if heard_again(current, e):
                current.event_ids.append(e.id)
                current.end, current.status, current.witness = e.ts, RECOVERED, e.id
                current.title = _title(current)
                current = None
                continue
            if e.kind == "hold_cleared":
                current.event_ids.append(e.id)
                if current.status == HELD:
                    current.status = ONGOING
                continue
            if _starts_trouble(e) or e.kind in ("relaunch",):
                _absorb(current, e)
                current.title = _title(current)
                continue
        elif _starts_trouble(e):
            current = Incident(e.id, e.ts)
            _absorb(current, e)
            current.title = _title(current)
            out.append(current)
            continue
        note = _note(e)
        if note is not None:
            out.append(note)
    return out
