"""Modal screens: recycle choice, one-line prompts, details, help."""

from __future__ import annotations

from collections.abc import Callable

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, Input, Label, Static

from loomtui.text import printable
from loomtui.tui.tables import shown


class RecycleScreen(ModalScreen[str | None]):
    """Resume, fresh or cancel. A held or double-tapped `r` confirms nothing, by construction and
    not by timing: the choice keys (`1`, `2`) differ from the key that opens the dialog, a second
    `r` opens no second dialog (the console's keys belong to the console screen, which is not the
    active screen while a dialog is open), and the focused button is Cancel, so Enter cancels."""

    BINDINGS = [
        Binding("1", "choose('resume')", "Resume", id="recycle.resume"),
        Binding("2", "choose('fresh')", "Fresh", id="recycle.fresh"),
        Binding("escape", "choose(None)", "Cancel", id="recycle.cancel"),
    ]

    def __init__(self, agent: str = "") -> None:
        super().__init__()
        self.agent = agent  # named when there are several: the dialog says which one it relaunches

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(Text(f"Relaunch agent {self.agent}?" if self.agent else "Relaunch the agent?"),
                        classes="dialog-title")
            yield Static(Text("Resume keeps the pinned conversation; fresh starts a new session.\n"
                              "Either clears a hold at the ceiling."), markup=False)
            with Horizontal(classes="dialog-buttons"):
                yield Button(Text("Resume (1)"), id="resume", variant="primary")
                yield Button(Text("Fresh (2)"), id="fresh", variant="warning")
                yield Button(Text("Cancel (esc)"), id="cancel")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None if event.button.id == "cancel" else event.button.id)

    def action_choose(self, choice: str | None) -> None:
        self.dismiss(choice)


HINT = "Enter to confirm · Esc to cancel"
# The most of a prompt's title shown: five lines of the dialog at 80 columns. A hold's reason is
# anyone's words and may run to pages (the agent's own, a Telegram user's): shown whole, it pushed
# the answer's box below the screen, and the operator typed `release` blind.
TITLE_MAX = 320


def clipped(text: str, limit: int = TITLE_MAX) -> str:
    """`text` cut in its middle to `limit` characters: the question a title ends with stays."""
    if len(text) <= limit:
        return text
    tail = limit // 3
    return text[:limit - tail - 1] + "…" + text[-tail:]


class PromptScreen(ModalScreen[str | None]):
    """One line asked for. The title wraps (at 80 columns the question is read whole); Enter on
    an answer the caller cannot act on keeps the dialog open and says what is needed instead
    (`needs`: the answer -> "" when it will do, else the sentence; empty answers are refused by
    default with `empty`'s sentence)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="prompt.cancel")]

    def __init__(self, title: str, placeholder: str = "", value: str = "", allow_empty: bool = False,
                 *, empty: str = "type something first, or Esc to cancel",
                 needs: Callable[[str], str] | None = None) -> None:
        super().__init__()
        self.title_text = title
        self.placeholder = placeholder
        self.value = value
        self.allow_empty = allow_empty
        self.empty = empty
        self.needs = needs

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(Text(clipped(printable(self.title_text))), classes="dialog-title", id="prompt-title",
                         markup=False)
            yield Input(value=self.value, placeholder=self.placeholder, id="prompt-input")
            yield Static(Text(HINT, style="dim"), id="prompt-hint", markup=False)

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        missing = self.empty if not event.value.strip() and not self.allow_empty else ""
        if not missing and self.needs is not None:
            missing = self.needs(event.value)
        if missing:
            self.query_one("#prompt-hint", Static).update(Text(printable(missing), style="bold yellow"))
            return
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class DetailScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,enter", "close", "Close", id="detail.close")]

    def __init__(self, title: str, body: Text) -> None:
        super().__init__()
        self.title_text = title
        self.body = body

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide-dialog"):
            yield Label(Text(printable(self.title_text)), classes="dialog-title")
            with VerticalScroll():
                yield Static(shown(self.body), markup=False)
            yield Static(Text("Esc to close", style="dim"), markup=False)

    def action_close(self) -> None:
        self.dismiss(None)


def open_detail(widget: Widget, title: str, body: Text) -> None:
    """A worker's result as a DetailScreen over `widget`'s screen, if that is still the one in use.
    Another screen came up meanwhile (a prompt being typed into): a dialog over it would take its
    keys, so it is said instead, and asked for again from where it came."""
    if widget.screen is not widget.app.screen:
        widget.notify(printable(f"{title}: not opened over the screen in use"), markup=False)
        return
    widget.app.push_screen(DetailScreen(title, body))


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close", id="help.close")]

    def __init__(self, rows: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self.rows = rows

    def compose(self) -> ComposeResult:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold", no_wrap=True, justify="right")
        table.add_column(style="cyan", no_wrap=True)
        table.add_column()
        for key, title, tooltip in self.rows:
            table.add_row(Text(key), Text(title), Text(tooltip))
        with Vertical(classes="dialog wide-dialog"):
            yield Label("Keys", classes="dialog-title")
            with VerticalScroll():
                yield Static(table)
            yield Static(Text("Ctrl+P opens the command palette with the same actions · Esc closes", style="dim"),
                         markup=False)

    def action_close(self) -> None:
        self.dismiss(None)
