"""The canary loop's tick: scheduled probes, the probe that witnesses a relaunch, and the
decision that the agent is deaf.

Probes and recycles go through the actions module, like every other trigger's.
"""

from __future__ import annotations

import math
import secrets
import sqlite3
import threading
from collections.abc import Callable
from typing import Any
from dataclasses import replace

from loomtui import actions, clock
from loomtui.agent import drivers, hold_rules, launches, recovery
from loomtui.agent.ports import AgentDriver
from loomtui.canary.rules import ASK, PROBE, RECOVER, WITNESS, CanaryFacts, ProbeRun, due_in, next_step, \
    should_recycle, witness_due
from loomtui.canary.runs import ERROR, MISS, PENDING, insert_run, launch_seq, note_late_acks, recent_runs, \
    settle_stale, sweep_acks
from loomtui.context import Context
from loomtui.hooks import turns, witness
from loomtui.hooks.turn_rules import Turn
from loomtui.store import canary_runs, locks


class CanaryLoop:
    """Scheduled probes and the decision to recycle, one tick at a time (the daemon's thread)."""

    def __init__(self, ctx: Context, stop: threading.Event | None = None, driver: AgentDriver | None = None) -> None:
        self.ctx = ctx
        self.stop = stop or threading.Event()
        self.driver = driver or drivers.of(ctx)
        self.unrecorded_error = ""
        # Seconds until this loop has something to look at that no doorbell will announce (a probe
        # coming due, a witness waiting for the agent to be ready); None: nothing before its period.
        self.next_look: float | None = None
        # While something is pending (a witness, a probe of another process, a relaunch under way),
        # the loop looks this often, as it once did at every tick.
        self.waiting = min(1.0, ctx.config.canary.ack_timeout / 4)
        # The last tick's answer rested on the store and the clock alone (canary.rules.Step.quiet).
        self.quiet = False

    def tick(self) -> str:
        self.next_look, self.quiet = None, False
        try:
            if self.unrecorded_error:
                now = clock.wall()
                insert_run(self.ctx, secrets.token_hex(12), "canary", ERROR, now, now, self.unrecorded_error)
                self.unrecorded_error = ""
            return self._tick()
        except sqlite3.OperationalError as exc:
            # The store was locked or unwritable: our fault, never the agent's miss. It is kept
            # here (not raised, which would restart the loop and forget it) and recorded as an
            # `error` run once the store takes writes again.
            self.unrecorded_error = f"store unavailable during the probe: {exc}"
            self.next_look = self.waiting
            return self.unrecorded_error

    def misses_mean_deaf(self) -> bool:
        """The misses of this launch mean deaf: an ack that came late since is looked for first (the
        agent heard), and a miss the agent's turns excuse (hooks.turns) does not count."""
        cfg = self.ctx.config.canary
        # Every late ack is recorded, even one a later ok has made moot: the ledger says the agent
        # heard that probe (canary_late_ack).
        note_late_acks(self.ctx)
        now = clock.now()
        runs = turns.excused(self.ctx, recent_runs(self.ctx), now)
        return should_recycle(runs, launch_seq(self.ctx), cfg.misses_to_recycle, now, cfg.ack_timeout)

    def _tick(self) -> str:
        settle_stale(self.ctx)
        # The order of the questions is canary.rules.next_step's; this loop gathers the facts it
        # asks for, one at a time (some cost a tmux capture), and acts on its answer.
        facts, gather = CanaryFacts(self.waiting), self._facts()
        while (step := next_step(facts)).kind == ASK:
            facts = replace(facts, **{step.fact: gather[step.fact]()})
        self.next_look, self.quiet = step.after, step.quiet
        if step.kind == RECOVER:
            return self._recover()
        if step.kind == WITNESS:
            return self._probe(f"witnessing relaunch {gather.seq()}: ")
        if step.kind == PROBE:
            return self._probe("")
        return ""

    def _facts(self) -> _Facts:
        ctx, cfg = self.ctx, self.ctx.config.canary
        gather = _Facts(ctx)
        gather.update({
            "misses_mean_deaf": gather.misses_mean_deaf,
            "held": lambda: recovery.held(ctx) is not None,
            "hold_left": self._hold_left,
            "grace_left": lambda: launches.grace_left(ctx, self.driver),
            "witness_due": lambda: witness_due(gather.runs(), gather.seq(), ready=True),
            "recycle_locked": lambda: locks.is_held(ctx.agent_dir, locks.RECYCLE),
            "ready": lambda: launches.agent_ready(ctx, self.driver),
            # On the monotonic clock from the last send (within a boot): a wall clock stepped back a
            # day must not leave the agent unprobed, and a deafness undetected, for that day.
            # A typed line the agent's hooks never reported taken makes the next probe due now,
            # unless it was typed into a turn still busy (a CLI queues a line behind its turn).
            "due_in": lambda: 0.0 if self._hastened(gather.agent_turns) else
            due_in(gather.last_run(), clock.now(), cfg.interval, cfg.ack_timeout),
            "under_way": lambda: launches.relaunch_under_way(ctx),
            "pending": lambda: canary_runs.any_with_result(ctx.store, ctx.agent, PENDING),
            "withheld": lambda: turns.withholds_probe(ctx, clock.now()),
        })
        return gather

    def _hastened(self, seen: turns.Seen) -> bool:
        typed_at = witness.line_calling_for_probe(self.ctx)
        return typed_at is not None and not turns.explains(self.ctx, typed_at, clock.now(), seen)

    def _hold_left(self) -> float:
        hold = recovery.held(self.ctx)
        if hold is None:
            return 0.0  # released since the look that found it
        left = hold_rules.remaining(hold, clock.now())
        return math.inf if left is None else left

    def _recover(self) -> str:
        if self.stop.is_set():
            # The daemon stops: a relaunch (stop, launch, a boot watched for its grace) would hold up
            # the stop, into a store about to close. The next daemon's canary finds the misses again.
            return "canary_failed: not relaunched, the daemon is stopping"
        outcome = actions.recover(self.ctx, "canary_failed", source="canary", still_failing=self.misses_mean_deaf,
                                  evidence={"misses": self.ctx.config.canary.misses_to_recycle}, driver=self.driver)
        return f"canary_failed: {outcome.describe()}"

    def _probe(self, label: str) -> str:
        ctx = self.ctx
        result = actions.canary_now(ctx, source="canary", stop=self.stop)
        if self.stop.is_set():
            return "stopping"  # the probe stays pending; the next daemon settles it from the ack file
        if result.result == MISS and self.misses_mean_deaf():
            return f"{label}{result.describe()}; {self._recover()}"
        sweep_acks(ctx)
        return label + result.describe()


class _Facts(dict[str, Callable[[], Any]]):  # each fact its own type: CanaryFacts says which
    """How to gather each of the rule's facts this tick; the runs, the launch they count for and
    the agent's turns are read once, when a fact first needs them. (recover's second look reads
    afresh: CanaryLoop.misses_mean_deaf.)"""

    def __init__(self, ctx: Context) -> None:
        super().__init__()
        self.ctx = ctx
        self._runs: list[ProbeRun] | None = None
        self._seq: int | None = None
        self._turns: list[Turn] | None = None

    def misses_mean_deaf(self) -> bool:
        # Late acks first, every tick: one that came since makes its miss late (the agent heard).
        note_late_acks(self.ctx)
        cfg = self.ctx.config.canary
        return should_recycle(self.runs(), self.seq(), cfg.misses_to_recycle, clock.now(), cfg.ack_timeout)

    def runs(self) -> list[ProbeRun]:
        if self._runs is None:
            self._runs = turns.excused(self.ctx, recent_runs(self.ctx), clock.now(), self.agent_turns)
        return self._runs

    def agent_turns(self) -> list[Turn]:
        if self._turns is None:
            self._turns = turns.read(self.ctx)
        return self._turns

    def seq(self) -> int:
        if self._seq is None:
            self._seq = launch_seq(self.ctx)
        return self._seq

    def last_run(self) -> ProbeRun | None:
        runs = self.runs()
        return runs[-1] if runs else None
