"""The agent's pane, as tmux shows it (ANSI colours kept, never parsed as markup), or with the
stream-json driver the conversation itself, from the pump's transcript."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Static

from loomtui.text import printable
from loomtui.tui import transcript_view
from loomtui.tui.snapshot import PaneView
from loomtui.tui.tables import shown

MAX_LINES = 400


def last_words(view: PaneView) -> Text:
    """Why the agent died and the last lines its pane printed, as text (never markup)."""
    out = Text()
    if view.died:
        out.append(f"\n\n{printable(view.died)}; the last lines it printed:", style="bold red")
        for line in view.last_words:
            out.append("\n  ")
            out.append(printable(line))
    return out


def render_pane(view: PaneView) -> Text:
    if view.conversation is not None:
        body = transcript_view.render(list(view.conversation))
        if view.state in ("gone", "unknown"):
            body.append(f"\n\n— no agent pane: {printable(view.why or view.state)} —", style="yellow")
            return body.append_text(last_words(view))
    elif view.state in ("gone", "unknown") and not view.text:
        return Text(f"no agent pane: {printable(view.why or view.state)}", style="italic").append_text(last_words(view))
    else:
        lines = view.text.splitlines()[-MAX_LINES:]
        while lines and not lines[-1].strip():
            lines.pop()
        # Its colours kept: from_ansi keeps SGR as styles; whatever else is left (a C1 CSI, an
        # unterminated sequence) is shown as a symbol.
        body = shown(Text.from_ansi("\n".join(lines))) if lines else Text("(empty screen)", style="dim")
    if view.state == "dead":
        # The exit status is the driver's ("the pane's process exited (status 127)").
        ended = printable(view.why) if view.why else "the agent's process has exited"
        body.append(f"\n\n— {ended} —", style="bold red")
        body.append_text(last_words(view))
    elif view.why:
        body.append(f"\n\n— {printable(view.why)} —", style="yellow")
    return body


class AgentPanel(Widget):
    DEFAULT_CSS = """
    AgentPanel { height: 1fr; }
    AgentPanel VerticalScroll { height: 1fr; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._last: PaneView | None = None

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text("loading…", style="dim"), id="pane-text", markup=False)

    def show(self, view: PaneView) -> None:
        if view == self._last:
            return
        self._last = view
        self.query_one("#pane-text", Static).update(render_pane(view))
        self.query_one(VerticalScroll).scroll_end(animate=False)
