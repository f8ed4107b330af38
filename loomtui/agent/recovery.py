"""What a recovery decides from, and what it leaves: relaunch history, the hold, escalation.

The decision itself is actions.recover, the one owner of recycle.lock; this module gathers its
facts from the store (`situation`) and keeps the ceiling's hold (agent/holds.py stores every
hold): `escalate` places it, an operator's relaunch (`clear_hold`) or `loom release` ends it.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loomtui import clock
from loomtui.agent import holds
from loomtui.agent.hold_rules import Hold
from loomtui.agent.policy import Decision, Relaunch, Situation
from loomtui.timing import Instant, stored
from loomtui.context import Context
from loomtui.store import ledger, locks, outbox, session

if TYPE_CHECKING:
    from loomtui.agent.launch import Outcome

HISTORY_LIMIT = 500
HOLD_KEY = holds.KEY


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
    rows = ledger.relaunches(ctx.store, ctx.agent, HISTORY_LIMIT)
    # Unpacked in the query's column order (ts, cause, detail): by name, a Row compares column names.
    return tuple(_relaunch(ts, cause, detail) for ts, cause, detail in reversed(rows))


@functools.lru_cache(maxsize=4 * HISTORY_LIMIT, typed=True)
def _relaunch(ts: float, cause: str | None, raw: str) -> Relaunch:
    """One ledger row as a Relaunch: a function of the row's text alone (a Relaunch is frozen), so
    it is parsed once, not at every recovery's look at the last HISTORY_LIMIT rows (a storm's
    backoff asks each watchdog tick: that parsing was a fifth of the simulator's time)."""
    try:
        detail = json.loads(raw)
    except ValueError:
        detail = {}
    return Relaunch(stored(ts, detail.get("mono"), detail.get("boot")), cause or "", detail.get("mode", ""),
                    detail.get("old_session"), detail.get("new_session"))


def canary_recycled(ctx: Context, pinned: str | None) -> frozenset[str]:
    if pinned is None:
        return frozenset()
    return frozenset({pinned}) if ledger.canary_recycled(ctx.store, ctx.agent, pinned) else frozenset()


def held(ctx: Context, now: Instant | float | None = None) -> Hold | None:
    """The hold in force (by, reason, until, ...), or None. A timed hold past
    its end reads as no hold even before a loop records that it expired (by the monotonic clock
    when `now` is an Instant, as by default)."""
    return holds.current(ctx, clock.now() if now is None else now)


def clear_hold(ctx: Context, *, source: str, cause: str, at: Instant) -> bool:
    """An operator relaunched: the ceiling's hold ends (automatic recovery may run again). An
    operator's own hold stays: it ends by `loom release` or its time. False when nothing ended."""
    # Read and ended in one transaction: an operator's hold placed between a read and a release of
    # its own would have been ended in the ceiling's place.
    return holds.release(ctx, source=source, how="relaunch", now=at.wall, cause=cause, only_by="ceiling") is not None


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
    # With several agents the human is told whose it is, and the command names it.
    several = len(ctx.config.agent_names) > 1
    text = (
        f"{f'[{ctx.agent}] ' if several else ''}Loom stopped relaunching the agent: {'; '.join(decision.reasons)}. "
        f"Last cause: {cause}. Automatic recovery is on hold until you act "
        f"(loom recycle{f' --agent {ctx.agent}' if several else ''} --resume or --fresh)."
    )
    with ctx.store.write() as db:
        if not holds.place_if_free(db, Hold(at.wall, "ceiling", "; ".join(decision.reasons), None, cause,
                                            mono=at.mono, boot=at.boot)):
            return
        event = ledger.append_in(db, "escalation", source=source, cause=cause,
                                 detail={"reasons": list(decision.reasons), "held": True}, ts=at.wall)
        # The escalation is the newest event: its id and hash are the ledger's head, now off the machine
        # (`loom ledger verify --head` proves later that nothing up to it was rewritten).
        outbox.enqueue(db, f"{text} ledger {ledger.format_head(event.id, event.hash)}",
                       dedupe_key=f"hold-{event.id}", now=at.wall)
