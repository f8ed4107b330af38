"""The one control path: every trigger (ticks, console keys, CLI, Telegram) acts through here.

Relaunching, typing into the pane, pressing keys, probing, resolving, reaping a foreign poller,
repairing tmux's socket and alerting the operator are reached only through these functions
(import-linter contracts in pyproject.toml keep the modules that do them so). Each takes the
locks it needs and is recorded in the ledger with its source (who asked) and cause.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

from loomtui import clock
from loomtui.actors import Actor, of_source
from loomtui.agent import hold_rules, holds, kill, launch, launches, policy, proctree, recovery
from loomtui.agent.inject import InjectResult
from loomtui.agent.inject import inject as _type_text
from loomtui.agent.inject import press as _press_keys
from loomtui.timing import Instant
from loomtui.agent.ports import AgentDriver
from loomtui.agent.recovery import Recovery
from loomtui.context import Context
from loomtui.errors import LockHeld, LoomError
from loomtui.hooks import turns
from loomtui.sentinel import claims
from loomtui.states import MAIN_AGENT, EventKind
from loomtui.store import counters, ledger, locks, outbox
from loomtui.text import digest, printable

# An operator's relaunch waits this long for one already under way; an automatic one never waits
# (the failure it saw may be handled by then, and its loop looks again next tick).
OPERATOR_LOCK_WAIT = 120.0
log = logging.getLogger("loom.actions")
LOOPS = ("watchdog", "canary", "sentinel")


def _loop(source: str) -> str:
    """The loop a trigger belongs to, for the KPIs: a tick's own loop, else the operator."""
    return source if source in LOOPS else "operator"


def _fired(ctx: Context, loop: str, source: str) -> None:
    """An operator's trigger of a loop's action, for the KPIs (the loops count their own ticks)."""
    if _loop(source) == "operator":
        _count(ctx, "loom_fire_total", {"loop": loop, "source": source})


def _admitted(ctx: Context, source: str, decision: str, reason: str = "") -> None:
    _count(ctx, "loom_admit_total", {"loop": _loop(source), "decision": decision, "reason": reason})


def _count(ctx: Context, name: str, labels: dict[str, str]) -> None:
    # A named agent's counts say whose they are; `main`'s stay the series they were before names.
    if ctx.agent != MAIN_AGENT:
        labels = {**labels, "agent": ctx.agent}
    # A count must never stop the action it counts: a locked store loses one increment, not a relaunch.
    try:
        counters.bump(ctx.store, name, labels)
    except (sqlite3.Error, LoomError) as exc:
        log.warning("could not count %s %s: %s", name, labels, exc)


def admit(ctx: Context, action: str, *, cause: str, source: str,
          now: Instant | float | None = None) -> hold_rules.Hold | None:
    """May Loom's own hands do `action` now? None if so; the hold in force if it refuses it.

    Only automatic actions are ever refused (an operator's source is never a loop). A refusal
    is counted every time and written to the ledger once per kind per hold; a timed hold past
    its end is recorded as expired here, by whichever loop asks first.
    """
    if _loop(source) == "operator":
        return None
    at = clock.now() if now is None else now  # both clocks: a timed hold's end survives a wall-clock jump
    holds.expire(ctx, source=source, now=at)
    hold = holds.current(ctx, at)
    if hold_rules.refuses(hold, action, automatic=True, now=at):
        holds.refused(ctx, action=action, cause=cause, loop=_loop(source), source=source, now=at)
        return hold
    return None


class Refused(LoomError):
    """The agent asked for what only the operator may do (`agent.may_hold` is off): exit 1."""


def _unless_refused(ctx: Context, action: str, who: Actor, *, source: str, at: float, reason: str = "") -> None:
    """The agent may hold, release or recycle only where `agent.may_hold` says so; a refusal is
    recorded with who asked, told to the operator at once, and raised (one line, exit 1)."""
    if not who.is_agent or ctx.config.agent.may_hold:
        return
    said = f" (reason given: {printable(reason)[:200]})" if reason else ""
    with ctx.store.write() as db:
        # The reason is the agent's text: its length and digest in the ledger, the text to the operator.
        ledger.append_in(db, "refused", source=source, ts=at, detail={
            "action": action, "reason": "agent", **who.detail(),
            **({"reason_length": len(reason), "reason_digest": digest(reason)} if reason else {})})
        holds.tell_in(db, ctx, f"refused a {action} asked for by {who.describe()} "
                               f"(session {who.session}): agent.may_hold is off{said}.", now=at)
    raise Refused(f"{action} refused: the agent may not {action} (agent.may_hold is off); the operator is told")


def hold(ctx: Context, reason: str, duration: float | None, *, source: str,
         actor: Actor | None = None) -> holds.HoldChange:
    """Suspend automatic relaunches, reaps, modal dismissals and nudges (a hand-placed hold: the
    operator's, or the agent's where `agent.may_hold` lets it; anyone's but the operator's is told)."""
    who = actor or of_source(source)
    start = clock.now()  # the hold's start on both clocks: its end survives a wall-clock jump
    at = start.wall
    _unless_refused(ctx, "hold", who, source=source, at=at, reason=reason)
    until = None if duration is None else at + duration
    placed = holds.place(ctx, by="operator", reason=reason, until=until, source=source, now=start, actor=who)
    return holds.HoldChange("placed", placed, at)


def release(ctx: Context, *, source: str, actor: Actor | None = None) -> holds.HoldChange:
    """End the hold in force, the operator's or the ceiling's; automatic recovery resumes."""
    who = actor or of_source(source)
    at = clock.wall()
    _unless_refused(ctx, "release", who, source=source, at=at)
    holds.expire(ctx, source=source, now=clock.now())
    ended = holds.release(ctx, source=source, how="release", now=at, actor=who)
    if ended is not None:
        launches.ring(ctx.agent_dir, launches.PANE_DIED)  # the watchdog looks again now, not next tick
    return holds.HoldChange("released" if ended is not None else "none", ended, at)


def recover(
    ctx: Context,
    cause: str,
    *,
    source: str,
    reason: str | None = None,
    still_failing: Callable[[], bool] | None = None,
    evidence: dict[str, Any] | None = None,
    lock_wait: float | None = None,
    driver: AgentDriver | None = None,
    now: Instant | None = None,
) -> Recovery:
    """Take recycle.lock, look again, ask the policy, then relaunch, escalate or wait.

    The one function that relaunches, for automatic and operator causes alike. The second look
    under the lock (`still_failing`) keeps two supervisors, or one restarted mid-relaunch, from
    relaunching twice for one failure.
    """
    operator = cause in policy.OPERATOR
    if not operator:
        refused = admit(ctx, "relaunch", cause=cause, source=source, now=now)
        if refused is not None:
            return Recovery("held", notes=[hold_rules.describe(refused, now or clock.now())])
    wait = lock_wait if lock_wait is not None else (OPERATOR_LOCK_WAIT if operator else 0.0)
    try:
        lock = locks.hold(ctx.agent_dir, locks.RECYCLE, timeout=wait)
    except LockHeld:
        _admitted(ctx, source, "refused", "lock_busy")
        return Recovery("busy", notes=["another relaunch holds recycle.lock"])
    with lock:
        if still_failing is not None and not still_failing():
            return Recovery("resolved", notes=["the failure was gone on a second look"])
        at = now or clock.now()
        decision = policy.decide(recovery.situation(ctx, cause), policy.limits_from(ctx.config), at)
        if decision.action == policy.RELAUNCH:
            _admitted(ctx, source, "admitted")
            if operator:
                recovery.clear_hold(ctx, source=source, cause=cause, at=at)
            outcome = launch.relaunch_locked(ctx, decision.launch_mode, cause=cause, source=source,
                                             reason=reason or "; ".join(decision.reasons), evidence=evidence,
                                             driver=driver, automatic=not operator)
            if outcome.held is not None:
                # A hold written after the policy's look, before the relaunch's record: nothing was
                # done, and the refusal is recorded as any other (it was counted admitted a moment ago).
                if _loop(source) == "operator":
                    _admitted(ctx, source, "refused", "hold")
                else:
                    holds.refused(ctx, action="relaunch", cause=cause, loop=_loop(source), source=source, now=at)
                return Recovery("held", notes=[hold_rules.describe(outcome.held, at)])
            result = Recovery("relaunched" if outcome.ok else "failed", decision, outcome)
        elif decision.action == policy.HOLD and decision.escalate:
            _admitted(ctx, source, "refused", "ceiling")
            recovery.escalate(ctx, cause, decision, source, at)
            return Recovery("held", decision, notes=["escalated to the operator"])
        else:
            _admitted(ctx, source, "refused", "hold" if decision.action == policy.HOLD else "backoff")
            return Recovery("held" if decision.action == policy.HOLD else "waiting", decision)
    if result.ok:
        # A relaunch is a claim until a canary acks: wake the daemon's canary loop, now that the
        # lock is free and a probe may be typed, and say plainly who will witness it.
        launches.ring(ctx.agent_dir, launches.RELAUNCHED)
        result.notes.append(recovery.witness_note(ctx))
    return result


def recycle(ctx: Context, mode: str, *, source: str, reason: str | None = None,
            actor: Actor | None = None) -> Recovery:
    """An operator's relaunch: `resume` the pinned session or start `fresh`; ends the ceiling's hold (an
    operator's own hold stays until `release` or its end). The agent's own is refused unless
    `agent.may_hold`; who asked is in the relaunch's evidence."""
    if mode not in (policy.RESUME, policy.FRESH):
        raise ValueError(f"unknown relaunch mode {mode!r}: use resume or fresh")
    who = actor or of_source(source)
    at = clock.wall()
    _unless_refused(ctx, "recycle", who, source=source, at=at, reason=reason or "")
    _fired(ctx, "watchdog", source)
    result = recover(ctx, f"operator_{mode}", source=source, reason=reason, evidence=who.detail())
    if who.is_agent and result.outcome is not None:
        with ctx.store.write() as db:
            holds.tell_in(db, ctx, f"{who.describe()} relaunched the agent ({mode}): {result.describe()}", now=at)
    return result


def inject(ctx: Context, text: str, *, source: str, kind: EventKind = "inject",
           detail: dict[str, Any] | None = None, ref: str = "", actor: Actor | None = None) -> InjectResult:
    """Type one line into the agent's pane (the probe's instruction and the nudges too); `ref` is the
    asker's own id for it (a Telegram message), kept with the line by the stream-json pump. An
    operator's or the agent's line (`kind` inject) records who typed it."""
    if kind == "inject":
        detail = {**(detail or {}), **(actor or of_source(source)).detail()}
    return _type_text(ctx, text, source=source, kind=kind, detail=detail, ref=ref)


def nudge(ctx: Context, text: str, *, source: str, detail: dict[str, Any]) -> InjectResult:
    """Tell the agent about a queue item (refused while a hold is in force, or while its hooks
    say a permission prompt is open)."""
    refused = admit(ctx, "nudge", cause="queue_item", source=source)
    if refused is not None:
        return InjectResult(False, 0, "", error=f"refused: {hold_rules.describe(refused, clock.now())}",
                            refused="hold")
    if turns.withholds_probe(ctx, clock.now()):
        # A line and its Enter typed into an open permission dialog could answer it: not tried, not
        # counted (the next tick tries again; the backstop still reaches the operator).
        return InjectResult(False, 0, "", error="refused: the agent waits for the operator's permission",
                            refused="permission")
    return _type_text(ctx, text, source=source, kind="queue_nudge", detail=detail)


def dismiss_modal(ctx: Context, keys: list[str], *, source: str, detail: dict[str, Any]) -> InjectResult:
    """Press the configured keys to close a known dialog (refused while a hold is in force)."""
    refused = admit(ctx, "dismiss_modal", cause="modal", source=source)
    if refused is not None:
        return InjectResult(False, 0, "", error=f"refused: {hold_rules.describe(refused, clock.now())}",
                            refused="hold")
    return _press_keys(ctx, keys, source=source, kind="modal_dismissed", detail=detail)


def reap_foreign(ctx: Context, pid: int, *, source: str,
                 still_foreign: Callable[[], bool] | None = None, grace: float = 2.0) -> str | None:
    """End a poller outside the agent's tree (refused while a hold is in force); None if the
    caller's second look, just before the kill, finds it no longer foreign."""
    if still_foreign is not None and not still_foreign():
        return None
    if admit(ctx, "reap", cause="foreign_poller", source=source) is not None:
        return f"foreign poller {pid} left alone: a hold is in force"
    _fired(ctx, "watchdog", source)
    name = proctree.of(ctx).name(pid)
    left = kill.of(ctx).end([pid], grace)
    ledger.append(ctx.store, "foreign_poller_reaped", source=source, detail={"pid": pid, "name": name, "ok": not left})
    return f"reaped foreign poller {pid}"


def repair_socket(ctx: Context, *, source: str) -> str:
    """Ask our tmux server, if it is still the one recorded at launch, to recreate its deleted socket."""
    _fired(ctx, "watchdog", source)
    recorded = launches.recorded_processes(ctx) or {}
    pid = recorded.get("server_pid")
    if not isinstance(pid, int) or not proctree.of(ctx).alive_as(pid, recorded.get("server_started")):
        return "repair_socket: the tmux server is no longer running"
    try:
        kill.of(ctx).recreate_socket(pid)
    except OSError as exc:
        return f"repair_socket: {exc.strerror or exc}"
    ledger.append(ctx.store, "tmux_socket_repair", source=source, detail={"server_pid": pid})
    return f"asked tmux server {pid} to recreate its socket"


def alert(ctx: Context, note: str, *, source: str) -> str:
    """Tell the operator: an `operator_alert` event and its message, committed together, once per event."""
    with ctx.store.write() as db:
        event = ledger.append_in(db, "operator_alert", source=source, detail={"note": note})
        # With several agents the human is told whose it is (as the sentinel's escalations are).
        whose = "" if len(ctx.config.agent_names) == 1 else f"[{ctx.agent}] "
        # The alert is the newest event: its id and hash, the ledger's head, go with it.
        outbox.enqueue(db, f"{whose}Loom: {note} ledger {ledger.format_head(event.id, event.hash)}",
                       dedupe_key=f"alert-{event.id}")
    return f"operator alerted: {note}"


def told_set_aside_in(db: sqlite3.Connection, ctx: Context, detail: dict[str, Any], *, source: str) -> None:
    """The pump set a kept message aside (pump.rules.MAX_UNREAD launches exited before reading it):
    a `pump_set_aside` event and a word to the operator, in the caller's transaction (the pump has
    no store; the watchdog reads its transcript, and the read's offset commits with these)."""
    ledger.append_in(db, "pump_set_aside", source=source, detail=detail)
    whose = "" if len(ctx.config.agent_names) == 1 else f"[{ctx.agent}] "
    whence = f" (from {detail['origin']})" if detail.get("origin") else ""
    outbox.enqueue(db, f"{whose}Loom: message #{detail.get('seq')}{whence} to the agent was set aside, not delivered: "
                       f"{detail.get('unread')} launches of its CLI exited before reading it (kept in the pump's "
                       "queue). Send it again once the agent is well.", now=clock.wall())


def canary_now(ctx: Context, *, source: str, stop: threading.Event | None = None):
    """Probe now, or join the probe in flight."""
    _fired(ctx, "canary", source)
    from loomtui.canary import probe  # watchfiles, imported for a probe only: `loom resolve` never needs it

    return probe.probe(ctx, inject, source=source, stop=stop)


def resolve(ctx: Context, item_id: int, note: str, *, source: str, session_id: str | None = None):
    """Claim a queue item as handled; only the job's next clean run witnesses it."""
    _fired(ctx, "sentinel", source)
    return claims.resolve(ctx, item_id, note, source=source, session_id=session_id)
