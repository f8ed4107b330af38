"""A canary probe: record it, type its instruction, watch the acks directory for its nonce.

Only the actions module calls `probe` (actions.canary_now), for every trigger, and hands it
the one injection path to type the instruction with. With the stream-json driver a miss also
says what the pump knows of it (queued behind a turn, and whether it ever reached the CLI): a
fact for the operator, never a verdict; only the missing ack counts.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from loomtui import clock
from loomtui.agent import launches
from loomtui.agent.drivers import capabilities
from loomtui.canary.acks_watch import watch_of
from loomtui.canary.rules import ack_deadline
from loomtui.canary.runs import (
    CANARY_LOCK,
    ERROR,
    INJECT_FAILED,
    MISS,
    NEVER_TYPED,
    OK,
    PENDING,
    SKIPPED,
    Probe,
    ack_time,
    forget_ack,
    insert_run,
    instruction,
    launch_seq,
    probe_from,
    settle_run,
    settle_stale,
    typed,
)
from loomtui.context import Context
from loomtui.errors import LoomError
from loomtui.pump import transcript
from loomtui.store import canary_runs, ledger, locks

if TYPE_CHECKING:
    from loomtui.agent.inject import InjectResult


RELAUNCH_UNDER_WAY = "a relaunch is under way"  # why a probe is skipped: recycle.lock is held

# Types one line into the agent's pane and records it: actions.inject, the one injection path.
Send = Callable[..., "InjectResult"]


def probe(ctx: Context, send: Send, *, source: str, join: bool = True,
          stop: threading.Event | None = None) -> Probe:
    """Send a probe through `send` (or join the one in flight) and wait for its result."""
    ack_timeout = ctx.config.canary.ack_timeout
    with locks.hold(ctx.agent_dir, CANARY_LOCK, timeout=30):
        settle_stale(ctx)
        # Only a probe typed into this launch's agent is worth joining: one typed before the
        # last relaunch went to an agent that is gone, and its miss says nothing about this one.
        pending = canary_runs.last_of_launch(ctx.store, ctx.agent, PENDING, launch_seq(ctx))
        if pending is not None and not typed(ctx, pending["id"]):
            # Its prober held this lock from the run's record to its typing, and let go: it went
            # away before typing it. Waiting on it would wait for an ack no agent was asked for.
            settle_run(ctx, pending["id"], ERROR, why=NEVER_TYPED)
            pending = None
        if pending is None or not join:
            run = _send(ctx, send, source, ack_timeout)
        else:
            run = probe_from(pending, joined=True)
    # Wait outside the lock, so that anyone else asking meanwhile can join too.
    return run if run.result != PENDING else wait(ctx, run, stop)


def _send(ctx: Context, send: Send, source: str, ack_timeout: float) -> Probe:
    """Record a pending probe and type it; the caller holds canary.lock."""
    nonce = secrets.token_hex(12)
    sent_at = clock.wall()
    deadline = ack_deadline(sent_at, ack_timeout, _booting_pump(ctx), ctx.config.agent.boot_grace)
    if locks.is_held(ctx.agent_dir, locks.RECYCLE):
        why = RELAUNCH_UNDER_WAY
        run_id = insert_run(ctx, nonce, source, SKIPPED, sent_at, deadline, why)
        return Probe(run_id, nonce, SKIPPED, sent_at, deadline, why=why, source=source)
    try:
        ctx.acks_dir.mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        why = f"acks dir {ctx.acks_dir} unusable: {exc.strerror or exc}"
        run_id = insert_run(ctx, nonce, source, ERROR, sent_at, deadline, why)
        return Probe(run_id, nonce, ERROR, sent_at, deadline, why=why, source=source)
    run_id = insert_run(ctx, nonce, source, PENDING, sent_at, deadline)
    if locks.is_held(ctx.agent_dir, locks.RECYCLE):
        # The run's record can wait out a locked store (its busy timeout, 10 s): a relaunch that began
        # meanwhile has its new agent booting, and the probe would be typed into it (storm seed 8,
        # day 23.7, README's hooked config). Looked at again, after the write, before the typing.
        why = RELAUNCH_UNDER_WAY
        settle_run(ctx, run_id, SKIPPED, why=why)
        return Probe(run_id, nonce, SKIPPED, sent_at, deadline, why=why, source=source)
    result = send(ctx, instruction(ctx.acks_dir / nonce), source=source, kind="canary_sent", detail={"run": run_id})
    if not result.ok:
        # A probe the agent's CLI can no longer read (the pump's write to its stdin failed) is missed
        # by the agent, not by Loom: a miss, at once, where a pane Loom could not type into is ours.
        outcome = MISS if result.not_reading else INJECT_FAILED
        settle_run(ctx, run_id, outcome, why=result.error)
        return Probe(run_id, nonce, outcome, sent_at, deadline, why=result.error, source=source)
    return Probe(run_id, nonce, PENDING, sent_at, deadline, source=source)


def _booting_pump(ctx: Context) -> float | None:
    """How long ago (monotonic) the agent was launched, for a stream-json agent whose CLI has said
    nothing since (its pump's status has no session yet: Claude Code prints its init once it reads
    its first line); None for any other. A status the pump has not written, or one of another pump,
    says nothing yet either: the longer wait is the safe side."""
    if not capabilities(ctx).owns_turns:
        return None
    launched = launches.last_launch(ctx)
    if launched is None:
        return None
    from loomtui.pump.facts import read_facts  # stream-json only

    recorded = launches.recorded_processes(ctx) or {}
    pane_pid = recorded.get("pane_pid")
    facts = read_facts(ctx.agent_dir, pane_pid if isinstance(pane_pid, int) else None)
    spoken = facts is not None and facts.current and facts.session_id is not None
    return None if spoken else launches.launch_age(launched)


def wait(ctx: Context, run: Probe, stop: threading.Event | None = None) -> Probe:
    """Watch the acks directory until the nonce appears, the deadline passes, or another
    process records the result."""
    path = ctx.acks_dir / run.nonce
    end = _end(ctx, run)
    outcome: tuple[str, float | None, str] | None = None

    def look() -> tuple[str, float | None, str] | None:
        acked = ack_time(path)
        if acked is not None:
            return OK, acked, ""
        if not ctx.acks_dir.is_dir():
            return ERROR, None, f"acks dir {ctx.acks_dir} disappeared during the probe"
        return None

    outcome = look()
    if outcome is None and clock.monotonic() < end:
        watch_stop = threading.Event()
        try:
            for _ in watch_of(ctx).changes(ctx.acks_dir, watch_stop, end):
                outcome = look()
                if outcome is not None or clock.monotonic() >= end or (stop is not None and stop.is_set()):
                    break
                if _settled_elsewhere(ctx, run.id):
                    break
        except (OSError, RuntimeError) as exc:
            outcome = ERROR, None, f"acks dir {ctx.acks_dir} could not be watched: {exc}"
        finally:
            watch_stop.set()
    if outcome is None:
        outcome = look()
    if outcome is None and clock.monotonic() >= end:
        outcome = MISS, None, _queued_note(ctx, run.id)
    if outcome is not None:
        result, ack_at, why = outcome
        # Late or not is measured on the monotonic clock: the deadline as the wall clock reads it
        # now (the ack's mtime was written moments ago by the same wall clock), so a step of the
        # wall clock since the send turns no timely ack into a miss, nor a late one into an ack.
        deadline = clock.wall() + (end - clock.monotonic())
        if result == OK and ack_at is not None and ack_at > deadline:
            result, why = MISS, f"acked {ack_at - deadline:.1f}s after the deadline"
        recorded = settle_run(ctx, run.id, result, ack_at=ack_at, why=why)  # a miss acked late keeps its ack
        if ack_at is not None and recorded:
            # Only an ack read and recorded here is forgotten: one that came while the miss was
            # recorded (its write can wait out a busy store, right at the deadline a slow agent acks
            # by), or one read after another settler recorded a miss, is the late ack note_late_acks
            # records; deleted unread, the miss counted for an agent that heard.
            forget_ack(path)
    row = canary_runs.get(ctx.store, run.id)
    if row is None:  # inserted above, and runs are never deleted while a probe waits
        raise LoomError(f"canary run {run.id} is gone from the store")
    return probe_from(row, joined=run.joined)


def _end(ctx: Context, run: Probe) -> float:
    """When the probe's wait ends, on clock.monotonic: its ack timeout from the send on the
    monotonic clock (within one boot), so a probe joined after a step of the wall clock waits
    neither a day (stepped back) nor not at all (stepped forward)."""
    now = clock.now()
    row = canary_runs.sent_of(ctx.store, run.id)
    if row is not None and row["sent_mono"] is not None and now.mono is not None and row["boot"] == now.boot:
        return float(row["sent_mono"]) + (run.deadline - run.sent_at)
    return (now.mono if now.mono is not None else clock.monotonic()) + max(0.0, run.deadline - now.wall)


def _queued_note(ctx: Context, run_id: int) -> str:
    """For a missed probe the pump queued: whether it ever reached the CLI ("" when not queued)."""
    if not capabilities(ctx).owns_turns:
        return ""  # only a pump queues a line
    row = ledger.canary_sent(ctx.store, ctx.agent, run_id)
    try:
        sent = json.loads(row[0]) if row else {}
    except ValueError:
        return ""
    if sent.get("delivery") != "queued" or not isinstance(sent.get("seq"), int):
        return ""
    path = transcript.path_in(ctx.agent_dir)
    written = any(r.dir == transcript.IN and r.data.get("seq") == sent["seq"]
                  for r in transcript.read(path, transcript.tail_offset(path, 1 << 20)))
    if written:
        return "queued behind a running turn; it reached the agent when that turn ended"
    return "queued behind a running turn that has not ended: it never reached the agent"


def _settled_elsewhere(ctx: Context, run_id: int) -> bool:
    row = canary_runs.result_of(ctx.store, run_id)
    return row is not None and row[0] != PENDING
