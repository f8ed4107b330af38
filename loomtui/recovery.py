"""Recovery: take recycle.lock, look again, ask the policy, act, record.

Every automatic trigger (watchdog, exit watch, canary) comes through `recover`. The second
look under the lock is what keeps two supervisors, or a supervisor restarted mid-relaunch,
from relaunching twice for one failure: by the time the lock is ours, the failure may have
been handled already.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from . import clock, launch, ledger, locks, outbox, policy, session
from .context import Context
from .errors import LockHeld
from .policy import Decision, Instant, Relaunch, Situation

HISTORY_LIMIT = 500


@dataclass
class Recovery:
    """What happened: acted, waited (backoff), held (ceiling), busy (lock), or resolved (second look)."""

    status: str
    decision: Decision | None = None
    outcome: launch.Outcome | None = None
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        if self.outcome is not None:
            return self.outcome.describe()
        reasons = "; ".join(self.decision.reasons) if self.decision else ""
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
    raw = ctx.store.get_meta(launch.HOLD_KEY)
    return json.loads(raw) if raw else None


def situation(ctx: Context, cause: str) -> Situation:
    pinned = session.pinned(ctx.store)
    return Situation(cause, pinned, history(ctx), held(ctx) is not None, canary_recycled(ctx, pinned))


def recover(
    ctx: Context,
    cause: str,
    *,
    source: str,
    still_failing: Callable[[], bool] | None = None,
    evidence: dict | None = None,
    now: Instant | None = None,
) -> Recovery:
    try:
        lock = locks.hold(ctx.state_dir, locks.RECYCLE, timeout=0)
    except LockHeld:
        return Recovery("busy", notes=["another relaunch holds recycle.lock"])
    with lock:
        if still_failing is not None and not still_failing():
            return Recovery("resolved", notes=["the failure was gone on a second look"])
        at = now or clock.now()
        decision = policy.decide(situation(ctx, cause), policy.limits_from(ctx.config), at)
        if decision.action == policy.RELAUNCH:
            reason = "; ".join(decision.reasons)
            outcome = launch.relaunch_locked(ctx, decision.mode, cause=cause, source=source, reason=reason,
                                             evidence=evidence)
            return Recovery("relaunched" if outcome.ok else "failed", decision, outcome)
        if decision.action == policy.HOLD and decision.escalate:
            escalate(ctx, cause, decision, source, at)
            return Recovery("held", decision, notes=["escalated to the operator"])
        return Recovery("held" if decision.action == policy.HOLD else "waiting", decision)


def escalate(ctx: Context, cause: str, decision: Decision, source: str, at: Instant) -> None:
    """Stop relaunching and tell the human, exactly once per hold."""
    text = (
        f"Loom stopped relaunching the agent: {'; '.join(decision.reasons)}. Last cause: {cause}. "
        f"Automatic recovery is on hold until you act (loom recycle --resume or --fresh)."
    )
    with ctx.store.write() as db:
        if ctx.store.get_meta(launch.HOLD_KEY) is not None:
            return
        ctx.store.set_meta(launch.HOLD_KEY, json.dumps({"ts": at.wall, "cause": cause,
                                                       "reasons": list(decision.reasons)}), db)
        event = ledger.append_in(db, "escalation", source=source, cause=cause,
                                 detail={"reasons": list(decision.reasons), "held": True}, ts=at.wall)
        outbox.enqueue(db, text, dedupe_key=f"hold-{event.id}", now=at.wall)
