"""The console's notifications as lines above the footer, in the layout: the panels above make room
for them, so a notice never covers the agent's pane (Textual's toasts float over the bottom right,
where the pane's newest lines are, at 80 columns and beside the overview alike).

Every notification still goes through App.notify (its record, and a toast on any dialog on top);
the console screen hides its own toasts and shows them here instead, each for its timeout."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import on
from textual.message import Message
from textual.widgets import Static

from loomtui.text import printable

STYLES = {"information": "bold", "warning": "bold yellow", "error": "bold red"}
KEPT = 3  # the newest notices shown at once (older ones go first)
ROWS = 6  # the bar's height at most (its max-height): what is shown fits it


class NoticeBar(Static):
    DEFAULT_CSS = """
    NoticeBar { height: auto; max-height: 6; padding: 0 1; background: $panel; display: none; }  /* ROWS */
    """

    @dataclass
    class Notice(Message):
        """Posted from any thread (App.notify is thread-safe, so is posting a message)."""

        title: str
        text: str
        severity: str
        timeout: float

    def __init__(self, **kwargs) -> None:
        super().__init__(Text(""), markup=False, **kwargs)
        self._count = 0
        self.shown: list[tuple[int, Text]] = []

    @on(Notice)
    def _notice(self, message: Notice) -> None:
        message.stop()
        self._count += 1
        n = self._count
        # Anyone's words may be in a notice (a hold's reason, tmux's error): shown, never markup.
        line = Text(no_wrap=False, overflow="fold")
        if message.title:
            line.append(printable(message.title) + ": ", style=STYLES.get(message.severity, "bold"))
        line.append(printable(message.text))
        self.shown = [*self.shown, (n, line)][-KEPT:]
        self._draw()
        self.set_timer(max(message.timeout, 0.5), lambda: self._expire(n))

    def _expire(self, n: int) -> None:
        self.shown = [(k, line) for k, line in self.shown if k != n]
        self._draw()

    def _draw(self) -> None:
        """The newest notices that fit the bar's rows once wrapped, oldest of them first: the bar
        clips at its bottom, where the newest goes, so three long ones hid the newest (an action's
        outcome, as often as not)."""
        self.display = bool(self.shown)
        width = max((self.content_size.width or self.app.size.width - 2), 10)
        kept: list[Text] = []
        used = 0
        for _, line in reversed(self.shown):
            rows = len(line.wrap(self.app.console, width))
            if kept and used + rows > ROWS:
                break
            kept.append(line)
            used += rows
        self.update(Text("\n").join(reversed(kept)))

    @property
    def text(self) -> str:
        return "\n".join(line.plain for _, line in self.shown)
