"""The one mirror left: the sentinel tick's merge of job runs into queue items, re-implemented small.

Everything else `loom sim` runs is Loom's own code (engine.py). The sentinel's queue logic still
runs here over an in-memory item store, because the simulated jobs do not yet write the job runs
and log files the real `sentinel_tick` reads (issue 25 says what remains). Its decisions are the
real rules' (queue_rules.absorb/review/decide, schedule.next_due), and its nudges are typed through
the real `actions.nudge`, so a hold, the inject lock and a relaunch under way stop them as in the
daemon.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from loomtui import actions, timing
from loomtui.agent import launches
from loomtui.sentinel import cron, queue_rules, schedule
from loomtui.sim.world import BOOT

if TYPE_CHECKING:
    from loomtui.context import Context
    from loomtui.sim.engine import Sim

MAX_NUDGES_PER_TICK = 5   # sentinel.tick


@dataclass
class Items:
    """The queue as the sentinel keeps it: items by id, and the ids not yet witnessed."""

    items: dict[int, queue_rules.Item] = field(default_factory=dict)
    live: dict[int, None] = field(default_factory=dict)       # ids of items not yet witnessed, in id order
    item_ids: int = 0
    unreviewed: list = field(default_factory=list)

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


class SentinelShell:
    """sentinel/tick.py: finished runs become failures, merged into items; nudges and the backstop."""

    def __init__(self, sim: Sim, ctx: Context) -> None:
        self.sim = sim
        self.ctx = ctx
        self.store = sim.items

    def tick(self) -> None:
        sim, w, st = self.sim, self.sim.world, self.store
        if w.store_locked():
            sim.event("sentinel_failed", why="store locked")
            return
        now = sim.instant()  # sentinel_tick's clock.now(): both clocks
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
        relaunching = launches.relaunch_under_way(self.ctx)
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
                    typed = actions.nudge(self.ctx, f"Loom: queue item {item.id} ({item.job}) needs you",
                                          source="sentinel", detail={"item": item.id})
                    if not typed.ok:
                        sim.event("nudge_failed", item=item.id, why=typed.error)
                        continue
                    cur = st.items[item.id]
                    st.put_item(replace(cur, nudges=cur.nudges + 1, last_nudge_at=now))
                    sim.event("queue_nudge", item=item.id, nudge=cur.nudges + 1)

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
