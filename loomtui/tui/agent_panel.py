"""The agent's pane, as tmux shows it (ANSI colours kept, never parsed as markup), or with the
stream-json driver the conversation itself, from the pump's transcript."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Static

from loomtui.text import printable
from loomtui.tui import transcript_view
from loomtui.tui.snapshot import REMOTE, SCROLLBACK, PaneView
from loomtui.tui.tables import shown

MAX_LINES = SCROLLBACK + 200  # the scrollback and a tall screen


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
    if view.state == REMOTE:  # another host's agent: where its pane is, and what could not be read
        return Text(printable(view.why), style="italic")
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


class PaneScroll(VerticalScroll, can_focus=True):
    """The pane's text, scrolled with the keys as with the wheel; it follows new output only while
    it is at the end (scrolled back, a refresh keeps the place)."""

    BINDINGS = [
        Binding("up", "scroll_up", "Scroll up", id="pane.up", show=False),
        Binding("down", "scroll_down", "Scroll down", id="pane.down", show=False),
        Binding("pageup", "page_up", "Page up", id="pane.page_up", show=False),
        Binding("pagedown", "page_down", "Page down", id="pane.page_down", show=False),
        Binding("home", "scroll_home", "Top of the scrollback", id="pane.home", show=False),
        Binding("end", "scroll_end", "End (follow new output)", id="pane.end", show=False),
    ]

    following = True  # at the end: new output scrolls into view; a key that scrolls back stops it, End resumes

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        self.following = new >= self.max_scroll_y

    def watch_virtual_size(self, size: object) -> None:
        # After the layout measured the new text (a scroll_end asked for earlier may see the old size).
        if self.following:
            self.scroll_end(animate=False, immediate=True)

    def on_resize(self) -> None:
        # Shorter (a notice took a line above the footer): the newest lines stay in view.
        if self.following:
            self.scroll_end(animate=False, immediate=True)


class AgentPanel(Widget):
    DEFAULT_CSS = """
    AgentPanel { height: 1fr; }
    AgentPanel PaneScroll { height: 1fr; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._last: PaneView | None = None

    def compose(self) -> ComposeResult:
        with PaneScroll():
            yield Static(Text("loading…", style="dim"), id="pane-text", markup=False)

    def show(self, view: PaneView) -> None:
        if view == self._last:
            return
        self._last = view
        self.query_one("#pane-text", Static).update(render_pane(view))
