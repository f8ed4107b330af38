"""The hold as stored: one record in the store's meta table, and its changes in the ledger.

The rules (what is active, what is refused, how it reads) are in hold_rules; this module reads
and writes the record. Every change is one write transaction with its ledger event.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from loomtui.actors import Actor, of_source
from loomtui.agent.hold_rules import Hold, active, describe, expired, first_refusal, noting, remaining
from loomtui.timing import Instant, as_instant
from loomtui.context import Context
from loomtui.states import MAIN_AGENT
from loomtui.store import counters, ledger, meta, outbox
from loomtui.store.db import agent_key
from loomtui.text import printable

KEY = "hold"


def _key(db: sqlite3.Connection) -> str:
    # Each agent has its own hold: the one of the agent whose store the connection came from.
    return agent_key(KEY, getattr(db, "agent", MAIN_AGENT))


def _read_in(db: sqlite3.Connection) -> Hold | None:
    return _parse(meta.get_in(db, _key(db)))


@functools.lru_cache(maxsize=64)
def _parse(raw: str | None) -> Hold | None:
    """The record's text as a Hold: a function of the text alone (a Hold is frozen), so each text
    is parsed once, not at every look of every loop (admit, expire and held each read it)."""
    if not raw:
        return None
    try:
        return Hold.from_record(json.loads(raw))
    except (ValueError, TypeError, AttributeError):
        # A record Loom cannot read still means someone meant to hold: hold, until released.
        return Hold(0.0, "operator", "unreadable hold record (loom release clears it)")


def _write_in(db: sqlite3.Connection, hold: Hold) -> None:
    meta.set_in(db, _key(db), json.dumps(hold.record(), sort_keys=True))


def stored(ctx: Context) -> Hold | None:
    """The record as it is, active or not (a timed hold past its end until someone expires it)."""
    return _parse(ctx.store.get_meta(ctx.store.agent_key(KEY)))


def current(ctx: Context, now: Instant | float) -> Hold | None:
    """The hold in force at `now` (an Instant: clock.now(); a bare wall time is measured by wall
    time), or None. Read-only: a hold past its end reads as no hold."""
    hold = stored(ctx)
    return hold if active(hold, now) else None


def place(ctx: Context, *, by: str, reason: str, until: float | None, source: str, now: Instant | float,
          cause: str = "", actor: Actor | None = None) -> Hold:
    """Hold (or replace the hold in force); recorded as `hold_placed` with who and why. `actor` is
    who asked (the console, the CLI, Telegram or the agent; by default the source)."""
    with ctx.store.write() as db:
        return place_in(db, ctx, by=by, reason=reason, until=until, source=source, now=now, cause=cause, actor=actor)


def place_in(db: sqlite3.Connection, ctx: Context, *, by: str, reason: str, until: float | None, source: str,
             now: Instant | float, cause: str = "", actor: Actor | None = None, tell: bool = True) -> Hold:
    """`place`, in the caller's transaction (the harness's hold, with the hook event that caused it).
    Anyone's hold but the operator's is told to the operator, unless `tell` is off (the caller
    words its own message, or has nothing new to say)."""
    who = actor or of_source(source)
    at = as_instant(now)
    now = at.wall  # the ledger's and the outbox's time; the hold's start keeps both clocks (its end survives a jump)
    hold = Hold(now, "operator" if by == "operator" else "harness" if by == "harness" else "ceiling", reason, until, cause,
                actor=who.kind, mono=at.mono, boot=at.boot)
    before = _read_in(db)
    _write_in(db, hold)
    ledger.append_in(db, "hold_placed", source=source, cause=cause or None, ts=now, detail={
        "by": hold.by, "reason": reason, "until": until, **who.detail(),
        **({"replaced": before.by} if before is not None and active(before, at) else {}),
    })
    if tell and not who.is_operator:
        tell_in(db, ctx, f"{who.describe()} placed a hold: {describe(hold, now)}", now=now)
    return hold


def held_in(db: sqlite3.Connection) -> Hold | None:
    """The record as it is, in the caller's transaction (active or not: the caller judges at its `now`)."""
    return _read_in(db)


def tell_in(db: sqlite3.Connection, ctx: Context, text: str, *, now: float) -> None:
    """Tell the operator at once of what someone else did (the agent, mostly), in the transaction
    of the change: a hold placed or released, or an action refused. With several agents the
    message names whose hold it is."""
    whose = f"[{ctx.agent}] " if len(ctx.config.agent_names) > 1 else ""
    outbox.enqueue(db, f"{whose}Loom: {printable(text)}", now=now)


def place_if_free(db: sqlite3.Connection, hold: Hold) -> bool:
    """The ceiling's hold, in the caller's transaction: only when no hold is in force (once per hold)."""
    before = _read_in(db)
    if active(before, hold.start):
        return False
    _write_in(db, hold)
    return True


def release(ctx: Context, *, source: str, how: str, now: Instant | float, cause: str | None = None,
            actor: Actor | None = None, only_by: str | None = None) -> Hold | None:
    """End the hold (`how`: release, relaunch, expired, or succeeded: the harness's, by a turn that
    succeeded). None when nothing was held. `actor` is who asked (by default the source).
    `only_by`: only a hold placed by that (the ceiling's), read and ended in one transaction."""
    with ctx.store.write() as db:
        return release_in(db, ctx, source=source, how=how, now=now, cause=cause, actor=actor, only_by=only_by)


def release_in(db: sqlite3.Connection, ctx: Context, *, source: str, how: str, now: Instant | float,
               cause: str | None = None, actor: Actor | None = None, only_by: str | None = None) -> Hold | None:
    """`release`, in the caller's transaction."""
    who = actor or of_source(source)
    at = as_instant(now)
    now = at.wall
    hold = _read_in(db)
    if hold is None or (only_by is not None and hold.by != only_by):
        return None
    if how == "expired" and not expired(hold, at):
        return None  # released or replaced meanwhile: nothing of ours to expire
    meta.delete_in(db, _key(db))
    # The harness's hold keeps its cause on the way out: the next failure of the same cause asks
    # how the last one ended (hooks/harness.py).
    cause = cause or (hold.cause if hold.by == "harness" else None)
    ledger.append_in(db, "hold_cleared", source=source, cause=cause, ts=now,
                     detail={"by": source, "how": how, "held_by": hold.by, "reason": hold.reason,
                             **who.detail()})
    if how == "release" and not who.is_operator:
        tell_in(db, ctx, f"{who.describe()} released the hold ({describe(hold, now)}); "
                         "automatic recovery is on again", now=now)
    return hold


def expire(ctx: Context, *, source: str, now: Instant | float) -> Hold | None:
    """A timed hold past its end ends by itself, recorded once by whichever loop sees it first
    (its end on the monotonic clock from its start, within one boot: hold_rules)."""
    hold = stored(ctx)
    if not expired(hold, now):
        return None
    return release(ctx, source=source, how="expired", now=now)


def refused(ctx: Context, *, action: str, cause: str, loop: str, source: str, now: Instant | float) -> None:
    """Record that the hold refused `action`: counted every time, in the ledger once per kind."""
    now = as_instant(now).wall
    with ctx.store.write() as db:
        labels = {"loop": loop, "decision": "refused", "reason": "hold"}
        counters.bump_in(db, "loom_admit_total", labels if ctx.agent == MAIN_AGENT else {**labels, "agent": ctx.agent})
        hold = _read_in(db)
        if hold is None or not first_refusal(hold, action, cause):
            return
        _write_in(db, noting(hold, action, cause))
        ledger.append_in(db, "refused", source=source, cause=cause or None, ts=now,
                         detail={"action": action, "reason": "hold", "held_by": hold.by, "hold_reason": hold.reason})


@dataclass(frozen=True)
class HoldChange:
    """What `loom hold` / `loom release` did, for the CLI, the console and Telegram."""

    action: str                    # placed / released / none
    hold: Hold | None
    at: float

    @property
    def released(self) -> bool:
        return self.action == "released"

    def describe(self) -> str:
        if self.hold is None:
            return "nothing was held"
        if self.action == "released":
            who = ("the ceiling's" if self.hold.by == "ceiling" else "the harness's" if self.hold.by == "harness" else
                   "the agent's" if self.hold.actor == "agent" else "the operator's")
            return f"released {who} hold ({self.hold.reason}); automatic recovery is on again"
        return describe(self.hold, self.at) + "; automatic relaunches, reaps, modal dismissals and nudges wait"

    def as_json(self) -> dict[str, Any]:
        hold = self.hold
        return {"action": self.action, "hold": None if hold is None else {
            "by": hold.by, "actor": hold.actor, "reason": hold.reason, "since": hold.since, "until": hold.until,
            "remaining": remaining(hold, self.at)}}
