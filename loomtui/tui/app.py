"""`loom-tui`'s application: the context, the stylesheet and the console screen it shows.

The keys and panels live on the console screen (tui/console_screen.py); the command line that
starts the app lives in tui/main.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from importlib.resources import files

from textual.app import App, SystemCommand
from textual.notifications import SeverityLevel
from textual.screen import Screen

from loomtui.context import Context
from loomtui.tui.console_screen import ConsoleScreen
from loomtui.tui.keymap import APP_KEYS, described
from loomtui.tui.notice_bar import NoticeBar
from loomtui.tui.snapshot import Snapshot, Source

REFRESH_EVERY = 1.5


def stylesheet() -> str:
    return str(files("loomtui.styles").joinpath("loom.tcss"))


class LoomApp(App):
    TITLE = "Loom"
    CSS_PATH = stylesheet()
    ENABLE_COMMAND_PALETTE = True

    def __init__(self, ctx: Context, *, now: Callable[[], float] = time.time, refresh_every: float = REFRESH_EVERY,
                 watch: bool = True) -> None:
        super().__init__()
        self.ctx = ctx
        # One Context per agent, made here (before the app runs, so no handler makes a directory).
        agents = {name: ctx if name == ctx.agent else ctx.for_agent(name) for name in ctx.config.agent_names}
        self.source = Source(ctx, several=len(agents) > 1)
        self.now = now
        self.console_screen = ConsoleScreen(ctx, self.source, refresh_every=refresh_every, watch=watch, now=now,
                                            agents=agents)
        # Set as the console closes: a probe under way stops waiting for its ack (the daemon's canary
        # settles it). Its thread kept the process alive for up to the ack timeout after `q`, the
        # screen restored and no prompt back: a console that looked hung.
        self.leaving = threading.Event()

    def exit(self, *args, **kwargs) -> None:
        self.leaving.set()
        super().exit(*args, **kwargs)

    def on_unmount(self) -> None:
        self.leaving.set()

    @property
    def snapshot(self) -> Snapshot | None:
        """The last snapshot the console showed (None before the first)."""
        return self.console_screen.snapshot

    @property
    def outcomes(self) -> list[tuple[str, str, bool]]:
        """Every action's outcome as (action, text, ok), in the order they were shown."""
        return self.console_screen.outcomes

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        """Recorded and toasted as Textual does (a dialog on top shows it), and a line of the
        console's notice bar, which takes room instead of covering the agent's pane."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)
        self.console_screen.notices.post_message(NoticeBar.Notice(
            str(title), str(message), severity, self.NOTIFICATION_TIMEOUT if timeout is None else timeout))

    def get_default_screen(self) -> Screen:
        return self.console_screen

    def on_mount(self) -> None:
        self.title = "Loom"
        self.sub_title = str(self.ctx.state_dir)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if screen is not self.console_screen:
            # Over a dialog or a view, the console's actions wait, as its keys do: the palette ran
            # them on the console's agent beneath a view whose cursor was on another.
            return
        for binding in APP_KEYS:
            if binding.action == "app.quit" or not self.console_screen.shows_action(binding.action):
                continue
            yield SystemCommand(*described(binding, self.console_screen.wide),
                                lambda action=binding.action: self.run_action(action, self.console_screen))
