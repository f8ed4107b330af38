"""Canary history: every probe, newest first, with its latency and why (wrapped, never cut)."""

from __future__ import annotations

import datetime as dt

from textual.app import ComposeResult
from textual.widget import Widget

from loomtui.canary import runs as canary
from loomtui.canary.runs import Probe
from loomtui.durations import format_duration
from loomtui.tui.tables import KeyedTable, safe

STYLES = {"ok": "green", "miss": "bold red", "pending": "cyan", "error": "magenta", "inject_failed": "yellow",
          "skipped": "dim"}


def when(ts: float | None, fmt: str = "%m-%d %H:%M:%S") -> str:
    """A moment in the local zone; "?" for one no datetime holds (another host's may be anything)."""
    if not ts:
        return ""
    try:
        return dt.datetime.fromtimestamp(ts).strftime(fmt)
    except (OverflowError, OSError, ValueError):
        return "?"


def why(p: Probe) -> str:
    """The run's own why (a late ack, a skip, an error, a queued line), or, where the prober had
    nothing to add, what its result says: how long a miss waited, until when a probe still waits."""
    if p.why:
        return p.why
    if p.result == canary.OK and p.ack_at is not None:
        return f"acked at {when(p.ack_at)[6:]}"
    if p.result == canary.MISS:
        return f"no ack within {format_duration(max(p.deadline - p.sent_at, 0))}"
    if p.result == canary.PENDING:
        return f"waiting for its ack until {when(p.deadline)[6:]}"
    return ""


def rows(probes: list[Probe]) -> list[tuple[str, list]]:
    out = []
    for p in probes:
        latency = f"{p.latency:.2f}s" if p.latency is not None else ""
        out.append((f"c{p.id}", [safe(p.id), safe(when(p.sent_at)), safe(p.result, STYLES.get(p.result, "")),
                                 safe(latency), safe(p.source), safe(why(p))]))
    return out


class CanaryPanel(Widget):
    DEFAULT_CSS = "CanaryPanel { height: 1fr; }"

    def compose(self) -> ComposeResult:
        yield KeyedTable([("id", "#", 5), ("sent", "sent", 14), ("result", "result", 13), ("latency", "latency", 8),
                          ("source", "by", 8), ("why", "why", None)], stretch="why", wrap=True,
                         id="canary-table")

    def show(self, probes: list[Probe]) -> None:
        self.query_one(KeyedTable).sync(rows(probes))
