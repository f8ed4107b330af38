"""The fleet: every job declared for an agent, its last run, its open failures and when it is due
next. What the console's Fleet panel shows and what `loom jobs --json` prints."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from loomtui.context import Context
from loomtui.store import job_runs, queue_items
from loomtui.store.db import Store


@dataclass(frozen=True)
class JobRow:
    name: str
    schedule: str
    last_start: float | None
    last_exit: int | None
    last_duration: float | None
    running: bool
    open_items: int
    next_due: float | None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def rows(ctx: Context, store: Store, queue: list[Any] | None, now: float) -> list[JobRow]:
    """`ctx`'s agent's jobs, in the config's order. `queue`: the agent's items as already read
    (None: its open and claimed ones are read here)."""
    from loomtui.clock import local_zone
    from loomtui.sentinel.cron import in_zone
    from loomtui.sentinel.schedule import next_due

    if queue is None:
        from loomtui.sentinel.queue import from_row

        queue = [from_row(r) for r in queue_items.unwitnessed(store, ctx.agent)]
    last = job_runs.last_of_each(store)
    open_by_job: dict[str, int] = {}
    for item in queue:
        if item.state != "witnessed":
            open_by_job[item.job] = open_by_job.get(item.job, 0) + 1
    out = []
    for job in ctx.config.jobs:
        if job.agent and job.agent != ctx.agent:
            continue  # another agent's job: its failures are that agent's to hear
        row = last.get(job.name)
        due = None
        if job.schedule:
            try:
                due = next_due(job.schedule, row["started"] if row else now, cron=in_zone(local_zone()))
            except (ValueError, KeyError):
                due = None
        out.append(JobRow(
            job.name, job.schedule, row["started"] if row else None, row["exit_code"] if row else None,
            row["duration"] if row else None, row is not None and row["ended"] is None, open_by_job.get(job.name, 0),
            due,
        ))
    return out
