"""`loom-tui`: the operator console.

All store and tmux I/O runs in thread workers that post typed messages back; handlers and
timers only start workers. A refresh never overlaps the previous one: the handler that
receives a snapshot re-arms the next one, and a change seen meanwhile (watchfiles on the state
directory) only marks the data dirty. Every action key runs the same actions module the ticks
use and shows its outcome.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from importlib.resources import files

import watchfiles
from textual import on, work
from textual.app import App, ComposeResult, SuspendNotSupported, SystemCommand
from textual.containers import Horizontal
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, TabbedContent, TabPane
from textual.worker import Worker, WorkerState

from loomtui import actions, redact
from loomtui.agent.tmux import clean_env
from loomtui.context import Context
from loomtui.errors import LoomError
from loomtui.tui.agent_panel import AgentPanel
from loomtui.tui.canary_panel import CanaryPanel
from loomtui.tui.fleet_panel import FleetPanel
from loomtui.tui.header import StatusHeader
from loomtui.tui.keymap import APP_KEYS, TABS
from loomtui.tui.memory_panel import MemoryPanel
from loomtui.tui.messages import ActionDone, DetailLoaded, Refreshed, StateChanged
from loomtui.tui.modals import DetailScreen, HelpScreen, PromptScreen, RecycleScreen
from loomtui.tui.queue_panel import QueuePanel
from loomtui.tui.snapshot import Snapshot, Source
from loomtui.tui.timeline_panel import TimelinePanel

REFRESH_EVERY = 1.5
MODAL_BLOCKED = {"canary", "recycle", "inject", "resolve", "attach", "filter", "help", "show_tab"}
WIDE = 150


def stylesheet() -> str:
    return str(files("loomtui.styles").joinpath("loom.tcss"))


class LoomApp(App):
    TITLE = "Loom"
    CSS_PATH = stylesheet()
    BINDINGS = APP_KEYS
    ENABLE_COMMAND_PALETTE = True

    def __init__(self, ctx: Context, *, now: Callable[[], float] = time.time, refresh_every: float = REFRESH_EVERY,
                 watch: bool = True) -> None:
        super().__init__()
        self.ctx = ctx
        self.source = Source(ctx)
        self.now = now
        self.refresh_every = refresh_every
        self.watch_state = watch
        self.snapshot: Snapshot | None = None
        self._refreshing = False
        self._dirty = False
        self._timer = None
        self._stop_watch = threading.Event()
        self._recycling = False
        self.outcomes: list[tuple[str, str, bool]] = []

    # -- layout ------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield StatusHeader("loading…", id="header", markup=False)
        with Horizontal(id="main"):
            with TabbedContent(id="tabs", initial="agent"):
                for n, (tab, title) in enumerate(TABS, start=1):
                    with TabPane(f"{title} {n}", id=tab):
                        yield self._panel(tab)
            yield AgentPanel(id="side-agent")
        # The palette is on ctrl+p (and in help); its footer entry would cost the keys room at 80 columns.
        yield Footer(compact=True, show_command_palette=False)

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
            return MemoryPanel(memory.dir, memory.index, id="memory-panel")
        return TimelinePanel(self.source.store, self.now, id="timeline-panel")

    def on_mount(self) -> None:
        self.title = "Loom"
        self.sub_title = str(self.ctx.state_dir)
        self.refresh_data()
        if self.watch_state:
            self._watch_state_dir()

    def on_unmount(self) -> None:
        self._stop_watch.set()

    def on_resize(self) -> None:
        self.set_class(self.size.width >= WIDE, "-wide")

    # -- refreshing --------------------------------------------------------------------------

    def refresh_data(self) -> None:
        if self._refreshing:
            self._dirty = True
            return
        self._refreshing = True
        self._load_snapshot()

    @work(thread=True, exclusive=True, group="refresh", exit_on_error=False)
    def _load_snapshot(self) -> None:
        self.post_message(Refreshed(self.source.load(self.now())))

    @on(Refreshed)
    def _refreshed(self, message: Refreshed) -> None:
        snap = message.snapshot
        self.snapshot = snap
        self.query_one(StatusHeader).show(snap.header)
        self.query_one("#agent-panel", AgentPanel).show(snap.pane)
        self.query_one("#side-agent", AgentPanel).show(snap.pane)
        if not snap.store_error:
            self.query_one(CanaryPanel).show(snap.canary)
            self.query_one(QueuePanel).show(snap.queue)
            self.query_one(FleetPanel).show(snap.jobs, snap.taken)
            self.query_one(TimelinePanel).ledger_changed(snap.ledger_count)
        self._refreshing = False
        if self._dirty:
            self._dirty = False
            self.refresh_data()
        else:
            if self._timer is not None:
                self._timer.stop()
            self._timer = self.set_timer(self.refresh_every, self.refresh_data)

    @work(thread=True, group="watch", exit_on_error=False)
    def _watch_state_dir(self) -> None:
        # The directory, not loom.db: SQLite writes the -wal file, and renames lose watched files.
        for _ in watchfiles.watch(self.ctx.state_dir, stop_event=self._stop_watch, debounce=200, step=50,
                                  recursive=True, raise_interrupt=False):
            self.post_message(StateChanged())

    @on(StateChanged)
    def _state_changed(self) -> None:
        self.refresh_data()

    # -- the one error handler for every worker ------------------------------------------------

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            error = event.worker.error
            if event.worker.group == "refresh":
                self._refreshing = False
                self._timer = self.set_timer(self.refresh_every, self.refresh_data)
            self.notify(redact.scrub(f"{event.worker.name}: {error}"), title="error", severity="error", markup=False)

    # -- actions -----------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # While a dialog is open its own keys answer it; the console's keys must not open a
        # second dialog underneath (a held `r` would stack recycle dialogs).
        if isinstance(self.screen, ModalScreen) and action in MODAL_BLOCKED:
            return False
        return True

    def _done(self, action: str, text: str, ok: bool) -> None:
        self.post_message(ActionDone(action, redact.scrub(text), ok))

    @on(ActionDone)
    def _action_done(self, message: ActionDone) -> None:
        self.outcomes.append((message.action, message.text, message.ok))
        self.notify(message.text, title=message.action, severity="information" if message.ok else "error",
                    markup=False, timeout=8)
        self.refresh_data()

    def action_canary(self) -> None:
        self.notify("probing…", title="canary", markup=False, timeout=3)
        self._run_canary()

    @contextmanager
    def _action_ctx(self) -> Iterator[Context]:
        """Each action worker gets its own store connection, closed when it is done."""
        ctx = self.ctx.clone()
        try:
            yield ctx
        finally:
            ctx.close()

    @work(thread=True, group="action-canary", exit_on_error=False)
    def _run_canary(self) -> None:
        with self._action_ctx() as ctx:
            probe = actions.canary_now(ctx, source="tui")
        self._done("canary", probe.describe(), probe.result == "ok")

    def action_recycle(self) -> None:
        if self._recycling:
            self.notify("a relaunch from this console is still running", title="recycle", markup=False)
            return

        def chosen(mode: str | None) -> None:
            if mode and not self._recycling:
                self._recycling = True
                self.notify(f"relaunching ({mode})…", title="recycle", markup=False, timeout=3)
                self._run_recycle(mode)

        self.push_screen(RecycleScreen(), chosen)

    @work(thread=True, group="action-recycle", exit_on_error=False)
    def _run_recycle(self, mode: str) -> None:
        try:
            with self._action_ctx() as ctx:
                outcome = actions.recycle(ctx, mode, source="tui", reason="from the console")
        finally:
            self._recycling = False
        # After the flag: once the outcome shows, `r` opens the dialog again.
        self._done("recycle", outcome.describe(), outcome.ok)

    def action_inject(self) -> None:
        def submitted(text: str | None) -> None:
            if text:
                self._run_inject(text)

        self.push_screen(PromptScreen("Type into the agent's pane", "one line; Enter sends it"), submitted)

    @work(thread=True, group="action-inject", exit_on_error=False)
    def _run_inject(self, text: str) -> None:
        with self._action_ctx() as ctx:
            result = actions.inject(ctx, text, source="tui")
        self._done("inject", f"sent {result.length} characters" if result.ok else f"failed: {result.error}",
                   result.ok)

    def action_resolve(self) -> None:
        item = self.query_one(QueuePanel).selected
        if item is None:
            self.notify("select a queue item first (panel 3)", title="resolve", severity="warning", markup=False)
            return
        if item.state == "witnessed":
            self.notify(f"#{item.id} is already witnessed fixed", title="resolve", markup=False)
            return

        def submitted(note: str | None) -> None:
            if note:
                self._run_resolve(item.id, note)

        self.push_screen(PromptScreen(f"Resolve #{item.id} ({item.job}): what did you find and do?"), submitted)

    @work(thread=True, group="action-resolve", exit_on_error=False)
    def _run_resolve(self, item_id: int, note: str) -> None:
        try:
            with self._action_ctx() as ctx:
                item, changed = actions.resolve(ctx, item_id, note, source="tui")
        except LoomError as exc:
            self._done("resolve", str(exc), False)
            return
        self._done("resolve", f"#{item.id} {item.state}: waiting for the job's next clean run to witness it"
                   if changed else f"#{item.id} is already {item.state}", True)

    def action_attach(self) -> None:
        try:
            argv = self.source.driver.attach_argv()
        except LoomError as exc:
            self.notify(str(exc), title="attach", severity="error", markup=False)
            return
        try:
            with self.suspend():
                # Without $TMUX: operators run the console inside their own tmux.
                code = subprocess.run(argv, check=False, env=clean_env()).returncode
        except SuspendNotSupported:
            self.notify("attach needs a real terminal; run: " + " ".join(argv), title="attach",
                        severity="warning", markup=False)
            return
        except OSError as exc:
            self.notify(f"attach failed: {exc.strerror or exc}", title="attach", severity="error", markup=False)
            return
        if code:
            self.notify(f"tmux attach exited {code}: is the agent's session running?", title="attach",
                        severity="warning", markup=False)
        self.refresh_data()

    def action_show_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab
        panel = self.query_one(f"#{tab}", TabPane)
        for widget in panel.query("DataTable"):
            widget.focus()
            break

    def action_filter(self) -> None:
        if self.query_one(TabbedContent).active == "memory":
            self.push_screen(PromptScreen("Search the memory (titles, hooks and file bodies)", "a word"),
                             lambda term: self._search_memory(term) if term else None)
            return
        self.action_show_tab("timeline")
        timeline = self.query_one(TimelinePanel)

        def submitted(raw: str | None) -> None:
            if raw is not None:
                timeline.set_filter(raw)

        self.push_screen(PromptScreen("Filter the timeline (kind:NAME words; empty clears)", "kind:relaunch crash",
                                      str(timeline.filter), allow_empty=True), submitted)

    def action_help(self) -> None:
        rows = [(self.get_key_display(b), b.description, b.tooltip) for b in APP_KEYS]
        for panel in (TimelinePanel, MemoryPanel):
            where = panel.__name__.replace("Panel", "").lower()
            rows += [(self.get_key_display(b), b.description, f"in the {where} panel") for b in panel.BINDINGS]
        self.push_screen(HelpScreen(rows))

    @work(thread=True, group="memory-search", exit_on_error=False)
    def _search_memory(self, term: str) -> None:
        from rich.text import Text

        from loomtui.memory import index as memory

        where = (self.ctx.config.memory.dir, self.ctx.config.memory.index)
        report = memory.survey(*where)
        bodies = memory.read_bodies(where[0], {r.path for r in report.rows if r.path})
        hits = memory.search(term, report, bodies)
        body = Text()
        for hit in hits:
            body.append(memory.printable(hit.path), style="bold")
            body.append(f"  {memory.printable(hit.where)}\n", style="cyan")
            body.append(memory.printable(hit.text)[:300] + "\n\n")
        if not hits:
            body.append("no match", style="dim")
        self.post_message(DetailLoaded(f"memory search: {term} ({len(hits)} hits)", body))

    @on(DetailLoaded)
    def _show_detail(self, message: DetailLoaded) -> None:
        self.push_screen(DetailScreen(message.title, message.body))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for binding in APP_KEYS:
            if binding.action == "quit":
                continue
            yield SystemCommand(binding.description, binding.tooltip,
                                lambda action=binding.action: self.run_action(action))


# -- entry point -----------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="loom-tui", description="The Loom operator console.")
    parser.add_argument("--config", metavar="PATH", help="config file (also LOOM_CONFIG)")
    parser.add_argument("--state-dir", metavar="PATH", help="state directory (also LOOM_STATE_DIR)")
    parser.add_argument("--demo", action="store_true",
                        help="start the built-in demo (demo agent, supervisor, jobs) and stop it on quit")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    demo = None
    try:
        if args.demo:
            from loomtui.demo.launcher import Demo

            demo = Demo.for_this_install()
            print(f"loom-tui: starting the demo in {demo.root} …", file=sys.stderr)
            config_path = demo.start()
            ctx = Context.load(str(config_path), None)
        else:
            ctx = Context.load(args.config, args.state_dir)
        app = LoomApp(ctx)
        app.run()
        return app.return_code or 0
    except LoomError as exc:
        print(f"loom-tui: {exc}", file=sys.stderr)
        return exc.exit_code
    finally:
        if demo is not None:
            demo.stop()


if __name__ == "__main__":
    raise SystemExit(main())
