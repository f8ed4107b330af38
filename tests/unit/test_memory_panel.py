"""The memory panel mounted in a tiny app: hostile text stays literal, and disk changes show up live."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from rich.text import Text
from test_memory import make_atimes_stale, snapshot
from textual.app import App, ComposeResult
from textual.widgets import DataTable, Footer, Static

from loomtui.memory import index as memory
from loomtui.tui.memory_panel import MemoryPanel, editor_argv

HOSTILE = [
    "[/foo]",
    "[bold",
    "[link=x]click[/link]",
    "[bold red]not bold[/]",
    "\x1b[31mred\x1b[0m",
    "\x1b]8;;http://evil\x1b\\link",
    "bell\x07",
    "$(rm -rf ~)",
]


class UnwatchedPanel(MemoryPanel):
    """No watch on the directory: only `u` can show a change on disk."""

    def _watch(self) -> None:
        pass


class PanelApp(App):
    def __init__(self, root: Path, environ: dict[str, str] | None = None,
                 panel: type[MemoryPanel] = MemoryPanel, state_dir: Path | None = None) -> None:
        super().__init__()
        self.root = root
        self.environ = environ
        self.panel = panel
        self.state_dir = state_dir

    def compose(self) -> ComposeResult:
        yield self.panel(self.root, "MEMORY.md", environ=self.environ or {}, state_dir=self.state_dir)
        yield Footer()


async def until(pilot, predicate, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)


def preview_text(app: App) -> str:
    content = app.query_one("#memory-preview-text", Static).content
    assert isinstance(content, Text)
    return content.plain


def screen_text(app: App) -> str:
    """What the terminal would show, as plain text."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def row_texts(table: DataTable) -> list[list[Text]]:
    return [table.get_row_at(i) for i in range(table.row_count)]


@pytest.fixture
def hostile(tmp_path) -> Path:
    root = tmp_path / "mem"
    root.mkdir()
    lines = ["# Memory"]
    for i, text in enumerate(HOSTILE):
        (root / f"h{i}.md").write_text(f"body {i}: {text}\nsecond line {text}\n", encoding="utf-8")
        lines.append(memory.index_line(f"T{i} {text}", f"h{i}.md", f"hook {text}"))
    (root / "bad-utf8.md").write_bytes(b"before \xff\xfe\xc3( after [bold]\n")
    lines.append("- [Bad \udcff bytes](bad-utf8.md) \u2014 undecodable")
    (root / "[link=y].md").write_text("a file whose name is markup\n")
    lines.append("- [Name](<[link=y].md>) — odd name")
    lines.append("stray [bold prose [/] line")
    lines.append("- [Gone](gone.md) — missing file")
    (root / "orphan [i].md").write_text("orphan\x1b[2J\n")
    (root / "MEMORY.md").write_bytes(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
    return root


def test_editor_argv_never_uses_a_shell():
    path = Path("/m/a file; rm -rf ~.md")
    assert editor_argv({"EDITOR": "nano -w"}, path) == ["nano", "-w", str(path)]
    assert editor_argv({"VISUAL": "code --wait", "EDITOR": "nano"}, path) == ["code", "--wait", str(path)]
    assert editor_argv({}, path) == ["vi", str(path)]


def test_bindings_have_ids():
    ids = {b.id for b in MemoryPanel.BINDINGS}
    assert ids == {"memory.edit", "memory.reload"}


def test_hostile_text_renders_literally_and_crashes_nothing(hostile):
    async def run() -> None:
        app = PanelApp(hostile)
        async with app.run_test(size=(80, 24)) as pilot:
            panel = app.query_one(MemoryPanel)
            table = app.query_one(DataTable)
            await until(pilot, lambda: panel.report is not None and table.row_count > 0, what="the table")
            rows = row_texts(table)
            assert all(isinstance(c, Text) for row in rows for c in row)
            plain = "\n".join(" ".join(c.plain for c in row) for row in rows)
            for text in ("[/foo]", "[bold", "[link=x]", "[bold red]", "\u241b[31mred", "$(rm -rf ~)", "[link=y].md",
                         "stray [bold prose [/] line", "orphan [i].md"):
                assert text in plain, text
            assert "\x1b" not in plain and "\x07" not in plain
            titles = ("T0 [/foo]", "T1 [bold", "T2 [link=x]click[/link]", "T3 [bold red]not bold[/]")
            await until(pilot, lambda: all(t in screen_text(app) for t in titles), what="the titles, literally")
            markers = {row[2].plain: row[0].plain for row in rows}
            assert markers["gone.md"] == "✗" and markers["orphan [i].md"] == "+" and markers["h0.md"] == ""
            # Walk every row: each preview shows its file's bytes as text, never as markup or escapes.
            for i in range(table.row_count):
                table.move_cursor(row=i)
                key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
                row = panel._rows[key]
                if row.path is not None:
                    want = memory.printable(memory.read_text(hostile, row.path).splitlines()[0])
                elif row.title:
                    want = f"{memory.printable(row.target)}: no such file"
                else:
                    want = memory.printable(row.hook)
                await until(pilot, lambda: want in preview_text(app), what=f"preview of row {key}")
                assert "\x1b" not in preview_text(app)
                if row.path == "h2.md":
                    await until(pilot, lambda: "body 2: [link=x]click[/link]" in screen_text(app),
                                what="the preview on screen, literally")
            before = panel.report
            await pilot.press("u")
            await until(pilot, lambda: panel.report is not before and table.row_count == len(rows), what="reload")
            assert app.is_running

    asyncio.run(run())


def test_fits_80x24(hostile):
    async def run() -> None:
        app = PanelApp(hostile)
        async with app.run_test(size=(80, 24)) as pilot:
            panel = app.query_one(MemoryPanel)
            table = app.query_one(DataTable)
            preview = app.query_one("#memory-preview")
            summary = app.query_one("#memory-summary")
            await until(pilot, lambda: panel.report is not None and table.row_count and "problems" in
                        summary.content.plain and all(w.region.height for w in (table, preview, summary)),
                        what="the table laid out")
            for w in (table, preview, summary):
                assert w.region.width <= 80 and w.region.bottom <= 23, w  # the footer keeps the last row
                assert w.region.height >= 1, w
            assert table.region.height >= 4 and preview.region.height >= 4
            assert "problems" in summary.content.plain

    asyncio.run(run())


def test_u_reloads_an_index_changed_on_disk(tmp_path):
    root = tmp_path / "mem"
    root.mkdir()
    (root / "a.md").write_text("a\n")
    (root / "MEMORY.md").write_text("- [A](a.md) — first\n")

    async def run() -> None:
        app = PanelApp(root, panel=UnwatchedPanel)
        async with app.run_test(size=(80, 24)) as pilot:
            panel = app.query_one(MemoryPanel)
            table = app.query_one(DataTable)
            await until(pilot, lambda: table.row_count == 1, what="the first load")
            (root / "b.md").write_text("b\n")
            with (root / "MEMORY.md").open("a") as index:
                index.write("- [B](b.md) — second, written behind the panel's back\n")
            await pilot.press("u")
            await until(pilot, lambda: table.row_count == 2, what="the reloaded index")
            assert [r.title for r in panel.report.rows] == ["A", "B"]
            assert table.get_row_at(1)[3].plain == "second, written behind the panel's back"

    asyncio.run(run())


def test_a_file_added_on_disk_shows_up_live(tmp_path):
    root = tmp_path / "mem"
    root.mkdir()
    (root / "a.md").write_text("a\n")
    (root / "MEMORY.md").write_text("- [A](a.md) — first\n")

    async def run() -> None:
        app = PanelApp(root)
        async with app.run_test(size=(80, 24)) as pilot:
            panel = app.query_one(MemoryPanel)
            table = app.query_one(DataTable)
            await until(pilot, lambda: table.row_count == 1, what="the first load")
            # Written the way `loom memory add` writes: a new file, then the index replaced by rename.
            memory.add_entry(root, "MEMORY.md", "Brand new", "arrived while watching")
            await until(pilot, lambda: any(r.title == "Brand new" for r in panel.report.rows), what="the new entry")
            # A file dropped in without an index line appears as an orphan.
            (root / "stray.md").write_text("stray\n")
            await until(pilot, lambda: "file:stray.md" in panel._rows, what="the orphan")
            assert panel._rows["file:stray.md"].kinds == ("orphan",)
            # Edited in place: the open preview follows.
            table.move_cursor(row=0)
            await until(pilot, lambda: "a\n" == preview_text(app) or preview_text(app) == "a", what="preview")
            (root / "a.md").write_text("a, edited\n")
            await until(pilot, lambda: "a, edited" in preview_text(app), what="the edited preview")
            # Files in folders: the folder is watched once an entry links into it.
            memory.add_entry(root, "MEMORY.md", "Deep", "in a folder", file="topics/deeper/deep.md")
            await until(pilot, lambda: "line:3" in panel._rows, what="the folder entry")
            table.move_cursor(row=table.get_row_index("line:3"))
            await until(pilot, lambda: "# Deep" in preview_text(app), what="the folder file's preview")
            await until(pilot, lambda: "topics/deeper" in panel._watch_dirs, what="the folder watch")
            (root / "topics" / "deeper" / "deep.md").write_text("deep, edited\n")
            await until(pilot, lambda: "deep, edited" in preview_text(app), what="the edited folder file")

    asyncio.run(run())


def test_the_directory_appearing_later_is_picked_up(tmp_path):
    root = tmp_path / "later"

    async def run() -> None:
        app = PanelApp(root)
        async with app.run_test(size=(80, 24)) as pilot:
            panel = app.query_one(MemoryPanel)
            summary = app.query_one("#memory-summary", Static)
            await until(pilot, lambda: "does not exist" in summary.content.plain, what="the error line")
            memory.add_entry(root, "MEMORY.md", "First", "the very first")
            await until(pilot, lambda: panel.report is not None and panel.report.entries == 1, what="first entry")

    asyncio.run(run())


def test_edit_without_a_terminal_warns_instead_of_crashing(hostile):
    async def run() -> None:
        app = PanelApp(hostile, environ={"EDITOR": "false"})
        async with app.run_test(size=(80, 24)) as pilot:
            panel = app.query_one(MemoryPanel)
            await until(pilot, lambda: panel.report is not None, what="the table")
            await pilot.press("e")
            await until(pilot, lambda: any("editor" in str(n.message) for n in app._notifications), what="warning")
            assert app.is_running

    asyncio.run(run())


def test_an_editor_that_cannot_be_split_is_said_never_the_end_of_the_console(hostile):
    # An unclosed quote in $EDITOR raised out of the key's handler and ended the app.
    async def run() -> None:
        app = PanelApp(hostile, environ={"EDITOR": 'vi "[bold]'})
        async with app.run_test(size=(80, 24)) as pilot:
            panel = app.query_one(MemoryPanel)
            await until(pilot, lambda: panel.report is not None, what="the table")
            await pilot.press("e")
            await until(pilot, lambda: any("which editor" in str(n.message) for n in app._notifications),
                        what="the notice")
            assert app.is_running
            notice = next(n for n in app._notifications if "which editor" in str(n.message))
            assert not notice.markup

    asyncio.run(run())


def test_the_panel_modifies_nothing(hostile):
    os.mkfifo(hostile / "pipe.md")
    with (hostile / "MEMORY.md").open("a") as f:
        f.write("- [Pipe](pipe.md) — a fifo must not hang the preview\n")
    make_atimes_stale(hostile)
    before = snapshot(hostile)

    async def run() -> None:
        app = PanelApp(hostile)
        async with app.run_test(size=(80, 24)) as pilot:
            panel = app.query_one(MemoryPanel)
            table = app.query_one(DataTable)
            await until(pilot, lambda: panel.report is not None, what="the table")
            for i in range(table.row_count):
                table.move_cursor(row=i)
                key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
                if panel._rows[key].path is not None:
                    await until(pilot, lambda: "loading" not in preview_text(app), what=f"preview {key}")
            pipe = next(r for r in panel.report.rows if r.target == "pipe.md")
            assert pipe.path is None and pipe.kinds == ("missing",)  # a fifo is not a memory file
            table.move_cursor(row=table.get_row_index(pipe.key))
            await until(pilot, lambda: "pipe.md: no such file" in preview_text(app), what="the fifo preview")

    asyncio.run(run())
    assert snapshot(hostile) == before


def test_a_search_that_ends_under_a_prompt_is_not_opened_over_it(hostile):
    # Another host's search waits up to its ssh timeout; the operator meanwhile opened the inject
    # prompt. The results' dialog pushed over it took the keys typed into the prompt.
    from rich.text import Text

    from loomtui.tui.modals import PromptScreen

    async def run() -> None:
        app = PanelApp(hostile)
        async with app.run_test(size=(80, 24)) as pilot:
            panel = app.query_one(MemoryPanel)
            await until(pilot, lambda: panel.report is not None, what="the table")
            app.push_screen(PromptScreen("Type a line for the agent", "a line"))
            await until(pilot, lambda: isinstance(app.screen, PromptScreen), what="the prompt")
            panel.post_message(MemoryPanel.SearchDone("memory search: deploy (1 hits)", Text("x")))
            await until(pilot, lambda: any("not opened over" in str(n.message) for n in app._notifications),
                        what="the notice")
            assert isinstance(app.screen, PromptScreen)

    asyncio.run(run())


def test_a_search_that_fails_is_said_not_dropped(hostile):
    # Textual's worker events do not bubble: the console's handler never heard of the panel's own
    # workers, and a search of a directory gone (or of an unreachable host) did nothing at all.
    async def run() -> None:
        app = PanelApp(hostile, panel=UnwatchedPanel)
        async with app.run_test(size=(80, 24)) as pilot:
            panel = app.query_one(MemoryPanel)
            await until(pilot, lambda: panel.report is not None, what="the table")
            hostile.rename(hostile.with_name("moved-away"))
            panel.search("deploy")
            await until(pilot, lambda: any(n.title == "error" and "search" in str(n.message)
                                           for n in app._notifications), what="the failure said")

    asyncio.run(run())
