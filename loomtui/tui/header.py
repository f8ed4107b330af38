"""The summary above the tabs: agent state, supervisor heartbeat, the canary and the last ack,
open and claimed queue items, the hold and the last incident, three lines at any width; a fourth,
the turn as the agent's hooks tell it, where hooks are configured."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from rich.text import Text
from textual.widgets import Static

from loomtui.text import printable
from loomtui.tui.snapshot import Header

LEVELS = {"ok": "bold green", "warn": "bold yellow", "bad": "bold red"}


def shown(h: Header) -> Header:
    """Every text of the header as the terminal may show it: the hold's reason is anyone's words
    (CLI, console, Telegram, the agent), the store's error and tmux's are not ours either."""
    texts: dict[str, Any] = {f.name: printable(value) for f in fields(h)
                             if isinstance(value := getattr(h, f.name), str)}
    return replace(h, **texts)


BEAT_WIDTH = 22  # the longest heartbeat phrase ("STALE: beat 23h59m ago"): line 1 keeps its width as it ages


def render_header(h: Header) -> Text:
    """Three lines that never wrap, laid out for 80 columns: what matters first on each line,
    whole (the session's 8 characters, the heartbeat in a field of its own fixed width, the
    last incident's status and age); what may be cut is at a line's end (an incident's title,
    a hold's reason), and the full words are a key away (`loom status`, the timeline)."""
    # The state text comes from the store and the pane's facts, never from the pane's text, but
    # stays Text anyway.
    h = shown(h)
    out = Text(no_wrap=True, overflow="ellipsis")
    out.append("agent ", style="dim")
    if h.name:
        # Several agents: which one every panel and key is about, before anything else.
        out.append(f" {h.name} ", style="bold reverse")
        out.append(" ")
    # Held: the third line says who holds, why and for how long.
    out.append("HELD" if h.held else h.agent, style=LEVELS.get(h.agent_level, ""))
    out.append("  session ", style="dim")
    out.append((h.pinned or "none")[:8])
    if h.supervisor_level == "bad" and h.supervisor.startswith("store unavailable"):
        out.append("\n")
        out.append(h.supervisor, style=LEVELS["bad"])  # the reason first, before the line is cut
        return out
    out.append("  supervisor ", style="dim")
    out.append(h.supervisor[:BEAT_WIDTH].ljust(BEAT_WIDTH), style=LEVELS.get(h.supervisor_level, ""))
    out.append("\n")
    out.append("canary ", style="dim")
    out.append(h.canary, style=LEVELS.get(h.canary_level, ""))
    if h.canary_level != "ok":
        # The last probe was not an ack: when did the agent last hear?
        out.append("  last ack ", style="dim")
        out.append(h.last_ack or "never", style=LEVELS.get(h.last_ack_level, ""))
    out.append("  queue ", style="dim")
    out.append(f"{h.queue_open} open", style="bold red" if h.queue_open else "green")
    out.append(" · ", style="dim")
    out.append(f"{h.queue_claimed} claimed", style="bold yellow" if h.queue_claimed else "green")
    if h.unsent:
        # Alerts and escalations wait in the outbox when Telegram is off or failing: say so here.
        out.append(f"  {h.unsent} unsent (loom status)", style="bold yellow")
    if h.claim:
        out.append("  " + h.claim, style="bold yellow")
    out.append("\n")
    out.append("hold ", style="dim")
    out.append(h.hold or "none", style=LEVELS["bad"] if h.hold else "green")
    out.append("  last incident ", style="dim")
    out.append(h.incident or "none lately", style=LEVELS.get(h.incident_level, ""))
    if h.turn:
        # The hooks' (or the pump's) word on the turn, as `loom status` says it: the state first and
        # whole, the last hook and its age (or the pump as the source) after it (cut first at 80 columns; a permission prompt's own words,
        # which may be long, are the prompt on the Agent tab too).
        state, _, hook = h.turn.rpartition("; ")
        out.append("\n")
        out.append("turn ", style="dim")
        out.append(state or hook, style=LEVELS.get(h.turn_level, ""))
        if state:
            out.append("  " + hook, style="dim")
    return out


def height(h: Header) -> int:
    """The header's lines: three, and the turn's where the agent's hooks or its pump tell it."""
    return 4 if h.turn else 3


class StatusHeader(Static):
    DEFAULT_CSS = """
    StatusHeader { height: 3; padding: 0 1; background: $boost; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def show(self, header: Header) -> None:
        self.styles.height = height(header)
        self.update(render_header(header))

    def show_loading(self, name: str) -> None:
        out = Text(no_wrap=True, overflow="ellipsis")
        out.append("agent ", style="dim")
        out.append(f" {printable(name)} ", style="bold reverse")
        out.append(" loading…", style="dim")
        self.update(out)
