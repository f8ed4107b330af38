"""The people and programs around Loom: the operator, the agent working its queue, the jobs."""

from __future__ import annotations

import datetime as dt
import sqlite3
from typing import TYPE_CHECKING

from loomtui import actions
from loomtui.agent import recovery
from loomtui.errors import LoomError
from loomtui.sentinel import logscan, queue_rules
from loomtui.sim import faults
from loomtui.sim.sample import matching
from loomtui.sim.world import BOOT
from loomtui.store import job_runs

if TYPE_CHECKING:
    from loomtui.sim.engine import Sim

JOB_RUN_TIME = 30.0
RUN_SPANS_KEPT = 20  # each job's last runs the checker knows the spans of (a claim's witness is among them)
JOB_PIDS = 900_000         # the run-jobs' pids: one per run (never an agent's, tmux's or a foreign poller's)
FAILURE_LINES = 3          # what a broken run writes that the sentinel's patterns match


class Operator:
    """Reads Loom's messages after a while and acts: a relaunch after a hold (having fixed what
    kept crashing), tmux restarted after an alert, a failing job fixed and claimed."""

    def __init__(self, sim: Sim, delay: tuple[float, float]) -> None:
        self.sim = sim
        self.delay = delay

    def told(self, kind: str, detail: dict) -> None:
        self.sim.after(self.sim.rng.uniform(*self.delay), self.act, kind, detail)

    def act(self, kind: str, detail: dict) -> None:
        sim, w = self.sim, self.sim.world
        if kind == "hold":
            w.crash_loop_until = min(w.crash_loop_until, w.t)
            w.sticky_wedges.discard(sim.pinned() or "")
            self.recycle("operator_fresh", only_if_held=True)
        elif kind == "alert":
            w.tmux_hang_until = min(w.tmux_hang_until, w.t)
            if w.agent is not None:
                w.agent.modal = False
            sim.event("operator_looked", what="alert")
        elif kind == "queue":
            item = sim.item(detail["item"])
            if item is None or item.state == queue_rules.WITNESSED:
                return
            job = w.job(item.job)
            if job is not None:
                job.broken_since, job.hangs = None, False
            claim(sim, item.id, "fixed the job by hand", None)

    def recycle(self, cause: str, only_if_held: bool = False) -> None:
        """`loom recycle --resume|--fresh`, a process of its own: the real actions.recycle."""
        sim = self.sim
        mode = cause.removeprefix("operator_")

        def run(ctx) -> None:
            if only_if_held and recovery.held(ctx) is None:
                return  # someone already acted
            result = actions.recycle(ctx, mode, source="cli")
            if result.status == "busy":  # it waited OPERATOR_LOCK_WAIT for the relaunch under way
                sim.after(1.0, self.recycle, cause, only_if_held)
                return
            sim.event("operator_recycle", cause=cause, status=result.status)

        sim.run_action("operator", run)


class QueueWorker:
    """The agent's side of a nudge: it reads the log, fixes the job (or believes it did), and
    runs `loom resolve`. A deaf agent, one behind a dialog, or one that ignores its queue does not."""

    def __init__(self, sim: Sim, fix_probability: float) -> None:
        self.sim = sim
        self.fix_probability = fix_probability
        self.working: set[int] = set()

    def nudged(self, item_id: int) -> None:
        sim, w = self.sim, self.sim.world
        a = w.agent
        if a is None or not a.hearing() or a.modal or a.ignores_queue or item_id in self.working:
            return
        self.working.add(item_id)
        sim.after(sim.rng.uniform(120.0, 900.0), self.done, a.pid, item_id)

    def done(self, pid: int, item_id: int) -> None:
        sim, w = self.sim, self.sim.world
        self.working.discard(item_id)
        a = w.agent
        if a is None or a.pid != pid or not a.hearing():
            return  # the work died with the agent
        item = sim.item(item_id)
        if item is None or item.state == queue_rules.WITNESSED:
            return
        job = w.job(item.job)
        fixed = sim.rng.random() < self.fix_probability
        if fixed and job is not None:
            job.broken_since, job.hangs = None, False
        sim.event("agent_worked", item=item_id, fixed=fixed)
        claim(sim, item_id, "read the log and fixed the script", a.session)


def claim(sim: Sim, item_id: int, note: str, session_id: str | None) -> None:
    """`loom resolve ID --note ...`, a process of its own: the real actions.resolve; the agent's
    names its session (LOOM_SESSION_ID in its shell), the operator's none."""

    def run(ctx) -> None:
        # The store locked past its busy timeout makes `loom resolve` fail; nobody tries again.
        try:
            actions.resolve(ctx, item_id, note, source="cli", session_id=session_id)
        except (LoomError, sqlite3.Error) as exc:
            sim.event("resolve_failed", item=item_id, why=f"{type(exc).__name__}: {exc}"[:200])

    sim.run_action("resolve", run)


class Jobs:
    """Each job runs on its `every` schedule under `loom run-job`: a row in job_runs at its start
    (with a pid that lives while it runs), its log appended to, its end recorded. A broken one
    exits 1 and writes failure lines the sentinel's patterns match."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.running: dict[int, float] = {}   # run-job pid -> its start time (as the process table says)
        self.pids = JOB_PIDS

    def start(self) -> None:
        for job in self.sim.world.jobs:
            self.sim.at(job.phase, self.run, job.name)

    def failure_text(self) -> str:
        """One line the configured sentinel.patterns find (none, when no pattern can be sampled)."""
        for pattern in self.sim.config.sentinel.patterns:
            hit = matching(pattern)
            if hit:
                return hit
        return ""

    def log(self, name: str, lines: list[str]) -> None:
        """Appended as run-job appends: each line after its timestamp (the wall clock's)."""
        job = self.sim.config.job(name)
        assert job is not None
        stamp = dt.datetime.fromtimestamp(self.sim.world.wall, dt.timezone.utc).isoformat(timespec="milliseconds")
        job.log.parent.mkdir(parents=True, exist_ok=True)
        with open(job.log, "a", encoding="utf-8") as f:
            f.writelines(f"{stamp} {line}\n" for line in lines)

    def run(self, name: str) -> None:
        sim, w = self.sim, self.sim.world
        job = w.job(name)
        assert job is not None
        obs = sim.observer
        assert obs is not None
        if w.store_locked():
            # `loom run-job` cannot record its start while another process holds the store: it runs
            # once the store is free (its next schedule still counts from now).
            sim.at(w.store_locked_until + 0.001, self.run, name)
            return
        self.pids += 1
        pid, pid_started = self.pids, w.wall
        with obs.write() as db:
            run_id = job_runs.start_in(db, job=name, started=w.wall, pid=pid, pid_started=pid_started,
                                       started_mono=w.mono, boot=BOOT)
        self.running[pid] = pid_started
        mark = logscan.RUN_MARK.decode()
        self.log(name, [f"{mark}start run {run_id} of job {name!r}: ./{name}.sh"])
        bad = job.broken_since is not None
        sim.run_truth[run_id] = (w.mono, not bad)
        spans = sim.run_spans.setdefault(name, {})
        spans[run_id] = (w.mono, None)
        if len(spans) > RUN_SPANS_KEPT:
            del spans[min(spans)]
        took = JOB_RUN_TIME
        if bad and job.hangs:
            took = sim.rng.uniform(*faults.HANG_TIME)
            sim.checker.on_run_hung(run_id, name, w.mono, job.period + sim.config.sentinel.missed_grace)
        sim.after(took, self.finish, name, run_id, pid, bad)
        sim.after(job.period, self.run, name)

    def finish(self, name: str, run_id: int, pid: int, bad: bool) -> None:
        sim, w = self.sim, self.sim.world
        obs = sim.observer
        assert obs is not None
        if w.store_locked():  # run-job retries its end record until the store takes it (jobrun._finish)
            sim.at(w.store_locked_until + 0.001, self.finish, name, run_id, pid, bad)
            return
        hit = self.failure_text() if bad else ""
        lines = [f"{hit}: {name} could not finish"] * FAILURE_LINES if hit else []
        code = 1 if bad else 0
        mark = logscan.RUN_MARK.decode()
        took = w.mono - sim.run_truth[run_id][0]  # a hung run's hours, an ordinary one's JOB_RUN_TIME
        self.log(name, [*lines, f"{mark}run {run_id} exit {code} after {took:.1f}s"])
        with obs.write() as db:
            job_runs.finish_in(db, run_id, ended=w.wall, exit_code=code, duration=took, failure_lines=len(lines))
        del self.running[pid]
        sim.checker.on_run_ended(run_id)
        spans = sim.run_spans[name]
        if run_id in spans:
            spans[run_id] = (spans[run_id][0], w.mono)
        if bad:
            sim.checker.on_job_failed(name)
