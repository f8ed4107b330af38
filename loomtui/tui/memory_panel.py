"""The console's memory panel: the index as a table with lint markers, and a preview of one file.

Memory files are untrusted: every cell and the preview are `Text` built from `memory.printable`
output, never markup. All reads go through a `MemorySource` (tui/memory_source.py) in thread
workers that post a message back. This machine's directory (not the index file: an atomic rename
replaces the file a watch would hold) is watched with watchfiles, and any change reloads the
table; another host's agent's, read through that host's own `loom memory` commands over ssh, is
read again every REMOTE_EVERY seconds and on `u`, and `e` runs that host's `loom memory edit`.
"""

from __future__ import annotations

import os
import posixpath
import shlex
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

import watchfiles
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult, SuspendNotSupported
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widget import Widget
from textual.widgets import DataTable, Static
from textual.worker import Worker

from loomtui.errors import LoomError
from loomtui.memory import index as memory
from loomtui.memory.index import editor_argv  # noqa: F401  (its home before `loom memory edit` used it)
from loomtui.tui import worker_errors
from loomtui.tui.memory_source import REMOTE_EVERY, LocalMemory, MemorySource
from loomtui.tui.modals import PromptScreen, open_detail

PREVIEW_LIMIT = 64 * 1024
REPLICA_REFRESH = 15.0  # seconds between looks at the replica's lag (a small JSON file in .git)
WATCH_DEBOUNCE_MS = 200

# One column of symbols keeps the table narrow enough for 80 columns.
MARKS = {
    memory.MISSING: ("✗", "bold red"),
    memory.OUTSIDE: ("✗", "bold red"),
    memory.UNPARSED: ("?", "bold red"),
    memory.ORPHAN: ("+", "yellow"),
    memory.DUP_FILE: ("=", "yellow"),
    memory.DUP_TITLE: ("=", "yellow"),
    memory.EMPTY: ("∅", "yellow"),
    memory.LONG_LINE: ("…", "yellow"),
}


def cell(text: str, width: int, style: str = "") -> Text:
    out = Text(memory.printable(text), style=style, no_wrap=True)
    out.truncate(width, overflow="ellipsis")  # in terminal cells: CJK and emoji take two
    return out


def marker(kinds: tuple[str, ...]) -> Text:
    out = Text(no_wrap=True)
    for kind in kinds:
        symbol, style = MARKS.get(kind, ("!", "bold red"))
        out.append(symbol, style)
    return out


def _same_dir(path: Path, inode: int) -> bool:
    try:
        return os.stat(path).st_ino == inode
    except OSError:
        return False


class _Either:
    """Stops a watch on unmount, or to restart it on a new set of folders."""

    def __init__(self, *events: threading.Event) -> None:
        self.events = events

    def is_set(self) -> bool:
        return any(e.is_set() for e in self.events)


def watch_dirs(report: memory.Report) -> frozenset[str]:
    """Every folder on the way to a linked file, so a folder created later is noticed too."""
    out: set[str] = set()
    for row in report.rows:
        if row.line is None or not row.title:
            continue
        for rel in memory.candidates(row.target):
            parent = posixpath.dirname(rel)
            while parent:
                out.add(parent)
                parent = posixpath.dirname(parent)
    return frozenset(out)


class MemoryPanel(Widget):
    """Standalone: mount it with the memory dir and the index name from `[memory]`, or with
    `source=` another host's (tui/memory_source.py:RemoteMemory)."""

    DEFAULT_CSS = """
    MemoryPanel { layout: vertical; height: 1fr; }
    MemoryPanel > #memory-summary { height: 1; padding: 0 1; }
    MemoryPanel > DataTable { height: 1fr; min-height: 4; }
    MemoryPanel > #memory-preview { height: 1fr; min-height: 4; border-top: solid $primary; }
    """

    BINDINGS = [
        Binding("e", "edit", "Edit", id="memory.edit"),
        Binding("u", "reload", "Reload", id="memory.reload"),
    ]

    @dataclass
    class Loaded(Message):
        generation: int
        report: memory.Report | None
        error: str | None

    @dataclass
    class ReplicaLoaded(Message):
        words: str | None  # the replica's lag, short (None: this directory is not replicated)

    @dataclass
    class PreviewLoaded(Message):
        key: str
        text: Text

    @dataclass
    class DirChanged(Message):
        pass

    @dataclass
    class SearchDone(Message):
        title: str
        body: Text

    def __init__(self, memory_dir: Path | None = None, index_name: str = "MEMORY.md", *,
                 source: MemorySource | None = None, environ: dict[str, str] | None = None,
                 state_dir: Path | None = None,
                 name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        if source is None:
            if memory_dir is None:
                raise ValueError("a memory panel needs a memory dir or a source")
            source = LocalMemory(Path(memory_dir), index_name, state_dir)
        self.source: MemorySource = source
        # This machine's directory (None for another host's: only its own Loom reads it).
        self.memory_dir = self.source.memory_dir if isinstance(self.source, LocalMemory) else None
        self.index_name = index_name
        self.environ = dict(os.environ) if environ is None else environ
        self.report: memory.Report | None = None
        self._rows: dict[str, memory.Row] = {}
        self._generation = 0
        self._loading = False  # a listing being read: another host's is not asked for again meanwhile
        self._stop = threading.Event()
        self._rewatch = threading.Event()
        self._watch_dirs: frozenset[str] = frozenset()
        self._head = Text()
        self._summary = Text("loading…")
        self._replica_words: str | None = None

    def compose(self) -> ComposeResult:
        yield Static(Text("loading…"), id="memory-summary", markup=False)
        table: DataTable = DataTable(id="memory-table", cursor_type="row", zebra_stripes=True)
        table.add_column(Text(" "), key="mark", width=2)
        table.add_column(Text("title"), key="title")
        table.add_column(Text("file"), key="file")
        table.add_column(Text("hook"), key="hook")
        yield table
        with VerticalScroll(id="memory-preview"):
            yield Static(Text(""), id="memory-preview-text", markup=False)

    def on_mount(self) -> None:
        self._stop = threading.Event()
        self.reload()
        if not self.source.watched:
            # Nothing on this machine changes when another host's directory does: read it again,
            # once the last read has answered (an ssh read may take up to hosts.timeout, 30 s).
            self.set_interval(REMOTE_EVERY, self._read_again)
            return
        self._watch()
        # The lag reads "pushed 2m ago": it ages without any change in the directory to reload on.
        self.set_interval(REPLICA_REFRESH, self._replica)

    @work(thread=True, exclusive=True, group="memory-replica", exit_on_error=False)
    def _replica(self) -> None:
        self.post_message(self.ReplicaLoaded(self.source.replica()))

    def on_memory_panel_replica_loaded(self, message: ReplicaLoaded) -> None:
        self._replica_words = message.words
        self._show_summary()

    def _show_summary(self) -> None:
        text = Text(f"{self.source.where}: ", style="bold") if self.source.where else Text()
        text.append_text(self._summary)
        if self._replica_words is not None:
            text.append(" · replica " + memory.printable(self._replica_words),
                        style="yellow" if "offline" in self._replica_words else "")
        self.query_one("#memory-summary", Static).update(text)

    def on_unmount(self) -> None:
        self._stop.set()

    # -- workers: every read of the disk happens here --------------------------------------------

    def _read_again(self) -> None:
        if not self._loading:
            self.reload()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # A search, a preview or a listing that failed: said, never a panel that does nothing.
        error = worker_errors.tell(self, event)
        if error is None:
            return
        if event.worker.group == "memory-preview":
            self.query_one("#memory-preview-text", Static).update(
                Text(memory.printable(f"cannot read it: {error}"), style="red"))
        elif event.worker.group == "memory-load":
            self._loading = False

    def reload(self) -> None:
        self._loading = True
        self._generation += 1
        self._load(self._generation)
        if self.source.watched:
            self._replica()  # another host's lag comes with its listing (_load)

    @work(thread=True, exclusive=True, group="memory-load", exit_on_error=False)
    def _load(self, generation: int) -> None:
        try:
            report = self.source.survey()
        except (LoomError, OSError) as exc:
            self.post_message(self.Loaded(generation, None, str(exc)))
            return
        except Exception as exc:  # a bug must show in the panel, not kill the console
            self.post_message(self.Loaded(generation, None, f"cannot read memory: {exc!r}"))
            return
        self.post_message(self.Loaded(generation, report, None))
        if not self.source.watched:
            self.post_message(self.ReplicaLoaded(self.source.replica()))

    @work(thread=True, exclusive=True, group="memory-preview", exit_on_error=False)
    def _preview(self, key: str, rel: str) -> None:
        try:
            got = self.source.read(rel, PREVIEW_LIMIT)
        except (OSError, LoomError) as exc:
            why = getattr(exc, "strerror", None) or exc
            body = Text(memory.printable(f"cannot read {rel}: {why}"), style="red")
        else:
            if got is None:
                body = Text(f"{memory.printable(rel)} is not a regular file", style="red")
            else:
                data, more = got
                body = Text(memory.printable(data.replace("\r\n", "\n"), keep_newlines=True))
                if more:
                    body.append(f"\n… (first {PREVIEW_LIMIT // 1024} KiB shown)", style="dim")
        self.post_message(self.PreviewLoaded(key, body))

    @work(thread=True, exclusive=True, group="memory-watch", exit_on_error=False)
    def _watch(self) -> None:
        assert self.memory_dir is not None  # only this machine's directory is watched
        stop, rewatch, first = self._stop, self._rewatch, True
        either = _Either(stop, rewatch)
        while not stop.is_set():
            rewatch.clear()
            try:
                watched = os.stat(self.memory_dir).st_ino
            except OSError:
                stop.wait(1.0)  # the directory may appear later (the first `loom memory add`)
                first = False
                continue
            if not first:
                self.post_message(self.DirChanged())  # whatever happened while nobody was watching
            catch_up, first = not first, False
            # Not recursive: a recursive watch lists every subdirectory (touching their atimes) and
            # sees churn in folders that hold no memory. Only folders with linked files are watched.
            folders = (self.memory_dir / d for d in sorted(self._watch_dirs))
            paths = [self.memory_dir, *(p for p in folders if p.is_dir())]
            try:
                for changes in watchfiles.watch(*paths, watch_filter=None, debounce=WATCH_DEBOUNCE_MS,
                                                stop_event=either, raise_interrupt=False, rust_timeout=2000,
                                                yield_on_timeout=True, recursive=False):
                    if changes or catch_up:
                        # After a (re)start, once more when the watch is surely in place.
                        catch_up = False
                        self.post_message(self.DirChanged())
                    elif not _same_dir(self.memory_dir, watched):
                        break  # removed or replaced: a watch on the old inode sees nothing new
            except Exception:  # noqa: BLE001 - a failed watch is retried; the panel must outlive it
                stop.wait(1.0)

    # -- handlers: no I/O, only the table and the preview --------------------------------------

    def on_memory_panel_dir_changed(self, _: DirChanged) -> None:
        self.reload()

    def on_memory_panel_loaded(self, message: Loaded) -> None:
        if message.generation != self._generation:
            return  # a slower, older load finished after a newer one started
        self._loading = False
        table = self.query_one(DataTable)
        current = self._selected_key()
        table.clear()
        self._rows = {}
        self.report = message.report
        if message.report is None:
            self._summary = Text(memory.printable(message.error or "no memory"), style="red")
            self._show_summary()
            self._show_preview(None)
            return
        report = message.report
        dirs = watch_dirs(report)
        if dirs != self._watch_dirs:
            self._watch_dirs = dirs
            self._rewatch.set()
        for row in report.rows:
            self._rows[row.key] = row
            title = row.title or ("(not in index)" if row.line is None else "(not an entry)")
            table.add_row(
                marker(row.kinds),
                cell(title, 24, "" if row.title else "italic"),
                cell(row.target, 20),
                cell(row.hook, 80),
                key=row.key,
            )
        problems = len(report.problems)
        text = Text(no_wrap=True)
        count = f"{report.entries} entr{'y' if report.entries == 1 else 'ies'}"
        text.append(memory.printable(f"{report.index_name}: {count}"))
        text.append(f" · {problems} problem{'s' * (problems != 1)}" if problems else " · clean",
                    style="bold red" if problems else "green")
        self._summary = text
        self._show_summary()
        if current in self._rows:
            table.move_cursor(row=table.get_row_index(current))
        self._show_preview(self._selected_key(), refresh=current == self._selected_key())

    def on_memory_panel_preview_loaded(self, message: PreviewLoaded) -> None:
        if message.key != self._selected_key():
            return
        self._set_preview(self._head + message.text)

    @on(DataTable.RowHighlighted)
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_preview(event.row_key.value if event.row_key is not None else None)

    def _selected_key(self) -> str | None:
        table = self.query_one(DataTable)
        if table.row_count == 0:
            return None
        try:
            return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        except Exception:  # the cursor can sit past the end while the table refills
            return None

    def _set_preview(self, text: Text) -> None:
        self.query_one("#memory-preview-text", Static).update(text)

    def _show_preview(self, key: str | None, refresh: bool = False) -> None:
        """`refresh`: the same row after a reload; keep the old text until the new one arrives."""
        row = self._rows.get(key or "")
        if row is None:
            self._set_preview(Text(""))
            return
        head = self._head = Text()
        if row.kinds:
            head.append("problems: " + ", ".join(row.kinds) + "\n", style="yellow")
        if row.path is not None:
            if not refresh:
                self._set_preview(head + Text(f"loading {memory.printable(row.path)}…", style="dim"))
            self._preview(row.key, row.path)
        elif row.title:
            self._set_preview(head + Text(f"{memory.printable(row.target)}: no such file", style="red"))
        else:
            self._set_preview(head + Text(memory.printable(row.hook)))

    # -- actions ------------------------------------------------------------------------------------

    def action_reload(self) -> None:
        self.reload()

    def action_edit(self) -> None:
        row = self._rows.get(self._selected_key() or "")
        if row is None:
            return
        if row.path is not None:
            rel = row.path
        elif row.title and memory.candidates(row.target):
            rel = memory.candidates(row.target)[0]  # a broken link: the editor creates the file
        else:  # a line that is not an entry is fixed in the index (another host's: its own name)
            rel = self.report.index_name if self.report else self.index_name
        try:
            # $VISUAL with an unclosed quote (ValueError), another host's ssh words (OSError): said,
            # never the end of the console.
            argv = self.source.edit_argv(rel, self.environ)
        except LoomError as exc:  # outside the directory, or not a regular file: as `loom memory edit` says
            self.notify(memory.printable(f"not edited: {exc}"), severity="error", markup=False)
            return
        except (ValueError, OSError) as exc:
            self.notify(memory.printable(f"cannot tell which editor to run: {exc}"), severity="error", markup=False)
            return
        try:
            # The editor owns the terminal; the app must not draw or read keys meanwhile.
            with self.app.suspend():
                subprocess.run(argv, check=False)
        except SuspendNotSupported:
            if self.source.where:  # another host's file: say what edits it there
                self.notify(memory.printable(f"editing is on {self.source.where}; it needs a real terminal: "
                                             + shlex.join(argv)), severity="warning", markup=False)
            else:
                self.notify("cannot hand the terminal to an editor here", severity="warning", markup=False)
        except OSError as exc:
            self.notify(memory.printable(f"cannot run {argv[0]}: {exc.strerror or exc}"), severity="error",
                        markup=False)
        self.reload()

    # -- search ---------------------------------------------------------------------------------

    def ask_search(self) -> None:
        self.app.push_screen(PromptScreen("Search the memory (titles, hooks and file bodies)", "a word"),
                             self._search_for)

    def _search_for(self, term: str | None) -> None:
        if term:
            self.search(term)

    @work(thread=True, group="memory-search", exit_on_error=False)
    def search(self, term: str) -> None:
        hits = self.source.search(term)
        body = Text()
        for hit in hits:
            body.append(memory.printable(hit.path), style="bold")
            body.append(f"  {memory.printable(hit.where)}\n", style="cyan")
            body.append(memory.printable(hit.text)[:300] + "\n\n")
        if not hits:
            body.append("no match", style="dim")
        where = f" on {self.source.where}" if self.source.where else ""
        self.post_message(self.SearchDone(f"memory search{where}: {term} ({len(hits)} hits)", body))

    def on_memory_panel_search_done(self, message: SearchDone) -> None:
        message.stop()
        open_detail(self, message.title, message.body)
