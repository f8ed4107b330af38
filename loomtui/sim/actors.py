"""The people and programs around Loom: the operator, the agent working its queue, the jobs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from loomtui import actions
from loomtui.agent import recovery
from loomtui.sentinel import queue_rules
from loomtui.sim.world import BOOT

if TYPE_CHECKING:
    from loomtui.sim.engine import Sim

JOB_RUN_TIME = 30.0


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
            item = sim.items.items.get(detail["item"])
            if item is None or item.state == queue_rules.WITNESSED:
                return
            job = next((j for j in w.jobs if j.name == item.job), None)
            if job is not None:
                job.broken_since = None
            sim.sentinel.claim(item.id, "operator")

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
        item = sim.items.items.get(item_id)
        if item is None or item.state == queue_rules.WITNESSED:
            return
        job = next((j for j in w.jobs if j.name == item.job), None)
        fixed = sim.rng.random() < self.fix_probability
        if fixed and job is not None:
            job.broken_since = None
        sim.event("agent_worked", item=item_id, fixed=fixed)
        sim.sentinel.claim(item_id, "agent")


class Jobs:
    """Each job runs on its `every` schedule; a broken one exits 1 with failure lines."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim

    def start(self) -> None:
        for job in self.sim.world.jobs:
            self.sim.at(job.phase, self.run, job.name)

    def run(self, name: str) -> None:
        sim, w = self.sim, self.sim.world
        job = next(j for j in w.jobs if j.name == name)
        started = (w.wall, w.mono)
        bad = job.broken_since is not None
        sim.after(JOB_RUN_TIME, self.finish, name, started, bad)
        sim.after(job.period, self.run, name)

    def finish(self, name: str, started: tuple[float, float], bad: bool) -> None:
        """`started`: (wall, monotonic) at the start, as `loom run-job` would record them."""
        sim, w = self.sim, self.sim.world
        w.run_ids += 1
        wall, mono = started
        run = queue_rules.JobRun(w.run_ids, name, wall, 1 if bad else 0, 3 if bad else 0,
                                 started_mono=mono, boot=BOOT)
        sim.run_truth[run.id] = (mono, not bad)
        sim.items.unreviewed.append(run)
