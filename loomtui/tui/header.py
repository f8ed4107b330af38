"""The header: agent state, pinned session, last canary, supervisor heartbeat, open queue items."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from loomtui.tui.snapshot import Header

LEVELS = {"ok": "bold green", "warn": "bold yellow", "bad": "bold red"}


def render_header(h: Header) -> Text:
    # Two lines that never wrap (a long state is cut, not pushed onto a third line).
    out = Text(no_wrap=True, overflow="ellipsis")
    out.append("agent ", style="dim")
    out.append(h.agent, style=LEVELS.get(h.agent_level, ""))
    out.append("  session ", style="dim")
    out.append((h.pinned or "none")[:8])
    if h.unsent:
        # Alerts and escalations wait in the outbox when Telegram is off or failing: say so here.
        out.append(f"  {h.unsent} message{'s' if h.unsent != 1 else ''} for you unsent (loom status)",
                   style="bold yellow")
    out.append("\n")
    if h.supervisor_level == "bad" and h.supervisor.startswith("store unavailable"):
        out.append(h.supervisor, style=LEVELS["bad"])  # the reason first, before the line is cut
        return out
    out.append("canary ", style="dim")
    out.append(h.canary, style=LEVELS.get(h.canary_level, ""))
    out.append("  queue ", style="dim")
    out.append(f"{h.open_items} open", style="bold red" if h.open_items else "green")
    out.append("  supervisor ", style="dim")
    out.append(h.supervisor, style=LEVELS.get(h.supervisor_level, ""))
    return out


class StatusHeader(Static):
    DEFAULT_CSS = """
    StatusHeader { height: 2; padding: 0 1; background: $boost; }
    """

    def show(self, header: Header) -> None:
        self.update(render_header(header))
