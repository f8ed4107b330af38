"""The harness's holds: a turn the agent CLI reports failed for a quota or a login holds the agent
(no relaunch: a restart cannot fix either), and the next turn that succeeds ends the hold.

Done where the hooks loop records the event (ingest), in the same transaction as its row, so the
hold, its ledger events and the operator's one message are there together or not at all. The
decisions are harness_rules'; the hold is stored as every hold is (agent/holds.py), so `loom
status`, the console, `loom release` and every loop's admission see it with its cause.
"""

from __future__ import annotations

import sqlite3

from loomtui.agent import hold_rules, holds
from loomtui.agent.hold_rules import Hold
from loomtui.context import Context
from loomtui.durations import format_duration
from loomtui.hooks import harness_rules as rules
from loomtui.hooks.events import HookEvent
from loomtui.store import hook_events as table
from loomtui.timing import Instant

SOURCE = "hooks"
SUCCEEDED = "succeeded"  # holds.release's `how` when a turn that succeeded ends the hold


def apply_in(db: sqlite3.Connection, ctx: Context, event: HookEvent, at: Instant, now: Instant) -> None:
    """One recorded event's effect on the hold: `at` is when the CLI wrote it, `now` the reading."""
    if event.event == "StopFailure":
        failed_in(db, ctx, event, at, now)
    elif event.event == "Stop":
        stopped_in(db, ctx, at, now)


def _in_force(db: sqlite3.Connection, ctx: Context, now: Instant) -> Hold | None:
    """The hold in force; one that ran out is recorded as expired here, first (whoever sees it first)."""
    hold = holds.held_in(db)
    if hold is not None and hold_rules.expired(hold, now):
        holds.release_in(db, ctx, source=SOURCE, how=rules.EXPIRED, now=now)
        return None
    return hold


def _facts(hold: Hold | None) -> rules.Held | None:
    return None if hold is None else rules.Held(hold.by == "harness", hold.cause, hold.since, hold.mono, hold.boot)


def failed_in(db: sqlite3.Connection, ctx: Context, event: HookEvent, at: Instant, now: Instant) -> Hold | None:
    """A StopFailure: hold for a quota or a login (told once), else nothing. The hold begins when
    the turn failed, so a Stop written after it, even in the same batch, ends it."""
    error = event.source
    hold = _in_force(db, ctx, now)
    ended = table.last_harness_end_in(db, ctx.agent)
    last = None if ended is None else rules.Ended(str(ended["cause"] or ""), float(ended["ts"]), str(ended["how"] or ""))
    resets = event.detail.get("resets_at")
    plan = rules.on_failure(error, now=at.wall, resets_at=resets if isinstance(resets, float) else None,
                            held=_facts(hold), last=last,
                            succeeded_since_end=last is not None and table.stopped_since_in(db, ctx.agent, last.at))
    if plan is None:
        return None
    # The reason names the error type, one of harness_rules.HOLDING's words: nothing of the payload's own.
    placed = holds.place_in(db, ctx, by="harness", reason=f"the agent CLI reported {error}",
                            until=at.wall + plan.seconds, source=SOURCE, now=at, cause=plan.cause, tell=False)
    if plan.tell:
        given = " (the reset time it gave)" if isinstance(resets, float) else ""
        holds.tell_in(db, ctx, f"the agent's turn failed: the agent CLI reported {error}. Held ({plan.cause}) for "
                               f"{format_duration(plan.seconds)}{given} or until a turn succeeds; no relaunch: a "
                               "restart cannot fix a quota or a login. `loom release` ends the hold.", now=now.wall)
    return placed


def stopped_in(db: sqlite3.Connection, ctx: Context, at: Instant, now: Instant) -> Hold | None:
    """A Stop: a turn succeeded, so the harness's hold placed before it ends (silently: the
    operator was told of the hold, and its end is in the ledger and the status). A hold that had
    run out before the turn succeeded is recorded as ended then, not at the reading after the
    success: a failure after this success is news to the operator (harness_rules.on_failure)."""
    hold = _in_force(db, ctx, at)  # `at` is never after the reading (ingest caps it)
    if not rules.on_success(_facts(hold), at.wall, at.mono, at.boot):
        return None
    return holds.release_in(db, ctx, source=SOURCE, how=SUCCEEDED, now=now)
