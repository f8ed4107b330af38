"""The run: Loom's own loops on the virtual clock, against the modelled world, invariants after every step.

What runs is Loom's code, as `loom supervise` runs it: the watchdog's tick (`loops.watchdog_tick`,
the real `Watchdog`), the canary loop (`CanaryLoop.tick`, its probes through `actions.canary_now`
and the real probe), every relaunch through `actions.recover` and `launch.relaunch_locked`, holds,
the ceiling's escalation, alerts and nudges through `actions`, the sentinel's tick
(`loops.sentinel_tick`: the jobs' logs and runs into queue items, nudges and the backstop's
message in the outbox) and claims through `actions.resolve`, against a real store (SQLite, the
real schema) and real lock files in a temporary state directory made for the seed. Each loop is a
simulated thread (scheduler.py): it runs until it waits on the virtual clock, so a relaunch holds
recycle.lock through its boot watch while the canary loop finds it held, as on a machine. The ports
a Context carries (machine.py) stand for tmux, the process table, signals and the acks watch; the
clock is loomtui.clock's, installed for the run.

The invariants read the world's truth (world.py) and what Loom wrote in its own store (ledger,
canary runs, queue items), never Loom's memory. Same seed, profile and config: the same run, to the byte.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import re
import shutil
import sqlite3
import tempfile
import threading
from collections import deque
from pathlib import Path
from typing import Any, Callable

from loomtui import clock
from loomtui.agent import commands, launches
from loomtui.agent.records import LaunchRecord
from loomtui.canary.loop import CanaryLoop
from loomtui.context import Context
from loomtui.daemon import loops
from loomtui.daemon import supervise
from loomtui.daemon.supervise import LOOP_RETRY, MAX_LOOP_BACKOFF
from loomtui.errors import LoomError
from loomtui.hooks import settings as hook_settings
from loomtui.sentinel import queue
from loomtui.pump.facts import Delivery
from loomtui.sentinel.queue_rules import Item
from loomtui.sim import faults
from loomtui.sim.actors import Jobs, Operator, QueueWorker
from loomtui.sim.hooks_model import HookModel
from loomtui.sim.invariants import Checker, Violation
from loomtui.sim.machine import SERVER_PID, SimProcesses, SimSignals, SimWatch, simulated_driver
from loomtui.sim.profiles import with_jobs
from loomtui.sim.pump_model import PumpModel
from loomtui.sim.report import Collector
from loomtui.sim.sample import matching
from loomtui.sim.scheduler import Scheduler, SimClock
from loomtui.sim.world import BOOT, MODAL_SCREEN, PROMPT_SCREEN, Agent, Job, World
from loomtui.store import canary_runs, ledger, outbox, session
from loomtui.store.db import Store
from loomtui.store.statedir import prepare_agent_dir, prepare_state_dir
from loomtui.timing import backoff

TRACE = 40
DAY = 86400.0
BOOT_SCREEN = "Starting…"
CANARY_PERIOD = loops.CANARY_PERIOD
FAILED = object()  # what guarded() returns for a tick that raised
# What the agent reads in a typed line: a nudge names its queue item, a probe the file to touch.
NUDGE = re.compile(r"\[loom sentinel\] Queue item (\d+)")
PROBE = re.compile(r"touch '?([^' ]+)'?")


def scratch_dir() -> str | None:
    """Where a run keeps its state dir: memory (/dev/shm) where the system has one, else the
    system's temporary directory. The store is the same SQLite either way; on a disk its commits
    are synced to it, which a run thrown away at its end does not need (a sixth of its time)."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


class Sim:
    def __init__(self, config: Any, profile: Any, seed: int, days: float) -> None:
        self.config = config
        self.profile = profile
        self.seed = seed
        self.days = days
        self.end = days * DAY
        self.rng = random.Random(seed)
        # The agent's hooks, modelled when its commands pass the hooks settings (hooks_model.py).
        self.hooked = hook_settings.wanted(config.agent)
        self.hooks = HookModel(self) if self.hooked else None
        # The simulated driver `agent.driver` names; the stream-json driver's pump, modelled when the
        # agent runs under it (pump_model.py), asked as Loom asks: by the driver's capability.
        self.driver = simulated_driver(self)
        self.pumped = self.driver.owns_turns
        self.pump = PumpModel(self) if self.pumped else None
        # Whether Loom is told the agent's turns (hooks/source.py: the hooks, else the pump).
        self.turns_told = self.hooked or self.pumped
        T = config.canary.ack_timeout
        agent = config.agent
        # What the simulated CLI shows and runs as: texts the operator's own patterns find.
        self.ready_line = matching(agent.ready_match) or ""
        self.poller_line = matching(agent.poller_match) or ""
        self.world = World(self.rng, poller_configured=bool(agent.poller_match and self.poller_line),
                           ack_timeout=T, on_kill=self.pump.died if self.pump is not None else None,
                           jobs=[Job(name, period, phase=self.rng.uniform(0.0, period)) for name, period in profile.jobs])
        self.scheduler = Scheduler()
        self.scheduler.on_time = self._set_time
        self.scheduler.after_slice = self._after_slice
        self.clock = SimClock(self.scheduler, self.world, BOOT)
        self.tick_errors: dict[str, BaseException] = {}  # each loop's last failed tick's error
        self.item_cache: dict[int, Item] = {}   # queue items as the store holds them, until it changes
        self.commands: dict[int, str] = {}
        self.labels: dict[str, str] = {}
        self.last_relaunch: tuple[int, int, str | None] | None = None  # on_ledger
        self.server_pid = SERVER_PID
        self.run_truth: dict[int, tuple[float, bool]] = {}   # job run id -> (started, monotonic; truly clean)
        # Each job's last runs: run id -> (started, ended or None while it runs; monotonic). A claim's
        # witness may run (a run that neither witnessed a claim nor reopened it was still running).
        self.run_spans: dict[str, dict[int, tuple[float, float | None]]] = {}
        self.step = 0
        self.trace: deque[tuple[int, float, str, dict]] = deque(maxlen=TRACE)
        self.report = Collector(self)
        self.operator = Operator(self, profile.operator_delay)
        self.worker = QueueWorker(self, profile.fix_probability)
        self.jobs = Jobs(self)
        self.checker = Checker(self)
        self.violation: Violation | None = None
        self.halt = threading.Event()
        self.threads: dict[str, Any] = {}
        self.tmp: Path | None = None
        self.ctx: Context | None = None
        self.observer: Store | None = None
        self.ledger_seen = 0
        self.last_kind = ""
        self.relaunchers: set[str] = set()   # the threads whose relaunch is under way (membership only)
        self.ended: str | None = None        # the thread whose tick or command ended in this slice
        self.canary_until: float | None = None  # when the sleeping canary looks next (None: not asleep)
        self.canary_began = 0.0  # when the canary's last look began (the phase of its period's grid)
        self.slicer: Any = None
        self.runs_from = 0            # the first canary run not yet seen settled
        self.runs_told: set[int] = set()  # settled runs from runs_from on, already told (membership only)
        self.data_version = -1
        self.store_changes = 0   # how often data_version moved (the checker's queue look rests on it)
        self.relaunched: Path | None = None   # the RELAUNCHED signal file, which rings the canary
        self.quiet_until: float | None = None  # the canary sleeps on a quiet answer until then (or a store change)

    # -- the world's clock and events ---------------------------------------------------------

    def _set_time(self, t: float) -> None:
        self.world.t = t

    def at(self, when: float, fn: Callable[..., None], *args: Any) -> None:
        self.scheduler.at(when, fn, *args)

    def after(self, delay: float, fn: Callable[..., None], *args: Any) -> None:
        self.scheduler.at(self.world.t + delay, fn, *args)

    def label(self, session_id: str | None) -> str | None:
        """A session id as the report shows it: Loom mints uuid4s (os.urandom), so a run's output
        names them by the order they appeared in, which the seed decides."""
        if not session_id:
            return session_id
        name = self.labels.get(session_id)
        if name is None:
            name = self.labels[session_id] = f"session-{len(self.labels) + 1}"
        return name

    def event(self, kind: str, /, **detail: Any) -> None:
        """Into the trace and the report; the checker hears from where each fact comes (on_ledger,
        the threads), once."""
        self.trace.append((self.step, self.world.t, kind, detail))
        self.report.on_event(kind, detail)

    def item(self, item_id: int) -> Item | None:
        """A queue item as the store holds it now (read again once another connection has written)."""
        item = self.item_cache.get(item_id)
        if item is None:
            assert self.observer is not None
            item = queue.get(self.observer, item_id)
            if item is not None:
                self.item_cache[item_id] = item
        return item

    # -- Loom's threads -----------------------------------------------------------------------

    def spawn(self, name: str, body: Callable[[Context], None], when: float | None = None) -> Any:
        """A simulated thread with a Context of its own (one store connection per thread, as in the daemon)."""
        assert self.ctx is not None
        base = self.ctx

        def run() -> None:
            ctx = base.clone()
            try:
                body(ctx)
            finally:
                ctx.close()

        th = self.scheduler.spawn(name, run, when)
        self.threads[name] = th
        return th

    def guarded(self, loop: str, tick: Callable[[], object]) -> object:
        """One tick, as the daemon's loop runs it: a store or Loom error is the tick's, the loop goes on."""
        try:
            return tick()
        except (LoomError, sqlite3.Error, OSError) as exc:
            self.event("tick_failed", loop=loop, error=f"{type(exc).__name__}: {exc}"[:200])
            self.tick_errors[loop] = exc
            return FAILED
        finally:
            self.done_relaunching()

    def done_relaunching(self) -> None:
        """The current thread's tick or command has returned: any relaunch it made is over (whatever
        the locks say: the invariant that no two overlap must not lean on the lock it checks)."""
        th = self.scheduler.current
        if th is not None:
            self.ended = th.name  # read after this slice, once its ledger rows are

    def watchdog_thread(self, ctx: Context) -> None:
        step = loops.watchdog_tick(ctx, self.halt)  # the daemon's own step: a full tick each interval, else the exit look
        interval = self.config.watchdog.interval
        sched = self.scheduler
        last_full = -math.inf
        failures = 0
        while True:
            if sched.t - last_full >= interval:
                last_full = sched.t
            report = self.guarded("watchdog", step)
            if report is FAILED:
                failures += 1
                self.retry_after_failure(ctx, "watchdog", failures)
                step = loops.watchdog_tick(ctx, self.halt)  # made afresh: its memory lost, a full tick next
                last_full = -math.inf
                continue
            failures = 0
            for line in getattr(report, "results", None) or ():
                if "gone on a second look" in line:
                    self.event("recover_resolved", line=line)
            sched.sleep_until(last_full + interval)  # or sooner: the pane died (tmux's hook, the pidfd)

    def canary_thread(self, ctx: Context) -> None:
        loop = CanaryLoop(ctx, self.halt)
        sched = self.scheduler
        failures = 0
        while True:
            self.canary_began = began = sched.t
            if self.guarded("canary", loop.tick) is FAILED:
                failures += 1
                self.retry_after_failure(ctx, "canary", failures)
                loop = CanaryLoop(ctx, self.halt)  # made afresh, as the daemon makes it
                continue
            failures = 0
            # The daemon's loop looks CANARY_PERIOD after its last look began (at once when that look
            # ran longer, waiting on a locked store), and sooner when the loop asks (next_look: its
            # timer, from the look's end); looks in between find nothing due and are not simulated.
            soon = loop.next_look
            if loop.quiet:
                # Its answer rests on the store and the clock (a hold in force): the looks the daemon
                # takes every CANARY_PERIOD give it again until the store changes; the first look
                # after a change is the next one on the period's grid (_after_slice wakes it then).
                self.quiet_until = sched.t + soon if soon is not None else math.inf
                self.canary_until = self.quiet_until
                sched.sleep_until(self.quiet_until)
                self.quiet_until = None
            else:
                regular = began + CANARY_PERIOD
                if soon is None:
                    self.canary_until = regular
                elif soon < CANARY_PERIOD:
                    self.canary_until = min(regular, sched.t + soon)
                else:
                    self.canary_until = sched.t + soon
                sched.sleep_until(self.canary_until)
            self.canary_until = None

    def canary_grid_after(self, t: float) -> float:
        """The daemon's canary look after `t` on its period's grid: every CANARY_PERIOD from its last
        look's start."""
        return self.canary_began + (math.floor((t - self.canary_began) / CANARY_PERIOD) + 1.0) * CANARY_PERIOD

    def hooks_thread(self, ctx: Context) -> None:
        """The daemon's hooks loop: a look when an event file is written or a line typed (both
        wake it, as inotify and the `typed` signal do), and when the next line's timeout comes."""
        # Made inside the tick's guard, as the daemon makes its loops inside their error handling:
        # the witness reads the store as it is made.
        look: Callable[[], object] | None = None

        def tick() -> object:
            nonlocal look
            if look is None:
                look = loops.hooks_look(ctx)
            return look()

        sched = self.scheduler
        failures = 0
        while True:
            seen = self.guarded("hooks", tick)
            if seen is FAILED:
                failures += 1
                self.retry_after_failure(ctx, "hooks", failures)
                look = None  # made afresh: the witness's memory lost
                continue
            failures = 0
            missing, wait = seen if isinstance(seen, tuple) else (0, loops.HOOKS_POLL)
            if missing:
                self.wake("canary")  # the canary's doorbell (the ledger's dispatch_missing is in the trace)
            sched.sleep_until(sched.t + wait)

    def sentinel_thread(self, ctx: Context) -> None:
        step = loops.sentinel_tick(ctx, self.halt)  # the daemon's own: sentinel.tick.sentinel_tick(ctx)
        interval = self.config.sentinel.interval
        sched = self.scheduler
        failures = 0
        while True:
            began = sched.t  # the daemon's loop ticks every interval from a tick's start
            if self.guarded("sentinel", step) is FAILED:  # the store locked, say
                failures += 1
                self.retry_after_failure(ctx, "sentinel", failures)
                # What the failure cost the queue: from the failed tick's start to the next one's.
                self.checker.on_sentinel_failed(began, sched.t - began)
                step = loops.sentinel_tick(ctx, self.halt)
                continue
            failures = 0
            sched.sleep_until(began + interval)

    def retry_after_failure(self, ctx: Context, loop: str, failures: int) -> None:
        """What the daemon's loop does after its tick raised (supervise.run_tick_loop): it records
        the error (`loop_error`, a locked store's busy wait first), waits backoff(failures, 2 s,
        MAX_LOOP_BACKOFF), deaf to its doorbell, then makes the tick afresh (the caller does: a
        loop's memory, the watchdog's and the hooks witness's, is lost with it) and runs it at once.
        Until 2026-12-07 the simulator's loops went on with the same objects at their next interval.
        The daemon also opens the loop's store again (a Context of its own): so does this one, its
        connection closed here and opened again at its next use (Context.store), the per-connection
        memos (hooks.turns') lost with it."""
        supervise.record_loop_error(ctx, loop, self.tick_errors.pop(loop, LoomError("a tick failed")))
        ctx.close()
        sched = self.scheduler
        until = sched.t + backoff(failures, LOOP_RETRY, MAX_LOOP_BACKOFF)
        while sched.t < until:  # a wake (a hook written, a line typed) ends no part of it
            sched.sleep_until(until)

    def wake(self, name: str, when: float | None = None) -> None:
        th = self.threads.get(name)
        if th is not None and not th.done:
            self.scheduler.wake(th, when)

    def run_action(self, name: str, fn: Callable[[Context], None], retry: float = 60.0) -> None:
        """An operator's command (`loom recycle`, `loom resolve`): a thread of its own, as a process is.
        One that fails (the store locked, say) is tried again a minute later, as a person would."""

        def run(ctx: Context) -> None:
            try:
                fn(ctx)
            except (LoomError, sqlite3.Error) as exc:
                self.event("command_failed", who=name, error=f"{type(exc).__name__}: {exc}"[:200])
                self.after(retry, self.run_action, name, fn, retry)
            finally:
                self.done_relaunching()

        self.spawn(f"{name}-{self.scheduler.seq}", run)

    # -- what Loom's code does to the world (through machine.py) ------------------------------

    def world_screen(self) -> str:
        a = self.world.agent
        if a is None:
            return ""
        if not a.alive:
            return a.screen_tail
        if self.world.t < a.ready_at:
            return BOOT_SCREEN
        return MODAL_SCREEN if a.modal else f"{PROMPT_SCREEN}\n{self.ready_line}"

    def resume_command(self, session_id: str) -> str:
        assert self.ctx is not None
        return commands.render_command(self.ctx, self.config.agent.resume_command, session_id)

    def launch_agent(self, session: str, mode: str, command: str) -> Agent:
        w = self.world
        if mode == "resume" and session != w.pinned_truth:
            self.checker.fail("resume_only_the_pinned", f"resumed {self.label(session)}, but the session Loom "
                                                        f"minted last (before any relaunch that launched "
                                                        f"nothing) is {self.label(w.pinned_truth)}")
        old = w.agent
        if old is not None and old.alive:
            w.stray.append(old)  # Loom launched beside an agent it could not end
        agent = w.launch(session, mode, self.config.agent.boot_grace, self.config.canary.ack_timeout)
        self.commands = {agent.pid: command}
        w.poller_lost_at = None
        if w.t < w.crash_loop_until:
            self.at(agent.started + self.rng.uniform(10.0, 80.0), self.crash_looped, agent.pid)
        if not agent.alive:
            self.exit_noticed()
        if self.pump is not None:
            self.pump.started(agent, command)  # a dead one too: the pump records what its CLI said
        if agent.alive and self.hooks is not None:
            self.hooks.started(agent)
        return agent

    def probe_path(self, text: str) -> Path | None:
        """The file a probe's line asks the agent to touch (None: not a probe)."""
        if NUDGE.search(text) is not None:
            return None
        m = PROBE.search(text)
        return Path(m.group(1)) if m else None

    def typed_into(self, agent: Agent, text: str, origin: str = "operator", ref: str = "") -> Delivery | None:
        """A line Loom typed (or, with the stream-json driver, handed to the pump: its receipt)."""
        self.checker.on_typed(text)
        item = NUDGE.search(text)
        m = PROBE.search(text)
        if agent.modal:
            agent.eaten_at = self.world.t  # the dialog takes it: a miss now is the dialog's
            if m and item is None:
                agent.probes_eaten = [*agent.probes_eaten[-9:], self.world.t]
        if self.pump is not None:
            if self.hooks is not None:
                self.wake("hooks")  # inject rings the hooks loop's `typed`: the witness looks
            delivery = self.pump.typed(agent, text, origin, ref, is_probe=bool(m and item is None))
            if item:
                self.worker.nudged(int(item.group(1)))
            return delivery
        if self.hooks is not None:
            self.wake("hooks")  # inject rings the hooks loop's `typed`: the witness looks
            self.hooks.typed(agent, text, is_probe=bool(m and item is None))
            if item:
                self.worker.nudged(int(item.group(1)))
            return None
        if m and item is None:
            ack = self.world.ack_time(self.world.t)
            if ack is not None:
                self.at(ack, self.acked, agent.pid, Path(m.group(1)))
            return None
        if item:
            self.worker.nudged(int(item.group(1)))
        return None

    def begin_turn(self, a: Agent, until: float | None) -> None:
        """A turn of the operator's, through whichever model the CLI's turns run in: the pump's
        (where the driver has one), else the hooks' (none without either: a turn untold)."""
        if self.pump is not None:
            self.pump.begin_turn(a, until)
        elif self.hooks is not None:
            self.hooks.begin_turn(a, until)

    def acked(self, pid: int, path: Path) -> None:
        """The agent runs the probe's `touch`: the ack file appears, with the wall clock's time."""
        a = self.world.agent
        if a is None or a.pid != pid or not a.hearing():
            return  # it went deaf or died after the probe was typed: no ack comes
        try:
            path.touch()
            wall = self.world.wall
            os.utime(path, (wall, wall))
        except OSError:
            return
        self.watch.written(path.parent)

    def crash_looped(self, pid: int) -> None:
        a = self.world.agent
        if a is not None and a.pid == pid and a.alive:
            self.world.kill(a, status=1, signal=None)
            self.event("agent_died", why="crash loop")
            self.exit_noticed()

    def exit_noticed(self) -> None:
        """tmux's pane-died hook (or, when tmux lost it, the pidfd and the exit poll every `exit_check`)
        rings the watchdog: its next step looks at once."""
        step = self.config.watchdog.exit_check
        self.wake("watchdog", math.floor(self.world.t / step + 1.0) * step)

    def lock_store(self, until: float) -> None:
        """Another process holds the store's write lock until `until` (a backup, a `sqlite3` shell):
        each of Loom's writes waits its busy timeout, on the virtual clock (Store's `waits_on_clock`),
        and then fails with "database is locked"; its reads go on."""
        assert self.ctx is not None
        locker = Store.in_dir(self.ctx.state_dir, timeout=0, migrate=False)
        locker.lock_out()
        self.at(until, self.unlock_store, locker)

    def unlock_store(self, locker: Store) -> None:
        locker.let_in()
        locker.close()

    def recorded_launch(self) -> float | None:
        """The monotonic instant of the launch record Loom holds now: a relaunch whose stop left the
        old agent running put the one before it back (launch._nothing_launched)."""
        assert self.observer is not None
        raw = self.observer.get_meta(self.observer.agent_key(launches.LAUNCH_KEY))
        return LaunchRecord.from_json(raw).mono if raw else None

    def pinned(self) -> str | None:
        assert self.observer is not None
        return session.pinned(self.observer)

    # -- after each slice: what Loom wrote ----------------------------------------------------

    def _after_slice(self, th: Any) -> None:
        self.slicer = th  # whose slice wrote what the ledger shows now
        obs, ctx = self.observer, self.ctx
        assert obs is not None and ctx is not None
        # SQLite's data_version moves when another connection commits: most slices write nothing.
        version = obs.data_version()
        if version != self.data_version:
            self.data_version = version
            self.item_cache.clear()
            self.store_changes += 1
            rows = ledger.after(obs, self.ledger_seen)
            for row in rows:
                self.ledger_seen = row["id"]
                self.on_ledger(row["id"], row["kind"], row["cause"] or "", row["detail"], row["ts"])
            self.settled_runs()
            if self.quiet_until is not None:
                self.quiet_until = min(self.quiet_until, self.canary_grid_after(self.world.t))
                self.canary_until = self.quiet_until
                self.wake("canary", self.quiet_until)
        if self.ended is not None:
            self.relaunchers.discard(self.ended)
            self.ended = None
            if not self.relaunchers and self.checker.relaunch_active:
                self.checker.on_relaunch_done()
                # A relaunch that ended without ringing (it failed half-way: the store locked, say)
                # leaves a launch to witness that no doorbell announces: the daemon's canary finds it
                # at its next look on the CANARY_PERIOD grid, which the simulated one skips otherwise.
                self.canary_look_by(self.canary_grid_after(self.world.t))
        if self.relaunched is None:
            self.relaunched = launches.signals_dir(ctx.agent_dir) / launches.RELAUNCHED
        # os.access: no exception made and dropped after every slice in which nothing rang.
        if os.access(self.relaunched, os.F_OK):
            self.relaunched.unlink()
            self.canary_look_by(self.world.t)

    def canary_look_by(self, when: float) -> None:
        """The canary's next look no later than `when` (a wake only ever brought forward)."""
        if self.canary_until is not None and when < self.canary_until:
            self.canary_until = when
            self.wake("canary", when)

    def on_ledger(self, seq: int, kind: str, cause: str, raw: str | None, ts: float) -> None:
        detail = json.loads(raw) if raw else {}
        last, self.last_kind = self.last_kind, kind
        if kind == "relaunch":
            fallback = cause == "resume_failed" and last == "resume_failed"
            d = {"cause": cause, "mode": detail.get("mode"), "old": self.label(detail.get("old_session")),
                 "new": self.label(detail.get("new_session")), "seq": seq, "fallback": fallback,
                 "at": float(detail.get("mono", self.world.t)), "evidence": detail.get("evidence")}
            if self.slicer is not None:
                self.relaunchers.add(self.slicer.name)
            # The world's count of launches when it was recorded, and the pin a resume might continue
            # then: a relaunch that fails with no launch since launched nothing (the world's word).
            self.last_relaunch = (seq, self.world.pids, self.world.pinned_truth)
            if d["mode"] == "fresh":
                # What Loom minted last, by its own ledger; the CLI's resumes are checked against it.
                self.world.pinned_truth = detail.get("new_session")
            self.event("relaunch", **d)
            self.checker.on_relaunch(d)
        elif kind == "escalation":
            self.event("escalation", cause=cause)
            self.checker.on_escalation()
            self.operator.told("hold", {})
        elif kind in ("hold_placed", "relaunch_failed", "launch_died"):
            self.event(kind, **({"cause": cause} if cause else {}))
            if kind == "hold_placed":
                self.checker.on_hold_placed(str(detail.get("by", "")), detail.get("until"), ts)
            else:
                if kind == "relaunch_failed" and self.last_relaunch is not None:
                    relaunch, launches_then, pinned = self.last_relaunch
                    self.last_relaunch = None
                    if self.world.pids == launches_then:
                        # Nothing launched: the session a resume may continue is the one before, and
                        # nothing was relaunched off it (resumed, no wedge was revived).
                        self.world.pinned_truth = pinned
                        self.checker.on_nothing_launched(relaunch)
                self.checker.on_launch_failed(self.recorded_launch())
        elif kind == "hold_cleared":
            self.event("hold_cleared", cause=cause or detail.get("cause", ""))
            self.checker.on_hold_cleared(cause or detail.get("cause", ""), str(detail.get("how", "")))
        elif kind == "operator_alert":
            self.event("operator_alert", note=detail.get("note", ""))
            self.checker.on_notice()
            self.operator.told("alert", detail)
        elif kind == "foreign_poller_reaped":
            self.event(kind, pid=detail.get("pid"))
        elif kind == "permission_denied":
            self.event(kind, tools=detail.get("tools"))
            self.checker.on_denial_recorded()
        elif kind.startswith("queue_"):
            self.on_queue_ledger(kind, detail)
        elif kind not in ("canary", "canary_sent"):  # the probe's result comes from its run
            self.event(kind, **({"cause": cause} if cause else {}))

    def on_queue_ledger(self, kind: str, detail: dict) -> None:
        """What the sentinel (sentinel/tick.py, claims.py, the nudge's inject) wrote about the queue."""
        c = self.checker
        item_id: Any = detail.get("item")  # the ledger's detail, as the sentinel wrote it
        if kind == "queue_new":
            self.event(kind, item=item_id, job=detail.get("job"))
            c.unresolved.add(item_id)
            c.on_item_sighted(str(detail.get("job")))
        elif kind == "queue_witness":
            self.event(kind, item=item_id, job=detail.get("job"), run=detail.get("run"))
            c.on_queue_witness(item_id, detail["run"])
            c.unresolved.discard(item_id)
        elif kind == "queue_escalate":
            item = self.item(item_id)
            state = item.state if item is not None else ""
            self.event(kind, item=item_id, job=detail.get("job"), state=state)
            c.on_queue_escalate(item_id, state)
            assert self.observer is not None
            # The operator hears of it when the outbox holds its message (the sender's part is not simulated).
            sent = detail.get("outbox")
            if isinstance(sent, int) and outbox.get(self.observer, sent) is not None:
                c.on_notice()
                self.operator.told("queue", {"item": item_id})
        elif kind == "queue_nudge":
            if detail.get("ok"):
                self.event(kind, item=item_id, nudge=detail.get("nudge"))
            else:
                self.event("nudge_failed", item=item_id, why=detail.get("error", ""))
        elif kind == "queue_claim":
            self.event(kind, item=item_id, by=self.label(detail.get("session")) or "operator")
        else:
            self.event(kind, item=item_id, job=detail.get("job"))
            if kind == "queue_reopen":
                c.on_item_sighted(str(detail.get("job")))

    def settled_runs(self) -> None:
        """Each canary run once, when it has settled: from the first run still pending on."""
        obs = self.observer
        assert obs is not None
        rows = canary_runs.from_id(obs, self.runs_from)
        pending = [row["id"] for row in rows if row["result"] == "pending"]
        for row in rows:
            self.checker.on_run(row["id"], row["result"])
            if row["result"] == "pending" or row["id"] in self.runs_told:
                continue
            self.event("canary", result=row["result"], seq=row["launch_seq"])
            if row["result"] == "ok":
                self.world.heard_since_disturbance = True
                self.report.on_witness(self.checker.trouble_since)
                self.checker.on_witness(row["launch_seq"])
            self.runs_told.add(row["id"])
        self.runs_from = pending[0] if pending else (rows[-1]["id"] + 1 if rows else self.runs_from)
        self.runs_told = {i for i in self.runs_told if i >= self.runs_from}

    # -- faults -----------------------------------------------------------------------------

    def fault(self, kind: str) -> None:
        self.event("fault", kind=kind)
        if not faults.apply(self, kind):
            self.event("fault_skipped", kind=kind)

    def random_faults(self) -> None:
        p = self.profile
        if p.fault_mean is None:
            return
        table = (*p.weights, *(faults.HOOKED_WEIGHTS if self.turns_told else ()),
                 *(faults.PUMPED_WEIGHTS if self.pump is not None else ()))
        kinds = [k for k, _ in table]
        weights = [w for _, w in table]

        def next_fault() -> None:
            self.fault(self.rng.choices(kinds, weights)[0])
            self.after(self.rng.expovariate(1.0 / p.fault_mean), next_fault)

        self.after(self.rng.expovariate(1.0 / p.fault_mean), next_fault)

    # -- the run ----------------------------------------------------------------------------

    def start(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="loom-sim-", dir=scratch_dir()))
        state = self.tmp / "state"
        prepare_state_dir(state)
        self.config = with_jobs(self.config, [(j.name, j.schedule) for j in self.world.jobs], self.tmp / "logs")
        self.processes = SimProcesses(self)
        self.watch = SimWatch(self)
        self.ctx = Context(self.config, None, state, driver=self.driver, processes=self.processes,
                           signals=SimSignals(self), watch=self.watch, store_waits_on_clock=True)
        if self.ctx.agent_dir != state:
            prepare_agent_dir(self.ctx.agent_dir)
        self.observer = Store.in_dir(state, timeout=0)  # never waits in real time for a lock
        cfg = self.config
        self.operator.recycle("operator_fresh")  # the operator starts the agent
        self.spawn("watchdog", self.watchdog_thread, when=cfg.watchdog.interval)
        self.spawn("canary", self.canary_thread, when=0.0)
        self.spawn("sentinel", self.sentinel_thread, when=cfg.sentinel.interval)
        if self.hooks is not None:
            self.spawn("hooks", self.hooks_thread, when=0.0)
        self.jobs.start()
        self.random_faults()

    def run(self) -> Sim:
        checker, report = self.checker, self.report

        def after_step() -> None:
            self.step += 1
            checker.after_step()
            report.after_step()

        # Loom's own log lines (a count lost to the locked store, a loop's error) are the daemon's to
        # write; in a run they would only interleave with the report.
        quiet = logging.getLogger("loom")
        before = quiet.propagate, quiet.handlers[:]
        quiet.propagate, quiet.handlers = False, [logging.NullHandler()]
        try:
            with clock.use(self.clock):
                self.start()
                try:
                    self.scheduler.run_until(self.end, after_step)
                    # The run's time is all of its days, its last stretch too, with no step in it (a
                    # loop whose tick outlasted its interval, waiting on a locked store, ticks off the grid).
                    self._set_time(self.end)
                except Violation as exc:
                    self.violation = exc
                finally:
                    self.scheduler.stop()
        finally:
            quiet.propagate, quiet.handlers = before
            if self.pump is not None:
                self.pump.close()
            if self.observer is not None:
                self.observer.close()
            if self.tmp is not None:
                shutil.rmtree(self.tmp, ignore_errors=True)
        return self

