"""The header: agent state, pinned session, last canary, supervisor heartbeat, open queue items."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from .snapshot import Header

LEVELS = {"ok": "bold green", "warn": "bold yellow", "bad": "bold red"}


def render_header(h: Header, store_error: str = "") -> Text:
    out = Text(no_wrap=False)
    out.append("agent ", style="dim")
    out.append(h.agent, style=LEVELS.get(h.agent_level, ""))
    out.append("  session ", style="dim")
    out.append((h.pinned or "none")[:8])
    out.append("  canary ", style="dim")
    out.append(h.canary, style=LEVELS.get(h.canary_level, ""))
    out.append("\n")
    out.append("supervisor ", style="dim")
    out.append(h.supervisor, style=LEVELS.get(h.supervisor_level, ""))
    out.append("  queue ", style="dim")
    out.append(f"{h.open_items} open", style="bold red" if h.open_items else "green")
    if store_error:
        out.append("  store ", style="dim")
        out.append("unavailable", style="bold red")
    return out


class StatusHeader(Static):
    DEFAULT_CSS = """
    StatusHeader { height: auto; max-height: 3; padding: 0 1; background: $boost; }
    """

    def show(self, header: Header, store_error: str = "") -> None:
        self.update(render_header(header, store_error))
