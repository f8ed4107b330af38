"""Fleet: every declared job, its last run and whether it has open failures."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widget import Widget

from loomtui.durations import format_duration
from loomtui.tui.canary_panel import when
from loomtui.report.fleet import JobRow
from loomtui.tui.tables import KeyedTable, safe


def rows(jobs: list[JobRow], now: float) -> list[tuple[str, list]]:
    out = []
    for job in jobs:
        if job.running:
            status, style = "running", "cyan"
        elif job.last_exit is None:
            status, style = "never ran", "dim"
        elif job.last_exit == 0:
            status, style = "ok", "green"
        else:
            status, style = f"exit {job.last_exit}", "bold red"
        due = ""
        if job.next_due is not None:
            due = f"in {format_duration(job.next_due - now)}" if job.next_due >= now else f"{format_duration(now - job.next_due)} late"
        out.append((f"j:{job.name}", [
            safe(job.name), safe(status, style), safe(when(job.last_start)),
            safe(format_duration(job.last_duration) if job.last_duration is not None else ""),
            safe(job.open_items or "", "bold red" if job.open_items else ""), safe(due), safe(job.schedule),
        ]))
    return out


class FleetPanel(Widget):
    DEFAULT_CSS = "FleetPanel { height: 1fr; }"

    def compose(self) -> ComposeResult:
        yield KeyedTable([("job", "job", 18), ("status", "last", 10), ("start", "started", 14),
                          ("took", "took", 6), ("open", "open", 4), ("due", "next", 10), ("schedule", "schedule", None)],
                         id="fleet-table")

    def show(self, jobs: list[JobRow], now: float) -> None:
        self.query_one(KeyedTable).sync(rows(jobs, now))
