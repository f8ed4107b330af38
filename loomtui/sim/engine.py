"""The event loop on the virtual clock: one seeded random.Random, one heap of timed steps, the
invariants checked after every step. Same seed, same profile, same config: same run, to the byte.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from typing import Any, Callable

from loomtui.sim import faults
from loomtui.sim.actors import Jobs, Operator, QueueWorker
from loomtui.sim.invariants import Checker, Violation
from loomtui.sim.report import Collector
from loomtui.sim.sentinel_mirror import CanaryShell, Recovery, SentinelShell, Store, WatchdogShell
from loomtui.sim.world import Job, World

TRACE = 40
DAY = 86400.0


class Sim:
    def __init__(self, config: Any, profile: Any, seed: int, days: float) -> None:
        self.config = config
        self.profile = profile
        self.seed = seed
        self.days = days
        self.end = days * DAY
        self.rng = random.Random(seed)
        T = config.canary.ack_timeout
        self.world = World(self.rng, poller_configured=bool(config.agent.poller_match),
                           ack_timeout=T, latency_cap=min(20.0, 0.1 * T),
                           jobs=[Job(name, period, phase=self.rng.uniform(0.0, period)) for name, period in profile.jobs])
        self.store = Store()
        self.run_truth: dict[int, tuple[float, bool]] = {}   # job run id -> (started, monotonic; truly clean)
        self.hold_released_at = -1e18
        self.heap: list[tuple[float, int, Callable[..., None], tuple]] = []
        self.seq = 0
        self.step = 0
        self.trace: deque[tuple[int, float, str, dict]] = deque(maxlen=TRACE)
        self.report = Collector(self)
        self.recovery = Recovery(self)
        self.watchdog = WatchdogShell(self)
        self.canary = CanaryShell(self)
        self.sentinel = SentinelShell(self)
        self.operator = Operator(self, profile.operator_delay)
        self.worker = QueueWorker(self, profile.fix_probability)
        self.jobs = Jobs(self)
        self.checker = Checker(self)
        self.violation: Violation | None = None

    # -- scheduling -------------------------------------------------------------------------

    def at(self, when: float, fn: Callable[..., None], *args: Any) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (max(when, self.world.t), self.seq, fn, args))

    def after(self, delay: float, fn: Callable[..., None], *args: Any) -> None:
        self.at(self.world.t + delay, fn, *args)

    def every(self, interval: float, fn: Callable[[], None], first: float) -> None:
        heap, world = self.heap, self.world

        def tick() -> None:
            fn()
            self.seq += 1  # self.after(interval, tick), inlined: the watchdog's tick is most steps
            heapq.heappush(heap, (world.t + interval, self.seq, tick, ()))

        self.at(first, tick)

    # -- what the shell and the world tell the run ---------------------------------------------

    def event(self, kind: str, /, **detail: Any) -> None:
        self.trace.append((self.step, self.world.t, kind, detail))
        c = self.checker
        if kind == "relaunch":
            c.on_relaunch(detail)
        elif kind == "relaunch_done":
            c.on_relaunch_done()
        elif kind == "escalation":
            c.on_escalation()
        elif kind == "hold_cleared":
            c.on_hold_cleared(detail["cause"])
            self.hold_released_at = self.world.t
        elif kind == "sentinel_failed":
            c.on_sentinel_failed()
        elif kind == "queue_new":
            c.unresolved.add(detail["item"])
        elif kind == "queue_escalate":
            c.on_queue_escalate(detail["item"], detail["state"])
        elif kind == "queue_witness":
            c.on_queue_witness(detail["item"], detail["run"])
            c.unresolved.discard(detail["item"])
        self.report.on_event(kind, detail)

    def notify(self, kind: str, /, **detail: Any) -> None:
        """A message to the operator through the outbox."""
        self.checker.on_notice()
        self.operator.told(kind, detail)

    def typed(self, kind: str) -> None:
        self.checker.on_typed(kind)

    def witnessed(self, seq: int) -> None:
        self.report.on_witness(self.checker.trouble_since)
        self.checker.on_witness(seq)

    def nudged(self, item_id: int) -> None:
        self.worker.nudged(item_id)

    def wake_canary(self) -> None:
        self.canary.wake()

    def on_launch(self, agent: Any) -> None:
        w = self.world
        w.poller_lost_at = None
        if w.t < w.crash_loop_until:
            self.at(agent.started + self.rng.uniform(10.0, 80.0), self.crash_looped, agent.pid)

    def crash_looped(self, pid: int) -> None:
        a = self.world.agent
        if a is not None and a.pid == pid and a.alive:
            self.world.kill(a, status=1, signal=None)
            self.event("agent_died", why="crash loop")
            self.exit_noticed()

    def exit_noticed(self) -> None:
        """The watchdog's exit check runs every `exit_check`: the next one sees the dead pane."""
        step = self.config.watchdog.exit_check
        self.at(math.floor(self.world.t / step + 1.0) * step, self.watchdog.fast_tick)

    # -- faults -----------------------------------------------------------------------------

    def fault(self, kind: str) -> None:
        self.event("fault", kind=kind)
        if not faults.apply(self, kind):
            self.event("fault_skipped", kind=kind)

    def random_faults(self) -> None:
        p = self.profile
        if p.fault_mean is None:
            return
        kinds = [k for k, _ in p.weights]
        weights = [w for _, w in p.weights]

        def next_fault() -> None:
            self.fault(self.rng.choices(kinds, weights)[0])
            self.after(self.rng.expovariate(1.0 / p.fault_mean), next_fault)

        self.after(self.rng.expovariate(1.0 / p.fault_mean), next_fault)

    # -- the run ----------------------------------------------------------------------------

    def start(self) -> None:
        cfg = self.config
        self.at(0.0, self.operator.recycle, "operator_fresh")  # the operator starts the agent
        self.every(cfg.watchdog.interval, self.watchdog.tick, first=cfg.watchdog.interval)
        self.every(cfg.sentinel.interval, self.sentinel.tick, first=cfg.sentinel.interval)
        self.jobs.start()
        self.random_faults()

    def run(self) -> Sim:
        self.start()
        heap = self.heap
        world = self.world
        checker, report = self.checker, self.report
        try:
            while heap and heap[0][0] <= self.end:
                when, _, fn, args = heapq.heappop(heap)
                world.t = when
                self.step += 1
                fn(*args)
                checker.after_step()
                report.after_step()
        except Violation as exc:
            self.violation = exc
        return self
