"""The loops' wiring, re-implemented small: what actions.recover, the watchdog, the canary loop
and the sentinel tick do around the rules, against the modelled world instead of tmux and SQLite.

Every decision is the real rules modules' own, called through the module (so a test that
patches a rule sees the simulator follow it) with the same arguments the real shells pass:
policy.decide with the relaunch history and the hold, watchdog_rules.assess with the memory
of earlier looks, canary_rules.due_in / should_recycle over the probe runs, queue_rules for
items, nudges and the backstop. What the shells do between the rules (the second look under
recycle.lock, the resume-failed fallback, the boot grace, the foreign-poller scan) is mirrored
here line for line; where the sim simplifies, the comment says so.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable

from loomtui import states, timing
from loomtui.agent import policy, watchdog_rules
from loomtui.canary import rules as canary_rules
from loomtui.sentinel import cron, queue_rules, schedule
from loomtui.sim.world import BOOT, STOP_TIME

if TYPE_CHECKING:
    from loomtui.sim.engine import Sim

HISTORY_LIMIT = 500       # recovery.history reads the last 500 relaunches
RECENT_RUNS = 50          # canary.runs.recent_runs
MAX_NUDGES_PER_TICK = 5   # sentinel.tick
CANARY_STEP = 1.0         # the canary loop's tick (daemon.loops: min(1s, ack_timeout / 4))


@dataclass
class Store:
    """What Loom's store would hold, as the shells read it."""

    pinned: str | None = None
    history: list[policy.Relaunch] = field(default_factory=list)
    launch_seq: int = 0
    last_launch: tuple[float, str, str, str] | None = None   # (mono, mode, session, cause)
    launch_ready: bool = False                               # seen showing agent.ready_match
    hold: dict | None = None
    canary_recycled: set[str] = field(default_factory=set)   # membership only: never iterated
    runs: list[canary_rules.ProbeRun] = field(default_factory=list)
    recycle_locked: bool = False
    lock_until: float = 0.0
    items: dict[int, queue_rules.Item] = field(default_factory=dict)
    live: dict[int, None] = field(default_factory=dict)       # ids of items not yet witnessed, in id order
    item_ids: int = 0
    unreviewed: list = field(default_factory=list)
    recent: tuple[policy.Relaunch, ...] | None = None          # history[-HISTORY_LIMIT:], kept till it changes

    def recent_history(self) -> tuple[policy.Relaunch, ...]:
        """What recovery.history reads: the last HISTORY_LIMIT relaunches. The same tuple until the
        next relaunch (a held watchdog asks every tick; copying 500 entries each time was a cost)."""
        if self.recent is None:
            self.recent = tuple(self.history[-HISTORY_LIMIT:])
        return self.recent

    def put_item(self, item: queue_rules.Item) -> None:
        """Store an item; a witnessed one leaves the live index for good (witnessed is final)."""
        self.items[item.id] = item
        if item.state == queue_rules.WITNESSED:
            self.live.pop(item.id, None)
        else:
            self.live[item.id] = None

    def live_items(self) -> list[queue_rules.Item]:
        items = self.items
        return [items[i] for i in self.live]


class Recovery:
    """actions.recover and launch.relaunch_locked: one relaunch at a time, the policy decides."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.store = sim.store
        self.boot_grace = sim.config.agent.boot_grace  # asked after every step: read once

    def instant(self) -> timing.Instant:
        """Now on both clocks, as clock.now() reads them (only the wall clock is ever stepped)."""
        w = self.sim.world
        return timing.Instant(w.wall, w.mono, BOOT)

    def since_launch(self) -> float | None:
        last = self.store.last_launch
        return None if last is None else max(0.0, self.sim.world.t - last[0])

    def in_boot_grace(self) -> bool:
        st = self.store
        last = st.last_launch
        return last is not None and max(0.0, self.sim.world.t - last[0]) < self.boot_grace and not st.launch_ready

    def agent_ready(self) -> bool:
        """launches.agent_ready: seen ready before, past its boot grace, or showing ready_match now."""
        st, w, agent_cfg = self.store, self.sim.world, self.sim.config.agent
        since = self.since_launch()
        if since is None or st.launch_ready or since >= agent_cfg.boot_grace:
            return True
        ready_match = getattr(agent_cfg, "ready_match", "")
        if not ready_match or w.tmux_hangs() or w.agent is None or not w.agent.alive or w.agent.ready_at > w.t:
            return False
        screen = w.screen()
        if re.search(ready_match, screen) is None or re.search(agent_cfg.resume_failed_match, screen):
            return False
        st.launch_ready = True
        return True

    def under_way(self) -> bool:
        """launches.relaunch_under_way: recycle.lock held, or the agent inside its boot grace."""
        return self.store.recycle_locked or self.in_boot_grace()

    def recover(self, cause: str, *, source: str, still_failing: Callable[[], bool] | None = None) -> tuple[str, float]:
        """(status, seconds to wait when the policy said wait)."""
        st, sim = self.store, self.sim
        if st.recycle_locked:
            return "busy", 0.0
        if still_failing is not None and not still_failing():
            sim.event("recover_resolved", cause=cause, source=source)
            return "resolved", 0.0
        now = self.instant()
        pinned = st.pinned
        recycled = frozenset({pinned}) if pinned is not None and pinned in st.canary_recycled else frozenset()
        situation = policy.Situation(cause, pinned, st.recent_history(), st.hold is not None,
                                     recycled)
        decision = policy.decide(situation, policy.limits_from(sim.config), now)
        if decision.action == policy.RELAUNCH:
            if sim.world.store_locked():
                sim.event("store_error", during="relaunch", cause=cause)
                return "failed", 0.0
            if cause in policy.OPERATOR and st.hold is not None:
                st.hold = None
                sim.event("hold_cleared", cause=cause, source=source)
            self.relaunch(decision.mode or policy.RESUME, cause=cause, source=source,
                          reason="; ".join(decision.reasons))
            return "relaunched", 0.0
        if decision.action == policy.HOLD and decision.escalate:
            if sim.world.store_locked():
                sim.event("store_error", during="escalation", cause=cause)
                return "failed", 0.0
            if st.hold is None:  # recovery.escalate: once per hold
                st.hold = {"cause": cause, "at": now.wall}
                sim.event("escalation", cause=cause, source=source, reasons="; ".join(decision.reasons))
                sim.notify("hold", cause=cause)
            return "held", 0.0
        if decision.action == policy.WAIT:
            sim.event("recover_wait", cause=cause, wait=round(decision.wait, 3))
            return "waiting", decision.wait
        return "held", 0.0

    def relaunch(self, mode: str, *, cause: str, source: str, reason: str = "", fallback: bool = False) -> None:
        st, sim, w = self.store, self.sim, self.sim.world
        old = st.pinned
        if mode == policy.RESUME and old is None:
            mode = policy.FRESH
        new = old if mode == policy.RESUME else w.mint_session()
        assert new is not None
        # Pinned and recorded before launching: the attempt counts whether or not it works.
        if mode == policy.FRESH:
            st.pinned = new
        st.launch_seq += 1
        st.history.append(policy.Relaunch(self.instant(), cause, mode, old, new))
        if len(st.history) > 2 * HISTORY_LIMIT:
            del st.history[:HISTORY_LIMIT]
        st.recent = None
        st.last_launch = (w.t, mode, new, cause)
        st.launch_ready = False
        if cause == "canary_failed" and old is not None:
            st.canary_recycled.add(old)
        st.recycle_locked = True
        # The event comes before the world changes: the invariants judge it against what was true.
        sim.event("relaunch", cause=cause, mode=mode, source=source, old=old, new=new, fallback=fallback,
                  seq=st.launch_seq, reason=reason)
        if mode == policy.FRESH:
            w.pinned_truth = new
        w.stop_current()
        agent = w.launch(new, mode, sim.config.agent.boot_grace, sim.config.canary.ack_timeout)
        sim.on_launch(agent)
        st.lock_until = w.t + STOP_TIME + sim.config.agent.resume_check
        sim.at(st.lock_until, self.boot_watched, agent.pid, mode, cause, source, fallback)

    def boot_watched(self, pid: int, mode: str, cause: str, source: str, fallback: bool) -> None:
        """launch._watch_boot's verdict: a resume that found no conversation falls back to fresh."""
        st, sim, w = self.store, self.sim, self.sim.world
        a = w.agent
        if a is not None and a.pid == pid and not a.alive and a.died_at is not None:
            if (mode == policy.RESUME and not fallback
                    and re.search(sim.config.agent.resume_failed_match, a.screen_tail)):
                sim.event("resume_failed", session=a.session)
                self.relaunch(policy.FRESH, cause="resume_failed", source=source, fallback=True,
                              reason=f"resume of {a.session} found no conversation")
                return
            sim.event("launch_died", cause=cause, mode=mode, status=a.exit_status)
        st.recycle_locked = False
        sim.event("relaunch_done")
        sim.wake_canary()


class WatchdogShell:
    """agent/watchdog.py: observe, watchdog_rules.assess, act through Recovery."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        # The simulated agent is a screen one (the tmux driver's kind): it draws dialogs.
        self.settings = watchdog_rules.settings_from(sim.config, has_dialogs=True)
        self.memory = watchdog_rules.Looks()
        self.last_foreign_scan: float | None = None
        self.modals = bool(sim.config.agent.modals)

    def observe(self) -> watchdog_rules.Observation:
        sim, w = self.sim, self.sim.world
        last = sim.store.last_launch
        since = None if last is None else max(0.0, w.t - last[0])  # Recovery.since_launch, inlined: every tick
        mode = last[1] if last else None
        Observation = watchdog_rules.Observation
        if w.tmux_hangs():
            return Observation(tmux=states.UNKNOWN, why="tmux did not answer within 5s",
                               poller_configured=w.poller_configured, since_launch=since, last_mode=mode)
        if not w.tmux_session or w.socket_lost:
            return Observation(tmux=states.GONE, socket_lost=w.socket_lost,
                               poller_configured=w.poller_configured, since_launch=since, last_mode=mode)
        a = w.agent
        assert a is not None
        if not a.alive:
            # tmux 3.3a sometimes loses the exit status in a race: the rules must cope without it.
            status = None if w.rng.random() < 0.1 else a.exit_status
            return Observation(tmux=states.UP, pane_dead=True, dead_status=status, dead_signal=a.exit_signal,
                               screen=a.screen_tail, poller_configured=w.poller_configured, since_launch=since,
                               last_mode=mode)
        agent = states.PRESENT
        poller = states.PRESENT if a.poller else states.MISSING
        why = ""
        if w.loaded():
            if w.rng.random() < 0.15:
                agent, why = states.UNKNOWN, "the process tree walk timed out under load"
            if w.rng.random() < 0.3:
                poller, why = states.UNKNOWN, "the poller could not be told under load"
        screen = w.screen() if self.modals and agent == states.PRESENT else None
        return Observation(tmux=states.UP, agent=agent, poller=poller, screen=screen, why=why,
                           poller_configured=w.poller_configured, since_launch=since, last_mode=mode)

    def fast_tick(self) -> None:
        """Every exit_check: one cheap look; a dead pane gets the full tick at once."""
        w = self.sim.world
        if w.tmux_hangs() or not w.tmux_session or w.socket_lost:
            return
        if w.agent is not None and not w.agent.alive:
            self.tick()

    def tick(self) -> None:
        sim = self.sim
        obs = self.observe()
        steps, self.memory = watchdog_rules.assess(obs, self.memory, self.settings, sim.world.t)
        for step in steps:
            self.act(step)
        if not any(step.kind == "recover" for step in steps) and self.due_foreign_scan():
            self.reap_foreign()

    def act(self, step: watchdog_rules.Step) -> None:
        sim, w = self.sim, self.sim.world
        if step.kind == "ambiguous":
            sim.event("observation_ambiguous", why=step.note)
        elif step.kind == "alert":
            sim.event("operator_alert", note=step.note)
            sim.notify("alert", note=step.note)
        elif step.kind == "repair_socket":
            w.socket_lost = False
            sim.event("tmux_socket_repair")
        elif step.kind == "dismiss_modal":
            why = "a relaunch holds inject.lock" if sim.store.recycle_locked else w.can_type()
            if not why and w.agent is not None:
                w.agent.modal = False
            sim.event("modal_dismissed", ok=not why, why=why)
        else:
            assert step.kind == "recover" and step.cause
            pid = w.agent.pid if w.agent is not None else None
            status, _ = sim.recovery.recover(step.cause, source="watchdog",
                                             still_failing=lambda: self.still_failing(step.cause, pid))
            sim.event("watchdog_recover", cause=step.cause, status=status)

    def still_failing(self, cause: str | None, pid: int | None) -> bool:
        """The second look under recycle.lock (watchdog.still_failing)."""
        w = self.sim.world
        if w.tmux_hangs():
            return False
        present = w.tmux_session and not w.socket_lost
        if cause == "tmux_gone":
            return not present and not w.socket_lost
        if not present or w.agent is None:
            return False
        a = w.agent
        if cause in ("exit", "crash", "resume_failed") and not a.alive:
            return a.pid == pid
        if not a.alive:
            return False
        if w.loaded() and w.rng.random() < 0.3:
            return False  # the tree walk was ambiguous: not failing, as far as anyone can tell
        if cause == "poller_missing":
            return not a.poller
        return False  # "exit" with a live pane: the agent process is always in the sim's tree

    def due_foreign_scan(self) -> bool:
        if not self.sim.world.poller_configured:
            return False
        now = self.sim.world.t
        if self.last_foreign_scan is not None and now - self.last_foreign_scan < self.sim.config.watchdog.foreign_scan:
            return False
        self.last_foreign_scan = now
        return True

    def reap_foreign(self) -> None:
        sim, w = self.sim, self.sim.world
        if w.tmux_hangs() or not w.tmux_session or w.socket_lost or w.agent is None or not w.agent.alive:
            return
        if sim.recovery.under_way():
            return
        if w.foreign_poller_since is not None:
            sim.event("foreign_poller_reaped", age=round(w.t - w.foreign_poller_since, 3))
            w.foreign_poller_since = None


class CanaryShell:
    """canary/loop.py: scheduled probes, canary_rules decides when and whether misses mean deaf."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.store = sim.store
        self.unrecorded_error = ""
        self.in_flight = False
        self.next_at: float | None = None
        self.token = 0

    def schedule(self, when: float) -> None:
        """Run the next tick at `when` (the real loop ticks each second; nothing changes in between
        that this loop would see, except the events that call wake())."""
        self.token += 1
        self.next_at = when
        self.sim.at(when, self.tick, self.token)

    def wake(self) -> None:
        if self.in_flight:
            return
        when = self.sim.world.t + CANARY_STEP
        if self.next_at is None or when < self.next_at:
            self.schedule(when)

    def misses_mean_deaf(self) -> bool:
        cfg = self.sim.config.canary
        return canary_rules.should_recycle(self.store.runs[-RECENT_RUNS:], self.store.launch_seq,
                                           cfg.misses_to_recycle)

    def record(self, result: str, why: str = "", sent: tuple[float, float, int, bool] | None = None) -> None:
        """One run; `sent` is (wall, monotonic, launch_seq, in_grace) as insert_run took them when the
        probe went out."""
        st, w = self.store, self.sim.world
        wall, mono, seq, grace = sent or (w.wall, w.mono, st.launch_seq, self.sim.recovery.in_boot_grace())
        st.runs.append(canary_rules.ProbeRun(wall, result, seq, grace, mono, BOOT))
        if len(st.runs) > 4 * RECENT_RUNS:
            del st.runs[:2 * RECENT_RUNS]
        self.sim.event("canary", result=result, why=why, seq=seq)

    def tick(self, token: int) -> None:
        if token != self.token:
            return  # superseded by an earlier wake
        self.next_at = None
        sim, w, st = self.sim, self.sim.world, self.store
        cfg = sim.config.canary
        if w.store_locked():
            # loop.tick: the store error is kept and recorded as an `error` run once writes work again.
            self.unrecorded_error = "store unavailable during the probe"
            self.schedule(max(w.t + CANARY_STEP, w.store_locked_until))
            return
        if self.unrecorded_error:
            self.record(canary_rules.ERROR, self.unrecorded_error)
            self.unrecorded_error = ""
        if self.misses_mean_deaf():
            status, wait = sim.recovery.recover("canary_failed", source="canary", still_failing=self.misses_mean_deaf)
            sim.event("canary_recover", status=status)
            self.after_recover(status, wait)
            return
        if st.hold is not None:
            self.schedule(w.t + 60.0)  # an operator's relaunch wakes the loop sooner
            return
        # The witnessed-relaunch rule, where this tree has it: a relaunch is a claim until a probe
        # of its own launch acks, and that probe goes out the moment the agent is ready.
        witness_due = getattr(canary_rules, "witness_due", None)
        if witness_due is not None:
            runs = st.runs[-RECENT_RUNS:]
            if witness_due(runs, st.launch_seq, ready=True):
                if st.recycle_locked:
                    self.schedule(max(w.t + CANARY_STEP, st.lock_until))
                    return
                if not witness_due(runs, st.launch_seq, ready=sim.recovery.agent_ready()):
                    self.schedule(w.t + CANARY_STEP if getattr(sim.config.agent, "ready_match", "")
                                  else max(w.t + CANARY_STEP, st.last_launch[0] + sim.config.agent.boot_grace))
                    return
                self.probe()
                return
        last = st.runs[-1] if st.runs else None
        due = canary_rules.due_in(last, sim.recovery.instant(), cfg.interval, cfg.ack_timeout)
        if due > 0:
            self.schedule(w.t + max(due, 1e-3))
            return
        if sim.recovery.under_way():
            grace_end = st.last_launch[0] + sim.config.agent.boot_grace if st.last_launch else w.t
            self.schedule(max(w.t + CANARY_STEP, st.lock_until if st.recycle_locked else grace_end))
            return
        self.probe()

    def after_recover(self, status: str, wait: float) -> None:
        w = self.sim.world
        if status == "waiting":
            self.schedule(w.t + max(math.ceil(wait), CANARY_STEP))
        elif status == "busy":
            self.schedule(max(w.t + CANARY_STEP, self.store.lock_until))
        elif status == "held":
            self.schedule(w.t + 60.0)
        else:
            self.schedule(w.t + CANARY_STEP)

    def probe(self) -> None:
        """probe._send and probe.wait: type the instruction, then the ack or the deadline."""
        sim, w = self.sim, self.sim.world
        why = w.can_type()
        if why:
            self.record(canary_rules.INJECT_FAILED, why)
            self.schedule(w.t + CANARY_STEP)
            return
        agent = w.agent
        sim.typed("probe")
        deadline = w.t + sim.config.canary.ack_timeout
        ack = w.ack_time(w.t)
        sent = (w.wall, w.mono, self.store.launch_seq, sim.recovery.in_boot_grace())
        self.in_flight = True
        if ack is not None and ack <= deadline:
            sim.at(ack, self.settle, agent.pid if agent else None, True, sent, deadline)
        else:
            sim.at(deadline, self.settle, None, False, sent, deadline)

    def settle(self, pid: int | None, acked: bool, sent: tuple[float, float, int, bool], deadline: float) -> None:
        sim, w = self.sim, self.sim.world
        a = w.agent
        if acked and (a is None or a.pid != pid or not a.hearing()):
            # It went deaf or died after the probe was typed: no ack will come.
            sim.at(deadline, self.settle, None, False, sent, deadline)
            return
        self.in_flight = False
        if w.store_locked():
            self.unrecorded_error = "store unavailable when the probe settled"
            self.schedule(max(w.t + CANARY_STEP, w.store_locked_until))
            return
        self.record(canary_rules.OK if acked else canary_rules.MISS, sent=sent)
        if acked:
            sim.witnessed(sent[2])
        if not acked and self.misses_mean_deaf():
            status, wait = sim.recovery.recover("canary_failed", source="canary", still_failing=self.misses_mean_deaf)
            sim.event("canary_recover", status=status)
            self.after_recover(status, wait)
            return
        self.schedule(w.t + CANARY_STEP)


class SentinelShell:
    """sentinel/tick.py: finished runs become failures, merged into items; nudges and the backstop."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.store = sim.store

    def tick(self) -> None:
        sim, w, st = self.sim, self.sim.world, self.store
        if w.store_locked():
            sim.event("sentinel_failed", why="store locked")
            return
        now = sim.recovery.instant()  # sentinel_tick's clock.now(): both clocks
        runs, st.unreviewed = st.unreviewed, []
        for job in w.jobs:
            mine = [r for r in runs if r.job == job.name]
            failures = [self.exit_failure(r) for r in mine if r.exit_code != 0]
            if failures or mine:
                self.merge(job.name, failures, mine, now)
        self.send_due(now)

    @staticmethod
    def exit_failure(run: queue_rules.JobRun) -> queue_rules.Failure:
        return queue_rules.Failure(run.job, queue_rules.EXIT, f"exit code {run.exit_code}",
                                   f"run {run.id} exited {run.exit_code}", at=run.started)

    def live(self, job: str) -> dict[tuple[str, str], queue_rules.Item]:
        return {(i.kind, i.signature): i for i in self.store.live_items() if i.job == job}

    def merge(self, job: str, failures: list, runs: list, at: timing.Instant) -> None:
        sim, st = self.sim, self.store
        now = at.wall
        items = self.live(job)
        for failure in failures:
            key = (failure.kind, failure.signature)
            item = items.get(key)
            if item is None:
                st.item_ids += 1
                item = queue_rules.Item(st.item_ids, job, failure.kind, failure.signature, failure.sample,
                                        f"/sim/logs/{job}.log", now, now, failure.count,
                                        first_seen_mono=at.mono, first_seen_boot=at.boot)
                sim.event("queue_new", item=item.id, job=job)
            else:
                item, events = queue_rules.absorb(item, failure, now)
                for kind, _detail in events:
                    sim.event(kind, item=item.id, job=job)
            st.put_item(item)
            items[key] = item
        for run in runs:
            for key, item in list(items.items()):
                item, events = queue_rules.review(item, run, now)
                if events:
                    st.put_item(item)
                    items[key] = item
                    for kind, _detail in events:
                        sim.event(kind, item=item.id, job=job, run=run.id)

    def witness_window(self, item: queue_rules.Item) -> float | None:
        job = next((j for j in self.sim.world.jobs if j.name == item.job), None)
        if job is None or item.claimed_at is None:
            return None
        due = schedule.next_due(job.schedule, item.claimed_at, cron=cron.in_zone(dt.timezone.utc))
        return due - item.claimed_at + self.sim.config.sentinel.missed_grace

    def send_due(self, at: timing.Instant) -> None:
        sim, st = self.sim, self.store
        now = at.wall
        relaunching = sim.recovery.under_way()
        sent = 0
        for item in st.live_items():
            for action in queue_rules.decide(item, sim.config.sentinel, at, relaunching=relaunching,
                                             witness_window=self.witness_window(item)):
                if isinstance(action, queue_rules.Escalate):
                    if st.items[item.id].escalated_at is None:
                        st.put_item(replace(st.items[item.id], escalated_at=now))
                        sim.event("queue_escalate", item=item.id, job=item.job, state=item.state)
                        sim.notify("queue", item=item.id)
                elif sent >= MAX_NUDGES_PER_TICK:
                    continue
                else:
                    sent += 1
                    why = sim.world.can_type()
                    if why:
                        sim.event("nudge_failed", item=item.id, why=why)
                        continue
                    sim.typed("nudge")
                    cur = st.items[item.id]
                    st.put_item(replace(cur, nudges=cur.nudges + 1, last_nudge_at=now))
                    sim.event("queue_nudge", item=item.id, nudge=cur.nudges + 1)
                    sim.nudged(item.id)

    def claim(self, item_id: int, by: str) -> bool:
        """claims.resolve: a claim is a promise; only the job's next clean run witnesses it."""
        sim, st = self.sim, self.store
        item = st.items.get(item_id)
        if item is None or item.state == queue_rules.WITNESSED or sim.world.store_locked():
            return False
        st.put_item(replace(item, state=queue_rules.CLAIMED, claimed_at=sim.world.wall, claimed_by=by,
                            note=f"fixed by {by}", claimed_mono=sim.world.mono, claimed_boot=BOOT))
        sim.event("queue_claim", item=item_id, by=by)
        return True
