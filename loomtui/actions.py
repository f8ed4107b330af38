"""The one control path: every trigger (ticks, console keys, CLI, Telegram) acts through here.

Relaunching, typing into the pane, pressing keys, probing and resolving are reached only
through these functions (an import-linter contract in pyproject.toml keeps it so). Each takes
the locks it needs and is recorded in the ledger with its source (who asked) and cause.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from loomtui import clock
from loomtui.agent import launch, launches, policy, recovery
from loomtui.agent.driver import TmuxDriver
from loomtui.agent.inject import InjectResult
from loomtui.agent.inject import inject as _type_text
from loomtui.agent.inject import press as _press_keys
from loomtui.agent.policy import Instant
from loomtui.agent.recovery import Recovery
from loomtui.canary import probe
from loomtui.context import Context
from loomtui.errors import LockHeld
from loomtui.sentinel import claims
from loomtui.store import locks

# An operator's relaunch waits this long for one already under way; an automatic one never waits
# (the failure it saw may be handled by then, and its loop looks again next tick).
OPERATOR_LOCK_WAIT = 120.0


def recover(
    ctx: Context,
    cause: str,
    *,
    source: str,
    reason: str | None = None,
    still_failing: Callable[[], bool] | None = None,
    evidence: dict[str, Any] | None = None,
    lock_wait: float | None = None,
    driver: TmuxDriver | None = None,
    now: Instant | None = None,
) -> Recovery:
    """Take recycle.lock, look again, ask the policy, then relaunch, escalate or wait.

    The one function that relaunches, for automatic and operator causes alike. The second look
    under the lock (`still_failing`) keeps two supervisors, or one restarted mid-relaunch, from
    relaunching twice for one failure.
    """
    operator = cause in policy.OPERATOR
    wait = lock_wait if lock_wait is not None else (OPERATOR_LOCK_WAIT if operator else 0.0)
    try:
        lock = locks.hold(ctx.state_dir, locks.RECYCLE, timeout=wait)
    except LockHeld:
        return Recovery("busy", notes=["another relaunch holds recycle.lock"])
    with lock:
        if still_failing is not None and not still_failing():
            return Recovery("resolved", notes=["the failure was gone on a second look"])
        at = now or clock.now()
        decision = policy.decide(recovery.situation(ctx, cause), policy.limits_from(ctx.config), at)
        if decision.action == policy.RELAUNCH:
            if operator:
                recovery.clear_hold(ctx, source=source, cause=cause, at=at)
            outcome = launch.relaunch_locked(ctx, decision.mode, cause=cause, source=source,
                                             reason=reason or "; ".join(decision.reasons), evidence=evidence,
                                             driver=driver)
            result = Recovery("relaunched" if outcome.ok else "failed", decision, outcome)
        elif decision.action == policy.HOLD and decision.escalate:
            recovery.escalate(ctx, cause, decision, source, at)
            return Recovery("held", decision, notes=["escalated to the operator"])
        else:
            return Recovery("held" if decision.action == policy.HOLD else "waiting", decision)
    if result.ok:
        # A relaunch is a claim until a canary acks: wake the daemon's canary loop, now that the
        # lock is free and a probe may be typed, and say plainly who will witness it.
        launches.ring(ctx.state_dir, launches.RELAUNCHED)
        result.notes.append(recovery.witness_note(ctx))
    return result


def recycle(ctx: Context, mode: str, *, source: str, reason: str | None = None) -> Recovery:
    """An operator's relaunch: `resume` the pinned session or start `fresh`; clears a hold."""
    if mode not in (policy.RESUME, policy.FRESH):
        raise ValueError(f"unknown relaunch mode {mode!r}: use resume or fresh")
    return recover(ctx, f"operator_{mode}", source=source, reason=reason)


def inject(ctx: Context, text: str, *, source: str, kind: str = "inject",
           detail: dict[str, Any] | None = None) -> InjectResult:
    """Type one line into the agent's pane (the probe's instruction and the nudges too)."""
    return _type_text(ctx, text, source=source, kind=kind, detail=detail)


def nudge(ctx: Context, text: str, *, source: str, detail: dict[str, Any]) -> InjectResult:
    """Tell the agent about a queue item."""
    return _type_text(ctx, text, source=source, kind="queue_nudge", detail=detail)


def dismiss_modal(ctx: Context, keys: list[str], *, source: str, detail: dict[str, Any]) -> InjectResult:
    """Press the configured keys to close a known dialog."""
    return _press_keys(ctx, keys, source=source, kind="modal_dismissed", detail=detail)


def canary_now(ctx: Context, *, source: str, stop: threading.Event | None = None):
    """Probe now, or join the probe in flight."""
    return probe.probe(ctx, inject, source=source, stop=stop)


def resolve(ctx: Context, item_id: int, note: str, *, source: str, session_id: str | None = None):
    """Claim a queue item as handled; only the job's next clean run witnesses it."""
    return claims.resolve(ctx, item_id, note, source=source, session_id=session_id)
