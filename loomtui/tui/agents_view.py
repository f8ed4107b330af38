"""The agents view (k9s-like): one row per agent, its state, last canary, relaunches in the last
hour, open queue items and hold. Enter selects the highlighted agent for the whole console; Esc
goes back to the agent selected before.

Each agent's row comes from the single-agent status model (`report.status.gather`) on that
agent's own Context, in a worker thread; one agent's failure is that row's text, not the view's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from loomtui.agent import hold_rules, lifecycle
from loomtui.timing import Instant
from loomtui.canary import runs as canary
from loomtui.context import Context
from loomtui.durations import format_duration
from loomtui.report import status as status_mod
from loomtui.text import printable
from loomtui.tui import hold_words
from loomtui.tui.footer import FittingFooter
from loomtui.tui.tables import KeyedTable, safe

LEVELS = {"ok": "green", "warn": "bold yellow", "bad": "bold red"}


@dataclass(frozen=True)
class AgentRow:
    name: str
    state: str
    state_level: str = "warn"
    canary: str = ""
    canary_level: str = "warn"
    relaunches: int = 0      # in the last hour
    open_items: int = 0
    hold: str = ""           # "" when nothing holds it
    why: str = ""            # why the agent could not be read ("" when it was): the wide column's, not a hold


# The view's words for each state, and how bad it is. No hold here: the hold has its own column,
# so the state said is the one beneath it.
STATE_CELLS: dict[str, tuple[str, str]] = {
    lifecycle.NOT_LOOKED: ("tmux unknown", "warn"), lifecycle.UNKNOWN: ("tmux unknown", "warn"),
    lifecycle.GONE: ("no tmux session", "bad"), lifecycle.EXITED: ("exited", "bad"),
    # Each within the state column's 15 at 80 columns: "agent process …" cut both to one word.
    lifecycle.NO_PROCESS: ("process missing", "warn"),
    lifecycle.PROCESS_UNKNOWN: ("process unknown", "warn"),
    lifecycle.BOOTING: ("booting", "warn"),
    lifecycle.UNWITNESSED: ("unwitnessed", "warn"),  # relaunched, and no canary has acked since
    lifecycle.RUNNING: ("running", "ok"),
}


def state_of(status: status_mod.Status, boot_grace: float) -> tuple[str, str]:
    """One agent's state as a word or two, and how bad it is (lifecycle.agent_state, beneath any hold)."""
    return STATE_CELLS[replace(status, boot_grace=boot_grace).agent_state(with_hold=False)]


def row_from(name: str, status: status_mod.Status, relaunches: int, boot_grace: float) -> AgentRow:
    state, level = state_of(status, boot_grace)
    last = status.canary_settled
    if last is None:
        can, can_level = "no probe yet", "warn"
    else:
        can = f"{last.result} {format_duration(max(last.age, 0))} ago"
        can_level = "ok" if last.result == canary.OK else ("bad" if last.result == canary.MISS else "warn")
    if status.probing:
        can = "probing… · " + can
    return AgentRow(name, state, level, can, can_level, relaunches, status.queue.get("open", 0),
                    hold_cell(status.hold, status.moment))


def hold_cell(held: hold_rules.Hold | None, now: Instant | float) -> str:
    """Who holds, how long is left, why: the narrow column's order (the full line is the summary's
    once the agent is selected). "" when nothing holds it."""
    if held is None:
        return ""
    if not hold_rules.active(held, now):
        return ""
    plain = hold_words.cell(held, now)  # the harness's: what is wrong and what ends it
    if plain:
        return plain
    remaining = hold_rules.remaining(held, now)
    left = f" {format_duration(remaining)}" if remaining is not None else ""
    return f"{held.by}{left}: {held.reason}"


def gather_row(ctx: Context, now: float) -> AgentRow:
    try:
        status = status_mod.gather(ctx, events=0, now=now, look=True)
        return row_from(ctx.agent, status, status.relaunches_last_hour, ctx.config.agent.boot_grace)
    except Exception as exc:  # a locked store, a tmux that fails oddly: this row says so, the others load
        ctx.close()  # a broken connection is reopened on the next look
        # The reason in the wide column, said as such: in the state's 15 it was cut to "unreadable: st…".
        return AgentRow(ctx.agent, "unreadable", "bad", why=" ".join(str(exc).split()) or type(exc).__name__)


def cells(row: AgentRow) -> list[Text]:
    return [safe(row.name, "bold"), safe(row.state, LEVELS.get(row.state_level, "")),
            safe(row.canary, LEVELS.get(row.canary_level, "")),
            safe(row.relaunches or "", "bold yellow" if row.relaunches else ""),
            safe(row.open_items or "", "bold red" if row.open_items else ""),
            safe(f"not read: {row.why}", "bold red") if row.why and not row.hold
            else safe(row.hold or "none", "bold red" if row.hold else "green")]


class AgentContexts:
    """One Context per agent for the view's worker (each its own store connection), made on first
    use in the worker (a new agent's directory is made then) and closed with the view."""

    def __init__(self, ctx: Context) -> None:
        self.root = ctx
        self.names = list(ctx.config.agent_names)
        self._made: dict[str, Context] = {}
        self._lock = threading.Lock()  # a close waits for the look under way, never pulls its connection
        self._closed = False

    def get(self, name: str) -> Context:
        if name not in self._made:
            self._made[name] = self.root.for_agent(name)
        return self._made[name]

    def rows(self, now: float) -> list[AgentRow]:
        """Every agent's row, looked at side by side: a hung tmux server delays the view by its
        one bounded timeout, not by one per agent. Each thread has its agent's own connection."""
        with self._lock:
            if self._closed:
                return []
            contexts = [self.get(name) for name in self.names]
            if len(contexts) == 1:
                return [gather_row(contexts[0], now)]
            with ThreadPoolExecutor(max_workers=min(len(contexts), 8), thread_name_prefix="loom-tui-agents") as pool:
                return list(pool.map(lambda ctx: gather_row(ctx, now), contexts))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for ctx in self._made.values():
                ctx.close()
            self._made.clear()


class AgentsScreen(Screen[str | None]):
    """Pushed over the console: the console's keys are not active here, so nothing acts on an
    agent until one is chosen. Dismissed with the chosen name, or None."""

    DEFAULT_CSS = """
    AgentsScreen #agents-title { height: 1; padding: 0 1; background: $boost; }
    AgentsScreen #agents-table { height: 1fr; }
    """
    BINDINGS = [
        # Before the table's own Enter, so the footer shows it and one Enter chooses once.
        Binding("enter", "choose", "Select", id="agents.select", priority=True),
        Binding("escape,g", "back", "Back", id="agents.back"),
        Binding("q", "app.quit", "Quit", id="agents.quit"),
    ]

    @dataclass
    class Loaded(Message):
        rows: list[AgentRow]

    def __init__(self, ctx: Context, selected: str, *, now: Callable[[], float] = time.time,
                 refresh_every: float = 2.0) -> None:
        super().__init__(id="agents")
        self.contexts = AgentContexts(ctx)
        self.selected = selected
        self.now = now
        self.refresh_every = refresh_every
        self.rows: list[AgentRow] | None = None
        self._placed = False
        self._answered = False

    def compose(self) -> ComposeResult:
        yield Static(Text(f"agents · {self.selected} selected · ↑↓ enter select · esc back", no_wrap=True,
                          overflow="ellipsis"), id="agents-title", markup=False)
        # At 80 columns the hold (who, why, how long left) gets what the short columns leave.
        yield KeyedTable([("name", "agent", 10), ("state", "state", 15), ("canary", "last canary", 13),
                          ("relaunches", "rel/1h", 6), ("open", "open", 4), ("hold", "hold", None)],
                         stretch="hold", id="agents-table")
        yield FittingFooter(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one(KeyedTable).focus()
        self._load()

    def on_unmount(self) -> None:
        # Off the event loop: the close waits for a look that may be under way.
        threading.Thread(target=self.contexts.close, name="loom-tui-agents-close", daemon=True).start()

    @work(thread=True, exclusive=True, group="agents", exit_on_error=False)
    def _load(self) -> None:
        self.post_message(self.Loaded(self.contexts.rows(self.now())))

    @on(Loaded)
    def _loaded(self, message: Loaded) -> None:
        if not message.rows:
            return  # closed meanwhile
        self.rows = message.rows
        table = self.query_one(KeyedTable)
        table.sync([(row.name, cells(row)) for row in message.rows])
        if not self._placed and self.selected in self.contexts.names:
            self._placed = True  # once: the operator's cursor is theirs after that
            table.move_cursor(row=self.contexts.names.index(self.selected), animate=False)
        self.set_timer(self.refresh_every, self._load)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            self.notify(printable(f"agents: {event.worker.error}"), title="error", severity="error", markup=False)
            self.set_timer(self.refresh_every, self._load)

    @on(KeyedTable.RowSelected)
    def _row_selected(self, event: KeyedTable.RowSelected) -> None:
        event.stop()  # a click on a row
        self._close(event.row_key.value if event.row_key else None)

    def action_choose(self) -> None:
        self._close(self.query_one(KeyedTable).selected_key)

    def action_back(self) -> None:
        self._close(None)

    def _close(self, name: str | None) -> None:
        if not self._answered:
            self._answered = True
            self.dismiss(name)
