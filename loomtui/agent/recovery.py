"""What a recovery decides from, and what it leaves: relaunch history, the hold, escalation.

The decision itself is actions.recover, the one owner of recycle.lock; this module gathers its
facts from the store (`situation`) and keeps the hold, which only `escalate` sets and only an
operator's relaunch (`clear_hold`) clears.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loomtui import clock
from loomtui.agent.policy import Decision, Instant, Relaunch, Situation
from loomtui.context import Context
from loomtui.store import ledger, locks, outbox, session

if TYPE_CHECKING:
    from loomtui.agent.launch import Outcome

HISTORY_LIMIT = 500
HOLD_KEY = "hold"


@dataclass
class Recovery:
    """What happened: acted, waited (backoff), held (ceiling), busy (lock), or resolved (second look)."""

    status: str
    decision: Decision | None = None
    outcome: Outcome | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the agent was relaunched."""
        return self.outcome is not None and self.outcome.ok

    def describe(self) -> str:
        if self.outcome is not None:
            return "; ".join([self.outcome.describe(), *self.notes])
        reasons = "; ".join(self.decision.reasons) if self.decision else "; ".join(self.notes)
        return f"{self.status}: {reasons}".rstrip(": ")


def history(ctx: Context) -> tuple[Relaunch, ...]:
    rows = ctx.store.query(
        "SELECT ts, cause, detail FROM ledger WHERE kind = 'relaunch' ORDER BY id DESC LIMIT ?", (HISTORY_LIMIT,)
    )
    out = []
    for row in reversed(rows):
        try:
            detail = json.loads(row["detail"])
        except ValueError:
            detail = {}
        out.append(Relaunch(clock.instant_from(detail, row["ts"]), row["cause"] or "", detail.get("mode", ""),
                            detail.get("old_session"), detail.get("new_session")))
    return tuple(out)


def canary_recycled(ctx: Context, pinned: str | None) -> frozenset[str]:
    if pinned is None:
        return frozenset()
    row = ctx.store.query_one(
        "SELECT 1 FROM ledger WHERE kind = 'relaunch' AND cause = 'canary_failed' "
        "AND json_extract(detail, '$.old_session') = ? LIMIT 1",
        (pinned,),
    )
    return frozenset({pinned}) if row else frozenset()


def held(ctx: Context) -> dict | None:
    raw = ctx.store.get_meta(HOLD_KEY)
    return json.loads(raw) if raw else None


def clear_hold(ctx: Context, *, source: str, cause: str, at: Instant) -> bool:
    """An operator acted: automatic recovery may run again. False when nothing was held."""
    with ctx.store.write() as db:
        if ctx.store.get_meta(HOLD_KEY) is None:
            return False
        db.execute("DELETE FROM meta WHERE key = ?", (HOLD_KEY,))
        ledger.append_in(db, "hold_cleared", source=source, cause=cause, detail={"by": source}, ts=at.wall)
    return True


def witness_note(ctx: Context) -> str:
    """Who will witness a relaunch that just happened: a relaunch is a claim until a canary acks."""
    if locks.is_held(ctx.state_dir, locks.SUPERVISOR):
        return "unwitnessed until a canary acks (loom supervise probes it as soon as the agent is ready)"
    return "unwitnessed: no loom supervise is running to probe it; `loom canary` witnesses it"


def situation(ctx: Context, cause: str) -> Situation:
    pinned = session.pinned(ctx.store)
    return Situation(cause, pinned, history(ctx), held(ctx) is not None, canary_recycled(ctx, pinned))


def escalate(ctx: Context, cause: str, decision: Decision, source: str, at: Instant) -> None:
    """Stop relaunching and tell the human, exactly once per hold."""
    text = (
        f"Loom stopped relaunching the agent: {'; '.join(decision.reasons)}. Last cause: {cause}. "
        f"Automatic recovery is on hold until you act (loom recycle --resume or --fresh)."
    )
    with ctx.store.write() as db:
        if ctx.store.get_meta(HOLD_KEY) is not None:
            return
        ctx.store.set_meta(HOLD_KEY, json.dumps({"ts": at.wall, "cause": cause,
                                                       "reasons": list(decision.reasons)}), db)
        event = ledger.append_in(db, "escalation", source=source, cause=cause,
                                 detail={"reasons": list(decision.reasons), "held": True}, ts=at.wall)
        outbox.enqueue(db, text, dedupe_key=f"hold-{event.id}", now=at.wall)
