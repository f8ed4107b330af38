"""The overview at 150 columns and more: the plots, the latest incidents, what waits in the queue
and the fleet, stacked on the left while the agent's pane stays on the right. No section repeats
another part of the screen: the pane is only on the right, and the full tables are one key away
(2 canary, 3 queue, 4 fleet, 6 timeline)."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widget import Widget

from loomtui.durations import format_duration
from loomtui.tui import fleet_panel
from loomtui.tui.canary_panel import when
from loomtui.tui.plots import PlotsPanel
from loomtui.tui.queue_panel import STATE_STYLES, log_text
from loomtui.tui.snapshot import Snapshot, took
from loomtui.tui.tables import KeyedTable, safe
from loomtui.tui.timeline_panel import STATUS_STYLES


def incident_rows(snap: Snapshot) -> list[tuple[str, list]]:
    out = []
    for inc in snap.overview.incidents:
        out.append((inc.key, [safe(when(inc.start)), safe(inc.status, STATUS_STYLES.get(inc.status, "")),
                              safe(took(inc, snap.taken)), safe(inc.title)]))
    return out


def waiting_rows(items: list[Any], now: float) -> list[tuple[str, list]]:
    out = []
    for item in items:
        if item.state == "witnessed":
            continue
        out.append((f"q{item.id}", [safe(item.id), safe(item.state, STATE_STYLES.get(item.state, "")), safe(item.job),
                                    safe(format_duration(max(now - item.first_seen, 0))), safe(log_text(item.sample))]))
    return out


class OverviewPanel(Widget):
    DEFAULT_CSS = """
    OverviewPanel { layout: vertical; height: 1fr; }
    OverviewPanel > .section { border: round $primary 60%; border-title-color: $accent; padding: 0 1; }
    OverviewPanel > #overview-plots { height: auto; }
    OverviewPanel #latency-spark, OverviewPanel #queue-spark { height: 2; }
    OverviewPanel > #overview-incidents { height: 1fr; min-height: 5; }
    OverviewPanel > #overview-queue { height: 1fr; min-height: 5; }
    OverviewPanel > #overview-fleet { height: auto; max-height: 10; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._items: dict[str, Any] = {}

    def compose(self) -> ComposeResult:
        with Vertical(id="overview-plots", classes="section") as box:
            box.border_title = "plots · p: their numbers"
            yield PlotsPanel()
        with Vertical(id="overview-incidents", classes="section") as box:
            box.border_title = "latest incidents · 6: timeline"
            yield KeyedTable([("when", "when", 14), ("status", "status", 10), ("took", "took", 10),
                              ("what", "what", None)], stretch="what", id="overview-incidents-table")
        with Vertical(id="overview-queue", classes="section") as box:
            box.border_title = "waiting in the queue · 3: queue · d: resolve"
            yield KeyedTable([("id", "#", 4), ("state", "state", 9), ("job", "job", 14), ("age", "age", 7),
                              ("sample", "line", None)], stretch="sample", id="overview-queue-table")
        with Vertical(id="overview-fleet", classes="section") as box:
            box.border_title = "fleet · 4: every job"
            yield KeyedTable([("job", "job", 18), ("status", "last", 10), ("start", "started", 14), ("open", "open", 4),
                              ("due", "next", None)], stretch="due", id="overview-fleet-table")

    def show(self, snap: Snapshot) -> None:
        self.query_one(PlotsPanel).show(snap)
        self.query_one("#overview-incidents-table", KeyedTable).sync(incident_rows(snap))
        self._items = {f"q{i.id}": i for i in snap.queue}
        self.query_one("#overview-queue-table", KeyedTable).sync(waiting_rows(snap.queue, snap.taken))
        fleet = [(key, [cells[0], cells[1], cells[2], cells[4], cells[5]])
                 for key, cells in fleet_panel.rows(snap.jobs, snap.taken)]
        table = self.query_one("#overview-fleet-table", KeyedTable)
        table.sync(fleet)
        table.styles.height = min(len(fleet), 8) + 1  # the jobs and the header: the rest goes to the lists above

    @property
    def selected(self) -> Any | None:
        """The queue item under the overview's cursor, for `d` when this table has the focus."""
        table = self.query_one("#overview-queue-table", KeyedTable)
        return self._items.get(table.selected_key or "") if table.has_focus else None
