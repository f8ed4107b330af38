"""The overview's plots, drawn with Textual's Sparkline: canary latency over the last probes with
misses marked under it, relaunches per hour over the last day by cause, and the age of the
oldest queue item still waiting. `p` opens the numbers each one draws (PlotNumbersScreen).

The numbers come from tui/series.py, computed from the snapshot: nothing here reads the store.
"""

from __future__ import annotations

import datetime as dt
import statistics

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Label, Sparkline, Static

from loomtui.durations import format_duration
from loomtui.text import printable
from loomtui.tui import series
from loomtui.tui.canary_panel import when
from loomtui.tui.snapshot import Snapshot

MAX_CAUSE_ROWS = 3
PROBES = 60


class MarkRow(Widget):
    """One character under each sparkline column: ✗ where a probe in that column missed."""

    DEFAULT_CSS = """
    MarkRow { height: 1; color: $error; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.marks = ""

    def show(self, marks: str) -> None:
        if marks != self.marks:
            self.marks = marks
            self.refresh()

    def render(self) -> Text:
        return Text(series.mark_row(self.marks, self.size.width), no_wrap=True)


def latency_title(lat: series.Latency) -> Text:
    out = Text(no_wrap=True, overflow="ellipsis")
    out.append("canary latency", style="bold")
    if not lat.points:
        out.append(" · no settled probe yet", style="dim")
        return out
    acked = [p.latency for p in lat.points if p.result == "ok" and p.latency is not None]
    out.append(f" · last {len(lat.points)} probes", style="dim")
    if acked:
        out.append(f" · now {acked[-1]:.2f}s · median {statistics.median(acked):.2f}s")
    out.append(f" · {lat.misses} missed", style="bold red" if lat.misses else "green")
    return out


def relaunch_title(by_cause: dict[str, list[int]]) -> Text:
    out = Text(no_wrap=True, overflow="ellipsis")
    out.append("relaunches per hour, last 24h", style="bold")
    total = sum(sum(v) for v in by_cause.values())
    out.append(f" · {total}", style="bold yellow" if total else "green")
    if total:
        out.append(" (" + ", ".join(f"{printable(cause)} {sum(v)}" for cause, v in by_cause.items()) + ")")
    return out


def queue_title(ages: list[float], unread: str = "") -> Text:
    out = Text(no_wrap=True, overflow="ellipsis")
    out.append("oldest waiting queue item, last 24h", style="bold")
    if unread:  # nothing to plot is not "nothing waits"
        out.append(" · not read: " + printable(unread), style="bold red")
        return out
    now = ages[-1] if ages else 0.0
    out.append(f" · now {format_duration(now)}" if now else " · nothing waits", style="bold red" if now else "green")
    if ages and max(ages) > now:
        out.append(f" · peak {format_duration(max(ages))}", style="dim")
    return out


class PlotsPanel(Widget):
    """The three plots, stacked; `show(snapshot)` redraws them."""

    DEFAULT_CSS = """
    PlotsPanel { height: auto; layout: vertical; }
    PlotsPanel .plot-title { height: 1; }
    PlotsPanel Sparkline { height: 1; width: 1fr; }
    PlotsPanel #relaunch-rows { height: auto; }
    PlotsPanel .cause-row { height: 1; }
    PlotsPanel .cause-label { width: 16; color: $text-muted; }
    PlotsPanel #latency-spark > .sparkline--min-color { color: $success; }
    PlotsPanel #latency-spark > .sparkline--max-color { color: $error; }
    PlotsPanel .relaunch-spark > .sparkline--min-color { color: $primary 30%; }
    PlotsPanel .relaunch-spark > .sparkline--max-color { color: $warning; }
    PlotsPanel #queue-spark > .sparkline--min-color { color: $success; }
    PlotsPanel #queue-spark > .sparkline--max-color { color: $error; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._causes: tuple[str, ...] | None = None

    def compose(self) -> ComposeResult:
        yield Static(Text("canary latency", style="bold"), id="latency-title", classes="plot-title", markup=False)
        yield Sparkline([], id="latency-spark")
        yield MarkRow(id="latency-marks")
        yield Static(Text("relaunches per hour", style="bold"), id="relaunch-title", classes="plot-title",
                     markup=False)
        yield Vertical(id="relaunch-rows")
        yield Static(Text("oldest waiting queue item", style="bold"), id="queue-title", classes="plot-title",
                     markup=False)
        yield Sparkline([], id="queue-spark")

    def show(self, snap: Snapshot) -> None:
        lat = series.latency(snap.canary, PROBES)
        self.query_one("#latency-title", Static).update(latency_title(lat))
        # Sparkline draws a single value as a full-width wall in its top colour: one probe is drawn
        # as two equal ones, a flat line.
        twice = 2 if len(lat.values) == 1 else 1
        self.query_one("#latency-spark", Sparkline).data = lat.values * twice
        self.query_one("#latency-marks", MarkRow).show(lat.marks * twice)

        by_cause = series.relaunches_by_hour(snap.overview.relaunches, snap.taken)
        self.query_one("#relaunch-title", Static).update(relaunch_title(by_cause))
        rows = list(by_cause.items())[:MAX_CAUSE_ROWS] or [("none", [0] * series.DAY_HOURS)]
        causes = tuple(cause for cause, _ in rows)
        holder = self.query_one("#relaunch-rows", Vertical)
        if causes != self._causes:
            self._causes = causes
            holder.remove_children()
            holder.mount_all(Horizontal(Label(Text(printable(cause), no_wrap=True, overflow="ellipsis"),
                                              classes="cause-label"),
                                        Sparkline(values, classes="relaunch-spark"), classes="cause-row")
                             for cause, values in rows)
        else:
            for spark, (_, values) in zip(holder.query(".relaunch-spark").results(Sparkline), rows):
                spark.data = values

        ages = series.oldest_waiting(snap.overview.queue_spans, snap.taken)
        self.query_one("#queue-title", Static).update(queue_title(ages, snap.unread.get("queue", "")))
        self.query_one("#queue-spark", Sparkline).data = ages


def hour_label(start: float) -> str:
    return dt.datetime.fromtimestamp(start).strftime("%m-%d %H:%M")


def numbers(snap: Snapshot) -> list[tuple[Text, Table]]:
    """The numbers behind each plot, as (title, table) pairs; every cell is Text, never markup."""
    lat = series.latency(snap.canary, PROBES)
    probes = Table(box=None, padding=(0, 2), show_edge=False)
    for name in ("sent", "result", "latency", "plotted as"):
        probes.add_column(name, no_wrap=True)
    for point, value in reversed(list(zip(lat.points, lat.values))):
        probes.add_row(Text(when(point.sent_at)), Text(point.result, style="bold red" if point.result == "miss" else ""),
                       Text(f"{point.latency:.2f}s" if point.latency is not None else "—"), Text(f"{value:.2f}s" + ("" if point.result == "ok" else " (top)")))

    by_cause = series.relaunches_by_hour(snap.overview.relaunches, snap.taken)
    relaunches = Table(box=None, padding=(0, 2), show_edge=False)
    relaunches.add_column("hour from", no_wrap=True)
    for cause in by_cause:
        relaunches.add_column(Text(cause), justify="right", no_wrap=True)
    relaunches.add_column("total", justify="right", no_wrap=True)
    starts = series.hour_starts(snap.taken)
    for i in reversed(range(len(starts))):
        counts = [values[i] for values in by_cause.values()]
        relaunches.add_row(Text(hour_label(starts[i])), *(Text(str(c) if c else "·") for c in counts),
                           Text(str(sum(counts)) if sum(counts) else "·"))

    ages = series.oldest_waiting(snap.overview.queue_spans, snap.taken)
    queue = Table(box=None, padding=(0, 2), show_edge=False)
    queue.add_column("at", no_wrap=True)
    queue.add_column("oldest waiting item's age", justify="right", no_wrap=True)
    for start, age in reversed(list(zip(starts, ages))):
        queue.add_row(Text(hour_label(start + series.HOUR)), Text(format_duration(age) if age else "nothing waited"))
    return [(latency_title(lat), probes), (relaunch_title(by_cause), relaunches), (queue_title(ages), queue)]


class PlotNumbersScreen(ModalScreen[None]):
    """Each plot above the numbers it draws, newest first."""

    BINDINGS = [Binding("escape,q,p", "close", "Close", id="plots.close")]

    def __init__(self, snap: Snapshot) -> None:
        super().__init__()
        self.snap = snap

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide-dialog", id="plot-numbers"):
            yield Label("The plots and their numbers", classes="dialog-title")
            with VerticalScroll():
                yield PlotsPanel(id="numbers-plots")
                for title, table in numbers(self.snap):
                    yield Static(title, classes="numbers-title", markup=False)
                    yield Static(table, markup=False)
            yield Static(Text("Esc to close", style="dim"), markup=False)

    def on_mount(self) -> None:
        self.query_one(PlotsPanel).show(self.snap)

    def action_close(self) -> None:
        self.dismiss(None)
