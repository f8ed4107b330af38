"""The console's main screen: the summary, the tabbed panels, the side pane and every console key.

Below 150 columns the summary sits above the tabs and tab 1 is the agent's pane. From 150
columns on, the pane moves to the right and tab 1 becomes the overview (plots, latest incidents,
the queue, the fleet), so nothing shows twice; a resize re-lays out the same widgets by a CSS
class, no restart and no reload.

The keys live on this screen, not on the app, so a dialog pushed on top blocks them by
construction: Textual only consults the bindings of the active screen (and the app's), and a
modal screen is the active one while it is open. All store and tmux I/O runs in thread workers
that post typed messages back; handlers and timers only start workers. A refresh never overlaps
the previous one: the handler that receives a snapshot re-arms the next one, and a change seen
meanwhile (watchfiles on the state directory) only marks the data dirty. Every action key runs
the same actions module the ticks use and shows its outcome.

With several agents, one is selected at a time (`g` opens the agents view, `n` goes to the next):
every panel shows the selected agent's rows and every key acts on it, through that agent's own
Context; the summary names it. With one agent nothing of this shows.

With `[[hosts]]` in the config, `o` opens the hosts view (tui/hosts_view.py). Choosing another
host's agent there makes it the keys' agent: every key runs that host's own Loom over ssh
(tui/remote_agent.py; a line or a note on its standard input, never in a command line; `a` its
`loom attach` in this terminal) and the header says plainly which host and agent, and that it is
remote. Every tab and the pane are then read from that host's own Loom (tui/remote_source.py: its
status, queue, jobs, canary history, ledger and pane), at most every few seconds and never on this
machine's file changes; the Memory tab is a panel of that host's memory directory, read through
its own `loom memory` commands (tui/memory_source.py). Choosing a local agent (there, `g` or `n`)
ends the remote selection.
"""

from __future__ import annotations

import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import watchfiles
from textual import events, on, work
from textual.app import ComposeResult, SuspendNotSupported
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import TabbedContent, TabPane
from textual.worker import Worker

from loomtui import actions, redact
from loomtui.agent.hold_rules import parse_request
from loomtui.agent.tmux import TmuxError, clean_env
from loomtui.config import LOCAL_HOST
from loomtui.context import Context
from loomtui.errors import LoomError
from loomtui.hosts import ssh
from loomtui.text import printable
from loomtui.tui import worker_errors
from loomtui.tui.agent_panel import AgentPanel
from loomtui.tui.agents_view import AgentsScreen
from loomtui.tui.canary_panel import CanaryPanel
from loomtui.tui.fleet_panel import FleetPanel
from loomtui.tui.footer import FittingFooter
from loomtui.tui import remote_agent, remote_source
from loomtui.tui.header import StatusHeader
from loomtui.tui.hosts_view import Chosen, HostsScreen
from loomtui.tui.keymap import APP_KEYS, OVERVIEW_TITLE, TABS, described
from loomtui.tui.memory_panel import MemoryPanel
from loomtui.tui.memory_source import LocalMemory, MemorySource, RemoteMemory
from loomtui.tui.notice_bar import NoticeBar
from loomtui.tui.modals import HelpScreen, PromptScreen, RecycleScreen
from loomtui.tui.overview_panel import OverviewPanel
from loomtui.tui.plots import PlotNumbersScreen
from loomtui.tui.queue_panel import QueuePanel
from loomtui.tui.snapshot import Snapshot, Source, loading
from loomtui.tui.timeline_panel import StoreEvents, TimelinePanel

WIDE = 150
AGENT_ACTIONS = ("agents", "next_agent")  # the keys that choose an agent: only with several
HOST_ACTIONS = ("hosts",)  # only with [[hosts]] in the config


HOLD_NEEDS = "a hold needs a reason, e.g. 30m swapping the model (Esc to cancel)"


def hold_needed(raw: str) -> str:
    return "" if parse_request(raw.split()) is not None else HOLD_NEEDS


def release_needed(raw: str) -> str:
    return "" if raw.strip().lower() == "release" else "only the word release ends the hold (Esc keeps it)"


class ConsoleScreen(Screen):
    BINDINGS: ClassVar[list[BindingType]] = [*APP_KEYS]
    # Its notifications are the notice bar's lines (tui/notice_bar.py): no toast over the pane.
    DEFAULT_CSS = "ConsoleScreen ToastHolder { display: none; }"

    @dataclass
    class Refreshed(Message):
        snapshot: Snapshot
        chosen: Chosen | None = None  # a remote agent's row as its host just said it

    @dataclass
    class StateChanged(Message):
        """Something under the state directory changed (debounced by the watcher)."""

    @dataclass
    class ActionDone(Message):
        action: str
        text: str
        ok: bool
        agent: str = ""

    def __init__(self, ctx: Context, source: Source, *, refresh_every: float, watch: bool,
                 agents: dict[str, Context] | None = None, now: Callable[[], float] = time.time) -> None:
        super().__init__(id="console")
        self.ctx = ctx
        self.now = now  # the app's clock (a test's virtual one)
        self.source = source
        # Every agent's Context (made before the app runs: a new agent's directory is made then),
        # and each one's Source once it was selected (its store connection kept for coming back).
        self.agents: dict[str, Context] = agents or {ctx.agent: ctx}
        self._sources: dict[str, Source] = {ctx.agent: source}
        self.refresh_every = refresh_every
        self.watch_state = watch
        self.snapshot: Snapshot | None = None
        self.outcomes: list[tuple[str, str, bool]] = []
        self._refreshing = False
        self._dirty = False
        self._timer: Timer | None = None
        self._stop_watch = threading.Event()
        self._recycling: set[str] = set()  # the agents a relaunch from this console is running for
        # Another host's agent, chosen in the hosts view: the keys' agent while set (None: local).
        self.remote: Chosen | None = None
        self.remote_source: remote_source.RemoteSource | None = None  # its panels' reads, while it is chosen
        self.notices = NoticeBar(id="notices")

    # -- layout ------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield StatusHeader("loading…", id="header", markup=False)
        with Horizontal(id="main"):
            with TabbedContent(id="tabs", initial="agent"):
                for n, (tab, title) in enumerate(TABS, start=1):
                    with TabPane(f"{title} {n}", id=tab):
                        if tab == "agent":
                            yield OverviewPanel(id="overview")
                        yield self._panel(tab)
            yield AgentPanel(id="side-agent")
        yield self.notices
        # The palette is on ctrl+p (and in help); its footer entry would cost the keys room at 80 columns.
        yield FittingFooter(compact=True, show_command_palette=False)

    def _panel(self, tab: str):
        if tab == "agent":
            return AgentPanel(id="agent-panel")
        if tab == "canary":
            return CanaryPanel(id="canary-panel")
        if tab == "queue":
            return QueuePanel(id="queue-panel")
        if tab == "fleet":
            return FleetPanel(id="fleet-panel")
        if tab == "memory":
            memory = self.ctx.config.memory
            return MemoryPanel(memory.dir, memory.index, state_dir=self.ctx.state_dir, id="memory-panel")
        return TimelinePanel(StoreEvents(self.source.store), self.now, self.ctx.agent, id="timeline-panel")

    def on_mount(self) -> None:
        self._lay_out(self.app.size.width)
        # The pane's keys scroll it from the start: its tab's widget focused once laid out, on the
        # tab shown then (a key pressed before the first refresh, `6` say, keeps its tab).
        self.call_after_refresh(lambda: self.action_show_tab(self.query_one(TabbedContent).active or "agent"))
        self.refresh_data()
        if self.watch_state:
            self._watch_state_dir()

    def on_resize(self, event: events.Resize) -> None:
        self._lay_out(event.size.width)

    @property
    def wide(self) -> bool:
        return self.has_class("-wide")

    def _lay_out(self, width: int) -> None:
        wide = width >= WIDE
        self.set_class(wide, "-wide")
        first = TABS[0][1]
        self.query_one(TabbedContent).get_tab("agent").label = f"{OVERVIEW_TITLE if wide else first} 1"

    def on_unmount(self) -> None:
        self._stop_watch.set()

    # -- refreshing --------------------------------------------------------------------------

    def refresh_data(self) -> None:
        if self._refreshing:
            self._dirty = True
            return
        self._refreshing = True
        self._load_snapshot()

    @work(thread=True, exclusive=True, group="refresh", exit_on_error=False)
    def _load_snapshot(self) -> None:
        remote = self.remote_source
        if remote is not None:
            load = remote.load(self.now())
            self.post_message(self.Refreshed(load.snapshot, load.chosen))
        else:
            self.post_message(self.Refreshed(self.source.load(self.now())))

    def _shown_key(self) -> tuple[str, str]:
        """Whose snapshot the panels show now: ("", agent) for this machine's, (host, agent) else."""
        return (self.remote.host, self.remote.agent) if self.remote is not None else ("", self.ctx.agent)

    @on(Refreshed)
    def _refreshed(self, message: Refreshed) -> None:
        snap = message.snapshot
        # Else the agent selected before (maybe another host's): its snapshot is stale news.
        if (snap.host, snap.agent) == self._shown_key():
            if message.chosen is not None:
                self.remote = message.chosen
            self._show(snap)
        self._refreshing = False
        if self._dirty:
            self._dirty = False
            self.refresh_data()
        else:
            if self._timer is not None:
                self._timer.stop()
            self._timer = self.set_timer(self._period, self.refresh_data)

    @property
    def _period(self) -> float:
        """Seconds to the next refresh: another host's agent no oftener than remote_source.EVERY."""
        return self.refresh_every if self.remote is None else max(self.refresh_every, remote_source.EVERY)

    def _show(self, snap: Snapshot) -> None:
        self.snapshot = snap
        if self.remote is not None:
            self._show_remote()
        else:
            self.query_one(StatusHeader).show(snap.header)
        self._show_panels(snap)
        if not snap.store_error and (snap.ledger_count or not snap.host):
            # A host not read yet: its timeline is loading already.
            self.query_one(TimelinePanel).ledger_changed(snap.ledger_count)

    def _show_panels(self, snap: Snapshot) -> None:
        self.query_one("#agent-panel", AgentPanel).show(snap.pane)
        self.query_one("#side-agent", AgentPanel).show(snap.pane)
        if not snap.store_error:
            self.query_one(OverviewPanel).show(snap)
            self.query_one(CanaryPanel).show(snap.canary)
            self.query_one(QueuePanel).show(snap.queue, snap.unread.get("queue", ""))
            self.query_one(FleetPanel).show(snap.jobs, snap.taken)

    @work(thread=True, group="watch", exit_on_error=False)
    def _watch_state_dir(self) -> None:
        # The directory, not loom.db: SQLite writes the -wal file, and renames lose watched files.
        for _ in watchfiles.watch(self.ctx.state_dir, stop_event=self._stop_watch, debounce=200, step=50,
                                  recursive=True, raise_interrupt=False):
            self.post_message(self.StateChanged())

    @on(StateChanged)
    def _state_changed(self) -> None:
        if self.remote is None:  # this machine's files say nothing of another host's agent
            self.refresh_data()

    # -- the selected agent ------------------------------------------------------------------

    @property
    def several(self) -> bool:
        return len(self.agents) > 1

    def shows_action(self, action: str) -> bool:
        """Whether the footer and the palette offer `action`: with one agent there is nothing to
        switch to, so its keys are not offered (help lists them; pressed, they say why)."""
        if action in HOST_ACTIONS:
            return bool(self.ctx.config.hosts)
        return self.several or action not in AGENT_ACTIONS

    def _one_agent(self, title: str) -> bool:
        if self.several:
            return False
        if self.remote is not None:  # the one local agent is the one to go back to
            self.select_agent(self.ctx.agent)
            self.notify(f"back to this machine's agent {self.ctx.agent}", title=title, markup=False)
            return True
        self.notify(f"only agent {self.ctx.agent} is configured: there is no other to switch to "
                    "(several come from [[agents]] in the config)", title=title, severity="warning", markup=False)
        return True

    def action_agents(self) -> None:
        if self._one_agent("agents"):
            return
        def chosen(name: str | None) -> None:
            if name:
                self.select_agent(name)

        self.app.push_screen(AgentsScreen(self.agents[self.ctx.agent], self.ctx.agent, now=self.now,
                                          refresh_every=self.refresh_every), chosen)

    def action_next_agent(self) -> None:
        if self._one_agent("next agent"):
            return
        names = list(self.agents)
        self.select_agent(names[(names.index(self.ctx.agent) + 1) % len(names)])

    def select_agent(self, name: str) -> None:
        """Every panel and every key from now on is agent `name`'s (a remote selection ends)."""
        if self.remote is not None and name in self.agents:
            self.remote = self.remote_source = None
            self.snapshot = None  # the host's: no key may read it as this machine's
            self._show_panels(loading(self.now(), name))  # nor a row of the host's in a panel
            self.query_one(StatusHeader).show_loading(name)
            if name == self.ctx.agent:
                self.query_one(TimelinePanel).show_agent(StoreEvents(self.source.store), name)
                self.call_later(self._swap_memory)
                self.refresh_data()
        if name not in self.agents or name == self.ctx.agent:
            return
        self.ctx = self.agents[name]
        if name not in self._sources:
            self._sources[name] = Source(self.ctx, several=self.several)
        self.source = self._sources[name]
        self.snapshot = None  # the old agent's: no key may read it as this one's
        self._show_panels(loading(self.now(), name))
        self.query_one(StatusHeader).show_loading(name)
        self.query_one(TimelinePanel).show_agent(StoreEvents(self.source.store), name)
        self.call_later(self._swap_memory)
        self.refresh_data()

    async def _swap_memory(self) -> None:
        """The selected agent's memory directory in the memory panel (a new panel: its watcher and
        loads are the directory's), another host's agent's read through that host's Loom; run after
        the handler, so a quick n, n swaps once per change."""
        remote = self.remote
        host = self.ctx.config.host(remote.host) if remote is not None else None
        if remote is not None and host is not None:
            source: MemorySource = RemoteMemory(host, self.ctx.state_dir, remote.agent)
        else:
            memory = self.ctx.config.memory
            source = LocalMemory(Path(memory.dir), memory.index, self.ctx.state_dir)
        panel = self.query_one(MemoryPanel)
        if panel.source.key == source.key:
            return  # shared by the agents, or the same host's agent again: the panel stays as it is
        await panel.remove()
        if isinstance(source, LocalMemory):
            fresh = MemoryPanel(source.memory_dir, source.index_name, state_dir=source.state_dir, id="memory-panel")
        else:
            fresh = MemoryPanel(source=source, id="memory-panel")
        await self.query_one("#memory", TabPane).mount(fresh)

    # -- other hosts -------------------------------------------------------------------------

    def action_hosts(self) -> None:
        if not self.ctx.config.hosts:
            self.notify("no [[hosts]] in the config: the hosts view shows other machines' Loom over ssh",
                        title="hosts", severity="warning", markup=False)
            return

        def chosen(picked: Chosen | None) -> None:
            if picked is None:
                return
            if picked.host == LOCAL_HOST:
                self.select_agent(picked.agent)
                return
            host = self.ctx.config.host(picked.host)
            if host is None:
                self.notify(f"host {picked.host} is no longer in the config", title="hosts", severity="error",
                            markup=False)
                return
            self.remote = picked
            self.remote_source = remote_source.RemoteSource(host, self.ctx.state_dir, picked)
            self._show(self.remote_source.waiting(self.now()))  # nothing of this machine's meanwhile
            self.query_one(TimelinePanel).show_agent(remote_agent.RemoteEvents(host, self.ctx.state_dir), picked.agent)
            self.call_later(self._swap_memory)
            self.refresh_data()

        selected = (f"{self.remote.host} · {self.remote.agent}" if self.remote is not None
                    else f"{LOCAL_HOST} · {self.ctx.agent}")
        self.app.push_screen(HostsScreen(self.ctx, selected, now=self.now), chosen)

    def _show_remote(self) -> None:
        if self.remote is not None:
            header = self.query_one(StatusHeader)
            header.styles.height = 3
            header.update(remote_agent.header(self.remote, self.now()))

    def _still(self, remote: Chosen) -> bool:
        """Whether `remote`'s agent is still the keys' agent (its row may have been read again since)."""
        return self.remote is not None and (self.remote.host, self.remote.agent) == (remote.host, remote.agent)

    def _remote_key(self, action: str, *, stdin: str = "", **how) -> None:
        remote = self.remote
        assert remote is not None
        host = self.ctx.config.host(remote.host)
        if host is None:
            self.notify(f"host {remote.host} is no longer in the config", title=action, severity="error", markup=False)
            return
        self.notify(f"{action} on host {remote.host}…", title=f"{action} · {remote.host}", markup=False, timeout=3)
        self._run_remote(host, remote, action, remote_agent.words(action, remote.agent, **how), stdin)

    @work(thread=True, group="action-remote", exit_on_error=False)
    def _run_remote(self, host, remote: Chosen, action: str, command: list[str], stdin: str = "") -> None:
        # Its outcome asks for a refresh: the host's status, tabs and ledger read again.
        outcome = remote_agent.run(host, self.ctx.state_dir, command, stdin)
        self._done(action, outcome.text, outcome.ok, f"{remote.agent} on {remote.host}")

    # -- the one error handler for every worker ------------------------------------------------

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # The screen's own workers (a panel's are told by the panel: worker_errors).
        if worker_errors.failed(event) is not None and event.worker.group == "refresh":
            self._refreshing = False
            self._timer = self.set_timer(self._period, self.refresh_data)
        worker_errors.tell(self, event)

    # -- actions -----------------------------------------------------------------------------

    def _done(self, action: str, text: str, ok: bool, agent: str = "") -> None:
        self.post_message(self.ActionDone(action, redact.scrub(text), ok, agent))

    @on(ActionDone)
    def _action_done(self, message: ActionDone) -> None:
        self.outcomes.append((message.action, message.text, message.ok))
        # A remote agent ("main on b") is named whatever the number of local agents.
        title = (f"{message.action} · {message.agent}"
                 if message.agent and (self.several or message.agent not in self.agents) else message.action)
        # An outcome may quote anyone's words (a hold's reason, a job's name): shown, not obeyed.
        self.notify(printable(message.text), title=printable(title), severity="information" if message.ok else "error",
                    markup=False, timeout=8)
        self.refresh_data()

    def _whose(self, what: str) -> str:
        """`what` ("the agent", "the agent's pane"), naming the selected agent when there are several."""
        return what.replace("the agent", f"agent {self.ctx.agent}", 1) if self.several else what

    def _title(self, action: str, joint: str = " · ") -> str:
        return f"{action}{joint}{self.ctx.agent}" if self.several else action

    @contextmanager
    def _action_ctx(self, agent: Context) -> Iterator[Context]:
        """Each action worker gets its own store connection, closed when it is done. The agent is
        the one selected when the key was pressed (or its dialog opened), whatever is selected since."""
        ctx = agent.clone()
        try:
            yield ctx
        finally:
            ctx.close()

    def action_canary(self) -> None:
        if self.remote is not None:
            self._remote_key("canary")
            return
        self.notify("probing…", title=self._title("canary"), markup=False, timeout=3)
        self._run_canary(self.ctx, getattr(self.app, "leaving", None))

    @work(thread=True, group="action-canary", exit_on_error=False)
    def _run_canary(self, agent: Context, leaving: threading.Event | None) -> None:
        with self._action_ctx(agent) as ctx:
            probe = actions.canary_now(ctx, source="tui", stop=leaving)
        self._done("canary", probe.describe(), probe.result == "ok", agent.agent)

    def action_recycle(self) -> None:
        if self.remote is not None:
            remote = self.remote

            def remote_chosen(mode: str | None) -> None:
                if mode and self._still(remote):
                    self._remote_key("recycle", mode=mode)

            self.app.push_screen(RecycleScreen(f"{remote.agent} on host {remote.host}"), remote_chosen)
            return
        agent = self.ctx
        if agent.agent in self._recycling:
            self.notify("a relaunch from this console is still running", title="recycle", markup=False)
            return

        def chosen(mode: str | None) -> None:
            if mode and agent.agent not in self._recycling:
                self._recycling.add(agent.agent)
                self.notify(f"relaunching ({mode})…", title=self._title("recycle"), markup=False, timeout=3)
                self._run_recycle(agent, mode)

        self.app.push_screen(RecycleScreen(agent.agent if self.several else ""), chosen)

    @work(thread=True, group="action-recycle", exit_on_error=False)
    def _run_recycle(self, agent: Context, mode: str) -> None:
        try:
            with self._action_ctx(agent) as ctx:
                outcome = actions.recycle(ctx, mode, source="tui", reason="from the console")
        finally:
            self._recycling.discard(agent.agent)
        # After the flag: once the outcome shows, `r` opens the dialog again.
        self._done("recycle", outcome.describe(), outcome.ok, agent.agent)

    def action_inject(self) -> None:
        if self.remote is not None:
            # Over ssh the line goes on the host's `loom inject --stdin`: in no process list, here or there.
            remote = self.remote

            def to_host(text: str | None) -> None:
                if text and self._still(remote):
                    self._remote_key("inject", stdin=text)

            self.app.push_screen(PromptScreen(f"Type into the pane of agent {remote.agent} on host {remote.host}",
                                              "one line; Enter sends it over ssh",
                                              empty="type the line to send, or Esc to cancel"), to_host)
            return
        agent = self.ctx

        def submitted(text: str | None) -> None:
            if text:
                self._run_inject(agent, text)

        self.app.push_screen(PromptScreen(f"Type into {self._whose('the agent')}'s pane", "one line; Enter sends it",
                                          empty="type the line to send, or Esc to cancel"), submitted)

    @work(thread=True, group="action-inject", exit_on_error=False)
    def _run_inject(self, agent: Context, text: str) -> None:
        with self._action_ctx(agent) as ctx:
            result = actions.inject(ctx, text, source="tui")
        said = f"sent {result.length} characters" if result.ok else f"failed: {result.error}"
        if result.unrecorded:
            said += f" (not in the ledger: {result.unrecorded}; do not send it again)"
        self._done("inject", said, result.ok, agent.agent)

    def action_plots(self) -> None:
        if self.snapshot is None:
            self.notify("nothing loaded yet", title="plots", markup=False)
            return
        self.app.push_screen(PlotNumbersScreen(self.snapshot))

    def action_resolve(self) -> None:
        # Only a row the operator is looking at: the Queue tab's highlighted one, or the overview's
        # queue list under the cursor. A row selected earlier on a tab not shown is never resolved.
        snap = self.snapshot
        if snap is None or (snap.host, snap.agent) != self._shown_key():
            # The rows on screen may still be the agent's chosen before: nothing is resolved from them.
            self.notify("nothing loaded yet for this agent", title=self._title("resolve"), markup=False)
            return
        on_queue = self.query_one(TabbedContent).active == "queue"
        item = self.query_one(OverviewPanel).selected or (self.query_one(QueuePanel).selected if on_queue else None)
        if item is None:
            if on_queue:
                unread = self.query_one(QueuePanel).unread
                why = f"the queue could not be read: {unread}" if unread else "the queue has no item to resolve"
            elif self.wide and self.query_one(TabbedContent).active == "agent":
                why = "d resolves the queue item highlighted here in the overview's queue list or on the Queue tab (3)"
            else:
                why = "d resolves the queue item highlighted on the Queue tab: press 3 and choose one"
            self.notify(why, title=self._title("resolve"), severity="warning", markup=False)
            return
        if item.state == "witnessed":
            self.notify(f"#{item.id} is already witnessed fixed", title="resolve", markup=False)
            return
        if self.remote is not None:  # the item is the host's (its Queue tab is read from there)
            remote = self.remote

            def to_host(note: str | None) -> None:
                if note and self._still(remote):
                    self._remote_key("resolve", stdin=note, item=item.id)

            self.app.push_screen(PromptScreen(f"Resolve #{item.id} ({item.job}) on host {remote.host}: what did you "
                                              "find and do?", empty="a note is needed: what you found and did "
                                              "(Esc to cancel)"), to_host)
            return

        agent = self.ctx

        def submitted(note: str | None) -> None:
            if note:
                self._run_resolve(agent, item.id, note)

        self.app.push_screen(PromptScreen(f"Resolve #{item.id} ({item.job}): what did you find and do?",
                                          empty="a note is needed: what you found and did (Esc to cancel)"), submitted)

    @work(thread=True, group="action-resolve", exit_on_error=False)
    def _run_resolve(self, agent: Context, item_id: int, note: str) -> None:
        try:
            with self._action_ctx(agent) as ctx:
                item, changed = actions.resolve(ctx, item_id, note, source="tui")
        except LoomError as exc:
            self._done("resolve", str(exc), False, agent.agent)
            return
        self._done("resolve", f"#{item.id} {item.state}: waiting for the job's next clean run to witness it"
                   if changed else f"#{item.id} is already {item.state}", True, agent.agent)

    def action_hold(self) -> None:
        """One key both ways: with a hold in force it offers the release, else it asks why to hold."""
        if self.remote is not None:
            self._remote_hold(self.remote)
            return
        agent = self.ctx
        snap = self.snapshot
        if snap is None or snap.store_error or snap.agent != agent.agent:
            # Whether a hold is in force is not known (no read yet, another agent's, or the store
            # unreadable): offering a new hold would replace one in force unseen (a quota's, the
            # ceiling's), offering a release would end one. Neither until it is read.
            why = snap.store_error if snap is not None and snap.store_error else "not read yet"
            self.notify(printable(f"hold: whether agent {agent.agent} is held is not known ({why}); "
                                  "try again once the console has read it"), title=self._title("hold"),
                        severity="warning", markup=False)
            return
        held = snap.header.hold
        if held:
            def answered(word: str | None) -> None:
                if word is not None and word.strip().lower() == "release":
                    self._run_release(agent)

            whose = self._title("", " for agent ")
            self.app.push_screen(PromptScreen(f"{held}{whose}. Type release to end it", "release",
                                              empty="type release to end the hold, or Esc to keep it",
                                              needs=release_needed), answered)
            return

        def submitted(raw: str | None) -> None:
            parsed = parse_request(raw.split()) if raw else None
            if parsed is not None:
                self._run_hold(agent, *parsed)

        whose = self._title("", " for agent ")
        self.app.push_screen(PromptScreen(f"Hold Loom's own hands{whose}: [duration] reason (relaunches, reaps, "
                                          "modals and nudges wait; observation goes on)", "30m swapping the model",
                                          empty=HOLD_NEEDS, needs=hold_needed), submitted)

    @work(thread=True, group="action-hold", exit_on_error=False)
    def _run_hold(self, agent: Context, reason: str, duration: float | None) -> None:
        with self._action_ctx(agent) as ctx:
            change = actions.hold(ctx, reason, duration, source="tui")
        self._done("hold", change.describe(), True, agent.agent)

    @work(thread=True, group="action-hold", exit_on_error=False)
    def _run_release(self, agent: Context) -> None:
        with self._action_ctx(agent) as ctx:
            change = actions.release(ctx, source="tui")
        self._done("hold", change.describe(), change.released, agent.agent)

    def _remote_hold(self, remote: Chosen) -> None:
        """The hold key on a remote agent: as the local one, from the hold its host last reported."""
        whose = f" for agent {remote.agent} on host {remote.host}"
        if remote.row.hold:
            def answered(word: str | None) -> None:
                if word is not None and word.strip().lower() == "release" and self._still(remote):
                    self._remote_key("release")

            self.app.push_screen(PromptScreen(f"{remote.row.hold}{whose}. Type release to end it", "release",
                                              empty="type release to end the hold, or Esc to keep it",
                                              needs=release_needed), answered)
            return

        def submitted(raw: str | None) -> None:
            parsed = parse_request(raw.split()) if raw else None
            if parsed is not None and self._still(remote):
                self._remote_key("hold", reason=parsed[0], duration=parsed[1])

        self.app.push_screen(PromptScreen(f"Hold Loom's own hands{whose}: [duration] reason", "30m swapping the model",
                                          empty=HOLD_NEEDS, needs=hold_needed), submitted)

    def action_attach(self) -> None:
        remote = self.remote
        if remote is not None:
            # That host's own `loom attach` in this terminal, over ssh (it restores the window's size).
            host = self.ctx.config.host(remote.host)
            if host is None:
                self.notify(f"host {remote.host} is no longer in the config", title="attach", severity="error",
                            markup=False)
                return
            try:  # it makes the state dir's ssh/ for the master's socket: that can fail
                argv = ssh.terminal_argv(host, ["attach", "--agent", remote.agent], state_dir=self.ctx.state_dir)
            except OSError as exc:
                self.notify(printable(f"attach: {exc.filename or ''}: {exc.strerror or exc}"), title="attach",
                            severity="error", markup=False)
                return
        else:
            try:
                argv = self.source.driver.attach_argv()
            except LoomError as exc:
                self.notify(str(exc), title="attach", severity="error", markup=False)
                return
        try:
            with self.app.suspend():
                # Without $TMUX: operators run the console inside their own tmux.
                code = subprocess.run(argv, check=False, env=clean_env()).returncode
        except SuspendNotSupported:
            self.notify(printable("attach needs a real terminal; run: " + shlex.join(argv)), title="attach",
                        severity="warning", markup=False)
            return
        except OSError as exc:
            self.notify(f"attach failed: {exc.strerror or exc}", title="attach", severity="error", markup=False)
            return
        if code:
            self.notify(f"{'ssh' if remote else 'tmux attach'} exited {code}: is the agent's session running?",
                        title="attach", severity="warning", markup=False)
        if remote is None:
            self._restore_size()
        self.refresh_data()

    @work(thread=True, group="restore-size", exit_on_error=False)
    def _restore_size(self) -> None:
        # The attach sized the agent's window to this terminal; tmux keeps that size after it.
        try:
            self.source.driver.restore_size()
        except TmuxError:
            pass  # no session to resize: the refresh says what there is

    def action_show_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab
        panel = self.query_one(f"#{tab}", TabPane)
        # The first table shown, or on tab 1 below 150 columns the agent's pane (its keys scroll it).
        for widget in panel.query("DataTable, PaneScroll"):
            if all(node.display for node in widget.ancestors_with_self if node is not panel):
                widget.focus()
                break

    def action_filter(self) -> None:
        if self.query_one(TabbedContent).active == "memory":
            self.query_one(MemoryPanel).ask_search()
            return
        self.action_show_tab("timeline")
        self.query_one(TimelinePanel).ask_filter()

    def action_help(self) -> None:
        rows = [(self.app.get_key_display(b), *described(b, self.wide)) for b in APP_KEYS]
        for panel in (TimelinePanel, MemoryPanel):
            where = panel.__name__.replace("Panel", "").lower()
            rows += [(self.app.get_key_display(b), b.description, f"in the {where} panel") for b in panel.BINDINGS
                     if isinstance(b, Binding)]
        self.app.push_screen(HelpScreen(rows))
