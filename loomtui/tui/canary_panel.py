"""Canary history: every probe, newest first, with its latency and why."""

from __future__ import annotations

import datetime as dt

from textual.app import ComposeResult
from textual.widget import Widget

from loomtui.canary.runs import Probe
from loomtui.tui.tables import KeyedTable, safe

STYLES = {"ok": "green", "miss": "bold red", "pending": "cyan", "error": "magenta", "inject_failed": "yellow",
          "skipped": "dim"}


def when(ts: float | None) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%m-%d %H:%M:%S") if ts else ""


def rows(probes: list[Probe]) -> list[tuple[str, list]]:
    out = []
    for p in probes:
        latency = f"{p.latency:.2f}s" if p.latency is not None else ""
        out.append((f"c{p.id}", [safe(p.id), safe(when(p.sent_at)), safe(p.result, STYLES.get(p.result, "")),
                                 safe(latency), safe(p.source), safe(p.why)]))
    return out


class CanaryPanel(Widget):
    DEFAULT_CSS = "CanaryPanel { height: 1fr; }"

    def compose(self) -> ComposeResult:
        yield KeyedTable([("id", "#", 5), ("sent", "sent", 14), ("result", "result", 13), ("latency", "latency", 8),
                          ("source", "by", 8), ("why", "why", None)], stretch="why",
                         id="canary-table")

    def show(self, probes: list[Probe]) -> None:
        self.query_one(KeyedTable).sync(rows(probes))
