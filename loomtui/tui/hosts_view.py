"""The hosts view: every host's agents grouped under their host (this machine's as `local`), as
`loom hosts` reads them: state, last canary, queue, hold and the host's heartbeat age. A host that
does not answer reads `unreachable since …` on its own line, never as dead agents.

Read in a worker thread on opening and on `u` (each host's own `loom status --json --list` over
ssh, all at once; this machine's own agents through the status model meanwhile). What a host sent
is untrusted: parsed field by field (hosts/view.py), every cell a Text made printable. Enter on an
agent's row dismisses the view with that host and agent; the console then acts on it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Static
from textual.worker import Worker

from loomtui.config import LOCAL_HOST
from loomtui.context import Context
from loomtui.hosts import view
from loomtui.hosts.view import AgentRow, HostView
from loomtui.report import all_hosts
from loomtui.text import printable
from loomtui.tui import worker_errors
from loomtui.tui.footer import FittingFooter
from loomtui.tui.tables import KeyedTable, safe

LEVELS = {"ok": "green", "warn": "bold yellow", "bad": "bold red"}
GOOD_STATES = ("running",)
BAD_STATES = ("tmux gone", "exited")  # report/status.py:STATE_WORDS
SEP = "\x1f"  # between host and agent in a row's key: neither name may hold it


@dataclass(frozen=True)
class Chosen:
    """The agent chosen in the view, and its row as last read (the console's header shows it)."""

    host: str
    agent: str
    row: AgentRow
    read_at: float


def key_of(host: str, agent: str = "") -> str:
    return f"{host}{SEP}{agent}"


def state_level(state: str) -> str:
    return "ok" if state in GOOD_STATES else "bad" if state in BAD_STATES else "warn"


def canary_level(row: AgentRow) -> str:
    return {"ok": "ok", "miss": "bad"}.get(row.canary_result or "", "warn")


def host_line(hv: HostView, now: float) -> Text:
    """What a host's own line says: why its agents are not shown, or its supervisor's heartbeat and
    its push heartbeats' last beats (the host's, the same in each of its agents' status)."""
    if hv.unreachable is not None:
        return safe(f"unreachable since {view.since(hv.unreachable.since, now)}: {hv.unreachable.why}", LEVELS["bad"])
    if hv.error:
        return safe(hv.error_words(), LEVELS["bad"])
    if not hv.agents:
        return safe("no agents", "dim")
    pushes = "".join(f" · push {p.name}: {p.words()}" for p in hv.pushes)
    first = hv.agents[0]  # the supervisor is the host's: every agent's status says the same
    if not first.supervised:  # its agents' rows are what it last saw, and nothing recovers them
        return safe(f"heartbeat {first.heartbeat()}: loom supervise is not running{pushes}", LEVELS["bad"])
    return safe(f"heartbeat {first.heartbeat()}{pushes}", "dim")


def rows_of(views: list[HostView], now: float) -> list[tuple[str, list[Text]]]:
    """A line per host (its name; its heartbeat, or why its agents are not shown), then its agents'."""
    out: list[tuple[str, list[Text]]] = []
    for hv in views:
        out.append((key_of(hv.host), [safe(hv.host, "bold reverse"), Text(""), Text(""), Text(""), host_line(hv, now)]))
        for a in hv.agents:
            out.append((key_of(hv.host, a.name), [
                safe("  " + a.name, "bold"), safe(a.state, LEVELS[state_level(a.state)]),
                safe(a.canary(), LEVELS[canary_level(a)]),
                safe(a.queue or "", "bold red" if a.queue else ""),
                safe(a.hold or "none", "bold red" if a.hold else "green")]))
    return out


class HostReader:
    """What the view's worker reads with: a store connection of its own (this machine's agents,
    and since when each host has not answered), made in the worker and closed with the view."""

    def __init__(self, ctx: Context) -> None:
        self.root = ctx
        self._ctx: Context | None = None
        self._lock = threading.Lock()  # a close waits for the read under way
        self._closed = False

    def views(self, now: Callable[[], float]) -> list[HostView]:
        with self._lock:
            if self._closed:
                return []
            if self._ctx is None:
                self._ctx = self.root.clone()
            return all_hosts.views(self._ctx, now)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._ctx is not None:
                self._ctx.close()
                self._ctx = None


class HostsScreen(Screen[Chosen | None]):
    """Pushed over the console (its keys are not active here). Dismissed with the chosen agent, or None."""

    DEFAULT_CSS = """
    HostsScreen #hosts-title { height: 1; padding: 0 1; background: $boost; }
    HostsScreen #hosts-table { height: 1fr; }
    """
    BINDINGS = [
        Binding("enter", "choose", "Select", id="hosts.select", priority=True),
        Binding("u", "reload", "Refresh", id="hosts.refresh"),
        Binding("escape,o", "back", "Back", id="hosts.back"),
        Binding("q", "app.quit", "Quit", id="hosts.quit"),
    ]

    @dataclass
    class Loaded(Message):
        views: list[HostView]
        at: float

    def __init__(self, ctx: Context, selected: str, *, now: Callable[[], float] = time.time) -> None:
        super().__init__(id="hosts")
        self.reader = HostReader(ctx)
        self.selected = selected  # "host · agent" as the console has it now
        self.now = now
        self.views: list[HostView] | None = None
        self.read_at = 0.0
        self._answered = False

    def compose(self) -> ComposeResult:
        yield Static(self._title("reading every host…"), id="hosts-title", markup=False)
        # The last column takes what the short ones leave and wraps (nothing cut at 80 columns):
        # an agent's hold, or on a host's own line its heartbeat or since when it has not answered.
        yield KeyedTable([("agent", "host / agent", 12), ("state", "state", 16), ("canary", "last canary", 14),
                          ("queue", "queue", 5), ("hold", "hold · host", None)],
                         stretch="hold", wrap=True, id="hosts-table")
        yield FittingFooter(compact=True, show_command_palette=False)

    def _title(self, note: str) -> Text:
        return Text(printable(f"hosts · {self.selected} selected · {note}"), no_wrap=True, overflow="ellipsis")

    def on_mount(self) -> None:
        self.query_one(KeyedTable).focus()
        self._load()

    def on_unmount(self) -> None:
        # Off the event loop: the close waits for a read that may be under way.
        threading.Thread(target=self.reader.close, name="loom-tui-hosts-close", daemon=True).start()

    @work(thread=True, exclusive=True, group="hosts", exit_on_error=False)
    def _load(self) -> None:
        views = self.reader.views(self.now)
        self.post_message(self.Loaded(views, self.now()))

    def action_reload(self) -> None:
        self.query_one("#hosts-title", Static).update(self._title("reading every host…"))
        self._load()

    @on(Loaded)
    def _loaded(self, message: Loaded) -> None:
        if not message.views:
            return  # closed meanwhile
        self.views, self.read_at = message.views, message.at
        self.query_one(KeyedTable).sync(rows_of(message.views, message.at))
        read = time.strftime("%H:%M:%S", time.localtime(message.at))
        self.query_one("#hosts-title", Static).update(self._title(f"read {read} · u refresh · enter select"))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if worker_errors.tell(self, event) is not None:
            # Not "reading every host…" for good: the last read stands, and `u` reads again.
            self.query_one("#hosts-title", Static).update(self._title("the read failed · u refresh"))

    def chosen(self, key: str | None) -> Chosen | None:
        """The agent of the row `key`, from the last read (None for a host's own line)."""
        if not key or self.views is None:
            return None
        host, _, agent = key.partition(SEP)
        for hv in self.views:
            if hv.host == host:
                for row in hv.agents:
                    if row.name == agent:
                        return Chosen(host, agent, row, self.read_at)
        return None

    @on(KeyedTable.RowSelected)
    def _row_selected(self, event: KeyedTable.RowSelected) -> None:
        event.stop()  # a click on a row
        self._choose(event.row_key.value if event.row_key else None)

    def action_choose(self) -> None:
        self._choose(self.query_one(KeyedTable).selected_key)

    def _choose(self, key: str | None) -> None:
        picked = self.chosen(key)
        if picked is None:
            self.notify("choose an agent's row (a host's own line has nothing to act on)", title="hosts",
                        severity="warning", markup=False)
            return
        self.action_back(picked)

    def action_back(self, picked: Chosen | None = None) -> None:
        if not self._answered:
            self._answered = True
            self.dismiss(picked)
