"""The sentinel queue: open, claimed and witnessed items kept apart."""

from __future__ import annotations

import re
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import Static

from loomtui.text import for_terminal, printable
from loomtui.tui.canary_panel import when
from loomtui.tui.tables import KeyedTable, safe

STATE_STYLES = {"open": "bold red", "claimed": "yellow", "witnessed": "green"}
# `loom run-job` stamps every line it logs (jobrun.stamp: ISO 8601, milliseconds, the offset); a
# sample starting with one would fill a narrow `line` cell with the stamp and never the text.
STAMP = re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?(?:Z|[+-]\d\d:?\d\d)?\s+")


def log_text(sample: str) -> str:
    """The log line without its leading timestamp (the item's `seen` column says when): the
    text the cell has room for. The detail below the table shows the line whole."""
    return STAMP.sub("", sample or "", count=1)


def seen(ts: float | None) -> str:
    return when(ts, "%m-%d %H:%M")


def rows(items: list[Any]) -> list[tuple[str, list]]:
    out = []
    for item in items:
        out.append((f"q{item.id}", [
            safe(item.id), safe(item.state, STATE_STYLES.get(item.state, "")), safe(item.job), safe(item.count),
            safe(seen(item.last_seen)), safe(log_text(item.sample)),
        ]))
    return out


def describe(item: Any) -> Text:
    out = Text()
    out.append(f"#{item.id} {item.state}", style=STATE_STYLES.get(item.state, ""))
    out.append(f" · job {for_terminal(item.job)} · {for_terminal(item.kind)} · seen {item.count}× · "
               f"nudged {item.nudges}×")
    if item.escalated_at:
        out.append(" · sent to the operator", style="magenta")
    out.append("\n")
    out.append(safe(item.sample))
    if item.note:
        out.append("\nnote: ", style="bold")
        out.append(safe(item.note))
        if item.claimed_by:
            who = item.claimed_by + (" " + item.claimed_session if item.claimed_session else "")
            out.append(f" (claimed by {for_terminal(who)})", style="dim")
    return out


class QueuePanel(Widget):
    DEFAULT_CSS = """
    QueuePanel { height: 1fr; }
    QueuePanel #queue-detail { height: auto; max-height: 6; border-top: solid $primary; padding: 0 1; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._items: dict[str, Any] = {}
        self.unread = ""  # why the queue could not be read ("": it was)

    def compose(self) -> ComposeResult:
        with Vertical():
            # The kind and the nudges are in the detail below: at 80 columns the line keeps room to show.
            yield KeyedTable([("id", "#", 3), ("state", "state", 9), ("job", "job", 12), ("count", "×", 3),
                              ("last", "seen", 11), ("sample", "line", None)], stretch="sample", id="queue-table")
            yield Static(Text("no item selected", style="dim"), id="queue-detail", markup=False)

    def show(self, items: list[Any], unread: str = "") -> None:
        self._items = {f"q{i.id}": i for i in items}
        self.unread = unread
        table = self.query_one(KeyedTable)
        table.sync(rows(items))
        self._detail(table.selected_key)

    def on_data_table_row_highlighted(self, event: KeyedTable.RowHighlighted) -> None:
        self._detail(event.row_key.value if event.row_key else None)

    def _detail(self, key: str | None) -> None:
        item = self._items.get(key or "")
        if item is not None:
            shown = describe(item)
        elif self.unread:  # not an empty queue: one nobody could read
            shown = Text(printable(f"the queue could not be read: {self.unread}"), style="bold red")
        else:
            shown = Text("the queue is empty", style="dim")
        self.query_one("#queue-detail", Static).update(shown)

    @property
    def selected(self) -> Any | None:
        return self._items.get(self.query_one(KeyedTable).selected_key or "")
