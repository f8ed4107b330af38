"""The canary: the only thing allowed to declare the agent deaf.

A probe types a self-contained instruction through the one injection path, "liveness check
— run this one command and do not reply: touch <state>/acks/<nonce>", and watches the acks
DIRECTORY (a watched file is lost to an atomic rename) for that nonce. One probe is in flight
at a time; asking for another while one is out joins it. Whoever sees the result first
records it; a probe whose prober died is settled by the next look from the ack file itself.
"""

from __future__ import annotations

import os
import secrets
import shlex
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import watchfiles

from . import launch, ledger, locks, recovery, session
from .canary_core import (
    ERROR,
    INJECT_FAILED,
    MISS,
    OK,
    PENDING,
    SKIPPED,
    Run,
    due_in,
    should_recycle,
)
from .context import Context
from .inject import inject

CANARY_LOCK = "canary.lock"
SETTLE_SLACK = 5.0
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
            return f"ok: acked in {self.latency:.2f}s{joined}"
        if self.result == MISS:
            return f"miss: no ack within {self.deadline - self.sent_at:.0f}s{joined}"
        return f"{self.result}: {self.why}{joined}"


def _probe_from(row: sqlite3.Row, joined: bool = False) -> Probe:
    return Probe(row["id"], row["nonce"], row["result"], row["sent_at"], row["deadline"], row["ack_at"],
                 row["latency"], row["why"], joined, row["source"])


def launch_seq(ctx: Context) -> int:
    """The id of the last relaunch event: misses are counted per launch."""
    row = ctx.store.query_one("SELECT MAX(id) FROM ledger WHERE kind = 'relaunch'")
    return int(row[0] or 0)


def recent_runs(ctx: Context, limit: int = 50) -> list[Run]:
    rows = ctx.store.query(
        "SELECT sent_at, result, launch_seq, in_grace FROM canary_runs ORDER BY id DESC LIMIT ?", (limit,)
    )
    return [Run(r["sent_at"], r["result"], r["launch_seq"], bool(r["in_grace"])) for r in reversed(rows)]


def last_probe(ctx: Context) -> Probe | None:
    row = ctx.store.query_one("SELECT * FROM canary_runs ORDER BY id DESC LIMIT 1")
    return _probe_from(row) if row else None


def history(ctx: Context, limit: int = 100) -> list[Probe]:
    return [_probe_from(r) for r in ctx.store.query("SELECT * FROM canary_runs ORDER BY id DESC LIMIT ?", (limit,))]


# -- recording ---------------------------------------------------------------------------------


def _insert(ctx: Context, nonce: str, source: str, result: str, sent_at: float, deadline: float,
            why: str = "") -> int:
    with ctx.store.write() as db:
        cur = db.execute(
            "INSERT INTO canary_runs(nonce, source, session_id, launch_seq, in_grace, sent_at, deadline, result, why) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (nonce, source, session.pinned(ctx.store), launch_seq(ctx), int(launch.in_boot_grace(ctx)),
             sent_at, deadline, result, why),
        )
        run_id = int(cur.lastrowid)
        if result != PENDING:
            ledger.append_in(db, "canary", source=source, cause=None if result == OK else result,
                             detail={"run": run_id, "result": result, "why": why}, ts=sent_at)
    return run_id


def _settle(ctx: Context, run_id: int, result: str, *, ack_at: float | None = None, why: str = "") -> bool:
    """Record a pending run's result; False if someone else already did (first writer wins)."""
    with ctx.store.write() as db:
        row = db.execute("SELECT sent_at, source FROM canary_runs WHERE id = ? AND result = ?",
                         (run_id, PENDING)).fetchone()
        if row is None:
            return False
        latency = None if ack_at is None else max(0.0, ack_at - row["sent_at"])
        db.execute("UPDATE canary_runs SET result = ?, ack_at = ?, latency = ?, why = ? WHERE id = ?",
                   (result, ack_at, latency, why, run_id))
        detail = {"run": run_id, "result": result}
        if latency is not None:
            detail["latency"] = round(latency, 3)
        if why:
            detail["why"] = why
        ledger.append_in(db, "canary", source=row["source"], cause=None if result == OK else result, detail=detail)
    return True


def _ack_time(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return None


def _forget(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def settle_stale(ctx: Context, now: float | None = None) -> int:
    """Settle pending probes past their deadline whose prober is gone: the ack file decides."""
    now = time.time() if now is None else now
    settled = 0
    for row in ctx.store.query("SELECT id, nonce, deadline FROM canary_runs WHERE result = ?", (PENDING,)):
        if now < row["deadline"] + SETTLE_SLACK:
            continue
        path = ctx.acks_dir / row["nonce"]
        acked = _ack_time(path)
        if acked is not None and acked <= row["deadline"]:
            settled += _settle(ctx, row["id"], OK, ack_at=acked, why="settled after the prober went away")
        else:
            settled += _settle(ctx, row["id"], MISS, why="no ack before the deadline (prober went away)")
        _forget(path)
    return settled


def sweep_acks(ctx: Context, now: float | None = None) -> None:
    now = time.time() if now is None else now
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


# -- probing -----------------------------------------------------------------------------------


def probe(ctx: Context, *, source: str, join: bool = True, stop: threading.Event | None = None) -> Probe:
    """Send a probe (or join the one in flight) and wait for its result."""
    ack_timeout = ctx.config.canary.ack_timeout
    with locks.hold(ctx.state_dir, CANARY_LOCK, timeout=30):
        settle_stale(ctx)
        pending = ctx.store.query_one("SELECT * FROM canary_runs WHERE result = ? ORDER BY id DESC LIMIT 1",
                                      (PENDING,))
        if pending is None or not join:
            run = _send(ctx, source, ack_timeout)
        else:
            run = _probe_from(pending, joined=True)
    # Wait outside the lock, so that anyone else asking meanwhile can join too.
    return run if run.result != PENDING else wait(ctx, run, stop)


def _send(ctx: Context, source: str, ack_timeout: float) -> Probe:
    """Record a pending probe and type it; the caller holds canary.lock."""
    nonce = secrets.token_hex(12)
    sent_at = time.time()
    deadline = sent_at + ack_timeout
    if locks.is_held(ctx.state_dir, locks.RECYCLE):
        why = "a relaunch is under way"
        run_id = _insert(ctx, nonce, source, SKIPPED, sent_at, deadline, why)
        return Probe(run_id, nonce, SKIPPED, sent_at, deadline, why=why, source=source)
    try:
        ctx.acks_dir.mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        why = f"acks dir {ctx.acks_dir} unusable: {exc.strerror or exc}"
        run_id = _insert(ctx, nonce, source, ERROR, sent_at, deadline, why)
        return Probe(run_id, nonce, ERROR, sent_at, deadline, why=why, source=source)
    run_id = _insert(ctx, nonce, source, PENDING, sent_at, deadline)
    result = inject(ctx, instruction(ctx.acks_dir / nonce), source=source, kind="canary_sent",
                    detail={"run": run_id})
    if not result.ok:
        _settle(ctx, run_id, INJECT_FAILED, why=result.error)
        return Probe(run_id, nonce, INJECT_FAILED, sent_at, deadline, why=result.error, source=source)
    return Probe(run_id, nonce, PENDING, sent_at, deadline, source=source)


def wait(ctx: Context, run: Probe, stop: threading.Event | None = None) -> Probe:
    """Watch the acks directory until the nonce appears, the deadline passes, or another
    process records the result."""
    path = ctx.acks_dir / run.nonce
    end = time.monotonic() + max(0.0, run.deadline - time.time())
    outcome: tuple[str, float | None, str] | None = None

    def look() -> tuple[str, float | None, str] | None:
        acked = _ack_time(path)
        if acked is not None:
            return OK, acked, ""
        if not ctx.acks_dir.is_dir():
            return ERROR, None, f"acks dir {ctx.acks_dir} disappeared during the probe"
        return None

    outcome = look()
    if outcome is None and time.monotonic() < end:
        watch_stop = threading.Event()
        try:
            for _ in watchfiles.watch(ctx.acks_dir, stop_event=watch_stop, rust_timeout=250,
                                      yield_on_timeout=True, debounce=20, step=10, raise_interrupt=False):
                outcome = look()
                if outcome is not None or time.monotonic() >= end or (stop is not None and stop.is_set()):
                    break
                if _settled_elsewhere(ctx, run.id):
                    break
        except (OSError, RuntimeError) as exc:
            outcome = ERROR, None, f"watching {ctx.acks_dir} failed: {exc}"
        finally:
            watch_stop.set()
    if outcome is None:
        outcome = look()
    if outcome is None and time.monotonic() >= end:
        outcome = MISS, None, ""
    if outcome is not None:
        result, ack_at, why = outcome
        if result == OK and ack_at is not None and ack_at > run.deadline:
            result, why = MISS, f"acked {ack_at - run.deadline:.1f}s after the deadline"
        _settle(ctx, run.id, result, ack_at=ack_at if result == OK else None, why=why)
        if result != ERROR:
            _forget(path)
    row = ctx.store.query_one("SELECT * FROM canary_runs WHERE id = ?", (run.id,))
    return _probe_from(row, joined=run.joined)


def _settled_elsewhere(ctx: Context, run_id: int) -> bool:
    row = ctx.store.query_one("SELECT result FROM canary_runs WHERE id = ?", (run_id,))
    return row is not None and row[0] != PENDING


# -- the loop's tick ---------------------------------------------------------------------------


class CanaryLoop:
    """Scheduled probes and the decision to recycle, one tick at a time (the daemon's thread)."""

    def __init__(self, ctx: Context, stop: threading.Event | None = None) -> None:
        self.ctx = ctx
        self.stop = stop or threading.Event()
        self.unrecorded_error = ""

    def tick(self) -> str:
        try:
            if self.unrecorded_error:
                now = time.time()
                _insert(self.ctx, secrets.token_hex(12), "canary", ERROR, now, now, self.unrecorded_error)
                self.unrecorded_error = ""
            return self._tick()
        except sqlite3.OperationalError as exc:
            # The store was locked or unwritable: our fault, never the agent's miss. It is kept
            # here (not raised, which would restart the loop and forget it) and recorded as an
            # `error` run once the store takes writes again.
            self.unrecorded_error = f"store unavailable during the probe: {exc}"
            return self.unrecorded_error

    def misses_mean_deaf(self) -> bool:
        cfg = self.ctx.config.canary
        return should_recycle(recent_runs(self.ctx), launch_seq(self.ctx), cfg.misses_to_recycle)

    def _tick(self) -> str:
        ctx, cfg = self.ctx, self.ctx.config.canary
        settle_stale(ctx)
        if self.misses_mean_deaf():
            outcome = recovery.recover(ctx, "canary_failed", source="canary",
                                       still_failing=self.misses_mean_deaf,
                                       evidence={"misses": cfg.misses_to_recycle})
            return f"canary_failed: {outcome.describe()}"
        if recovery.held(ctx) is not None:
            return ""
        runs = recent_runs(ctx, 1)
        if due_in(runs[-1] if runs else None, time.time(), cfg.interval, cfg.ack_timeout) > 0:
            return ""
        if launch.relaunch_under_way(ctx):
            return ""  # typed into a booting or replaced agent, a probe proves nothing
        if ctx.store.query_one("SELECT 1 FROM canary_runs WHERE result = ?", (PENDING,)):
            return ""
        result = probe(ctx, source="canary", stop=self.stop)
        if self.stop.is_set():
            return "stopping"  # the probe stays pending; the next daemon settles it from the ack file
        if result.result == MISS and self.misses_mean_deaf():
            outcome = recovery.recover(ctx, "canary_failed", source="canary",
                                       still_failing=self.misses_mean_deaf,
                                       evidence={"misses": cfg.misses_to_recycle})
            return f"{result.describe()}; canary_failed: {outcome.describe()}"
        sweep_acks(ctx)
        return result.describe()
