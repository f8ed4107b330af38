"""The canary's records: probe runs, their results, and the ack files they leave.

The canary is the only thing allowed to declare the agent deaf. A probe (probe.py, reached
through actions.canary_now) types a self-contained instruction through the one injection path, "liveness check
— run this one command and do not reply: touch <state>/acks/<nonce>", and watches the acks
DIRECTORY (a watched file is lost to an atomic rename) for that nonce. One probe is in flight
at a time; asking for another while one is out joins it. Whoever sees the result first
records it; a probe whose prober died is settled by the next look from the ack file itself.

A relaunch is a claim until a probe of its own launch acks: the first `ok` of a launch is
recorded in the ledger with `witnessed` = the relaunch event's id (every canary event also names
its `launch`), so the ledger alone says which relaunches were heard from again, and when.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from loomtui import clock
from loomtui.agent import launches
from loomtui.timing import Instant, clock_jump, stepped
from loomtui.canary.rules import (
    ERROR,
    INJECT_FAILED,
    MISS,
    OK,
    PENDING,
    SKIPPED,
    ProbeRun,
    past_deadline,
)  # noqa: F401  (re-exported: callers say canary.OK)
from loomtui.context import Context
from loomtui.store import canary_runs, ledger, session

CANARY_LOCK = "canary.lock"
SETTLE_SLACK = 5.0
NEVER_TYPED = "never typed: its prober went away before typing it"
ACK_FILE_MAX_AGE = 86400.0


def instruction(ack_path: Path) -> str:
    return f"liveness check — run this one command and do not reply: touch {shlex.quote(str(ack_path))}"


@dataclass(frozen=True)
class Probe:
    id: int
    nonce: str
    result: str
    sent_at: float
    deadline: float
    ack_at: float | None = None
    latency: float | None = None
    why: str = ""
    joined: bool = False
    source: str = ""

    def describe(self) -> str:
        joined = " (joined a probe already in flight)" if self.joined else ""
        if self.result == OK:
            took = f" in {self.latency:.2f}s" if self.latency is not None else f" ({self.why})" if self.why else ""
            return f"ok: acked{took}{joined}"
        if self.result == MISS:
            return f"miss: no ack within {self.deadline - self.sent_at:.0f}s{joined}"
        return f"{self.result}: {self.why}{joined}"


def probe_from(row: sqlite3.Row, joined: bool = False) -> Probe:
    return Probe(row["id"], row["nonce"], row["result"], row["sent_at"], row["deadline"], row["ack_at"],
                 row["latency"], row["why"], joined, row["source"])


def launch_seq(ctx: Context) -> int:
    """The id of the last relaunch event: misses are counted per launch."""
    return ledger.last_relaunch_id(ctx.store, ctx.agent)


def recent_runs(ctx: Context, limit: int = 50) -> list[ProbeRun]:
    rows = canary_runs.recent_sends(ctx.store, ctx.agent, limit)
    # Unpacked in recent_sends' column order: a Row's lookup by name compares the column names
    # one by one, 350 lookups a tick.
    return [_probe_run(sent_at, result, seq, in_grace, sent_mono, boot, ack_at is not None, deadline)
            for _id, _nonce, sent_at, result, seq, in_grace, sent_mono, boot, ack_at, deadline in reversed(rows)]


@functools.lru_cache(maxsize=1024, typed=True)
def _probe_run(sent_at: float, result: str, seq: int, in_grace: int, sent_mono: float | None, boot: str | None,
               acked: bool, deadline: float) -> ProbeRun:
    """A run as the rules read it: a function of these columns alone (a ProbeRun is frozen), so
    built once per run and state, not 50 times a tick (the canary reads its last 50 runs at
    every tick, and a frozen dataclass is slow to build)."""
    return ProbeRun(sent_at, result, seq, bool(in_grace), sent_mono, boot, late=result == MISS and acked,
                    deadline=deadline)


def last_probe(ctx: Context) -> Probe | None:
    row = canary_runs.last(ctx.store, ctx.agent)
    return probe_from(row) if row else None


def history(ctx: Context, limit: int = 100) -> list[Probe]:
    return [probe_from(r) for r in canary_runs.newest(ctx.store, ctx.agent, limit)]


# -- recording ---------------------------------------------------------------------------------


def insert_run(ctx: Context, nonce: str, source: str, result: str, sent_at: float, deadline: float,
            why: str = "", *, sent: Instant | None = None) -> int:
    """One probe run; `sent` is its send on both clocks (by default `sent_at`, just read, on this
    boot's clocks): the next probe is measured from there, whatever the wall clock does."""
    sent = sent or clock.at_wall(sent_at)
    with ctx.store.write() as db:
        run_id = canary_runs.insert_in(
            db, nonce=nonce, source=source, session_id=session.pinned(ctx.store), launch_seq=launch_seq(ctx),
            in_grace=launches.in_boot_grace(ctx), sent_at=sent_at, deadline=deadline, result=result, why=why,
            agent=ctx.agent, sent_mono=sent.mono, boot=sent.boot)
        if result != PENDING:
            seq = canary_runs.launch_seq_in(db, run_id)
            ledger.append_in(db, "canary", source=source, cause=None if result == OK else result,
                             detail={"run": run_id, "result": result, "why": why, "launch": seq}, ts=sent_at)
    return run_id


def note_late_acks(ctx: Context, back: int = 10) -> int:
    """Record the acks that came after their probe was settled as a miss (the agent ran the
    probe's `touch`, late: it hears): each of the last `back` runs still a miss without one, whose
    ack file is there now. A late ack ends a run of misses (canary.rules.consecutive_misses)."""
    noted = 0
    for row in canary_runs.recent_sends(ctx.store, ctx.agent, back):
        if row["result"] != MISS or row["ack_at"] is not None:
            continue
        path = ctx.acks_dir / row["nonce"]
        acked = ack_time(path)
        if acked is None:
            continue
        with ctx.store.write() as db:
            run = canary_runs.late_ack_in(db, row["id"], MISS, acked)
            if run is not None:
                ledger.append_in(db, "canary_late_ack", source=run["source"], agent=run["agent"], detail={
                    "run": row["id"], "launch": int(run["launch_seq"]),
                    "latency": round(max(0.0, acked - run["sent_at"]), 3)})
                noted += 1
        forget_ack(path)
    return noted


def settle_run(ctx: Context, run_id: int, result: str, *, ack_at: float | None = None, why: str = "") -> bool:
    """Record a pending run's result; False if someone else already did (first writer wins)."""
    with ctx.store.write() as db:
        row = canary_runs.unsettled_in(db, run_id, PENDING)
        if row is None:
            return False
        latency = None if ack_at is None else max(0.0, ack_at - row["sent_at"])
        seq = int(row["launch_seq"])
        first_ok = result == OK and seq > 0 and not canary_runs.launch_has_in(db, row["agent"], seq, OK)
        canary_runs.settle_in(db, run_id, result, ack_at, latency, why)
        detail: dict[str, object] = {"run": run_id, "result": result, "launch": seq}
        if latency is not None:
            detail["latency"] = round(latency, 3)
        if why:
            detail["why"] = why
        if first_ok:
            detail["witnessed"] = seq  # the relaunch event this ack proves heard
        ledger.append_in(db, "canary", source=row["source"], cause=None if result == OK else result, detail=detail,
                         agent=row["agent"])
    return True


def witness_of(ctx: Context, relaunch_id: int) -> dict | None:
    """The ledger's canary event that witnessed relaunch `relaunch_id` (id, ts, run), or None.
    An ack recorded before acks named their launch witnesses the relaunch before it, as it did."""
    row = ledger.canary_witness(ctx.store, ctx.agent, relaunch_id)
    if row is None:
        return None
    return {"event": row["id"], "ts": row["ts"], "run": json.loads(row["detail"]).get("run")}


def ack_time(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return None


def forget_ack(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def settle_stale(ctx: Context, now: Instant | float | None = None) -> int:
    """Settle pending probes past their deadline whose prober is gone: the ack file decides.

    Past the deadline on the monotonic clock from the send (within one boot): a wall clock stepped
    back must not leave a dead prober's probe pending, and the canary waiting on it, for a day."""
    now = clock.now() if now is None else now
    now_at = now if isinstance(now, Instant) else None
    settled = 0
    for row in canary_runs.with_result(ctx.store, ctx.agent, PENDING):
        sent = Instant(row["sent_at"], row["sent_mono"], row["boot"])
        if not past_deadline(sent, row["deadline"], now, SETTLE_SLACK):
            continue
        path = ctx.acks_dir / row["nonce"]
        acked = ack_time(path)
        before = settled
        if acked is not None and now_at is not None and stepped(sent, now_at):
            # The ack's mtime is wall time, and the wall clock was stepped since the send: on the
            # send's wall clock the ack came at its mtime (stepped after it) or its mtime less the
            # step (stepped before it), whichever lies between the send and now.
            jump = clock_jump(sent, now_at)
            readings = {a for a in (acked, acked - jump) if row["sent_at"] - 1.0 <= a <= now_at.wall - jump + 1.0}
            if readings and max(readings) <= row["deadline"]:
                at = min(readings) if len(readings) == 1 else None  # two readings: how long, unknown
                settled += settle_run(ctx, row["id"], OK, ack_at=at, why="settled after the prober went away"
                                      + ("" if at is not None else " (the wall clock was stepped: latency unknown)"))
            elif readings and min(readings) > row["deadline"]:
                settled += settle_run(ctx, row["id"], MISS, ack_at=min(readings),
                                      why="acked after the deadline (prober went away)")
            else:  # in time on one reading, late on the other: it came; never a miss on a guess
                settled += settle_run(ctx, row["id"], OK, ack_at=None,
                                      why="acked; in time or late cannot be told (the wall clock was stepped; "
                                          "the prober went away)")
        elif acked is not None and acked <= row["deadline"]:
            settled += settle_run(ctx, row["id"], OK, ack_at=acked, why="settled after the prober went away")
        elif acked is not None:
            settled += settle_run(ctx, row["id"], MISS, ack_at=acked,
                                  why=f"acked {acked - row['deadline']:.1f}s after the deadline (prober went away)")
        elif typed(ctx, row["id"]):
            settled += settle_run(ctx, row["id"], MISS, why="no ack before the deadline (prober went away)")
        else:
            settled += settle_run(ctx, row["id"], ERROR, why=NEVER_TYPED)
        if acked is not None and settled > before:
            forget_ack(path)  # only an ack read and recorded here: any other is a late ack (note_late_acks)
    return settled


def typed(ctx: Context, run_id: int) -> bool:
    """Whether run `run_id`'s probe was typed: its canary_sent event says so. A prober that died
    after recording its run and before typing it (killed while it waited for inject.lock or a slow
    paste) left a run that no agent was ever asked to ack: no miss, or two such deaths would
    recycle a healthy agent."""
    row = ledger.canary_sent(ctx.store, ctx.agent, run_id)
    try:
        detail = json.loads(row[0]) if row is not None else None
    except (TypeError, ValueError):
        return False
    return isinstance(detail, dict) and detail.get("ok") is True


def sweep_acks(ctx: Context, now: float | None = None) -> None:
    now = clock.wall() if now is None else now
    try:
        entries = list(os.scandir(ctx.acks_dir))
    except OSError:
        return
    for entry in entries:
        try:
            if now - entry.stat().st_mtime > ACK_FILE_MAX_AGE:
                os.unlink(entry.path)
        except OSError:
            continue
