"""The console's Memory tab for another host's agent, at 80×24: host a's console with host b reached
through a real sshd (tests/sshd.py). b's memory has an entry a's does not; with b's agent chosen in
the hosts view, tab 5 is b's memory, read through b's own `loom memory --json` and `loom memory show
--json` over ssh (its hostile bytes made printable), its search is b's `loom memory search --json`,
an entry added on b shows on `u`, and `e` names b's `loom memory edit` (a pilot has no terminal;
the last test runs that command in a real one); back on a's agent, a's own memory again."""

from __future__ import annotations

import asyncio
import secrets
import shlex
import subprocess
import sys

import pytest
from harness import free_port, wait_for
from sshd import REMOTE_LOOM, add_host, kill_masters
from test_tui import screen_text, until
from test_tui_hosts import choose
from textual.app import App, ComposeResult
from textual.widgets import Static

from loomtui.agent.tmux import clean_env
from loomtui.tui.app import LoomApp
from loomtui.tui.hosts_view import HostsScreen
from loomtui.tui.memory_panel import MemoryPanel
from loomtui.tui.memory_source import LocalMemory, RemoteMemory
from loomtui.tui.modals import DetailScreen, PromptScreen

pytestmark = pytest.mark.e2e


def memory_dir(root, entries: dict[str, tuple[str, bytes]]):
    root.mkdir(parents=True)
    lines = ["# Memory"]
    for name, (title, body) in entries.items():
        (root / name).write_bytes(body)
        lines.append(f"- [{title}]({name}) — {title.lower()} notes")
    (root / "MEMORY.md").write_text("\n".join(lines) + "\n")
    return root


def test_the_memory_tab_is_the_chosen_hosts_memory_read_through_its_loom(make_harness, sshd, tmp_path):
    a_mem = memory_dir(tmp_path / "a-memory", {"shared.md": ("Shared", b"both hosts know this\n")})
    b_mem = memory_dir(tmp_path / "b-memory", {
        "shared.md": ("Shared", b"both hosts know this\n"),
        "b-only.md": ("Only on b", b"b's deploy key lives in the vault\n\x1b]0;pwned\x07 \x1b[2J end\n"),
    })
    a = make_harness(sections={"memory": {"dir": str(a_mem)}})
    b = make_harness(sections={"memory": {"dir": str(b_mem)}})
    add_host(a.config_path, "b", ssh="b", ssh_options=["-F", str(sshd.client_config())], loom=REMOTE_LOOM,
             config=str(b.config_path), state_dir=str(b.state_dir), connect_timeout="10s", timeout="60s",
             command_timeout="120s")
    ctx = a.ctx()
    seen: dict[str, str] = {}

    def panel(app) -> MemoryPanel:
        return app.console_screen.query_one(MemoryPanel)

    def titles(app) -> set[str]:
        return {row.title for row in panel(app)._rows.values()}

    def preview(app) -> str:
        return panel(app).query_one("#memory-preview-text").content.plain

    async def run():
        app = LoomApp(ctx, watch=False)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.snapshot is not None, 60, what="the console's first snapshot")
            await pilot.press("5")
            await until(pilot, lambda: titles(app) == {"Shared"}, 30, what="a's own memory on tab 5")
            assert isinstance(panel(app).source, LocalMemory)
            await pilot.press("o")
            await until(pilot, lambda: isinstance(app.screen, HostsScreen) and app.screen.views is not None,
                        120, what="every host read in the hosts view")
            await choose(pilot, app, "b", "main")
            await until(pilot, lambda: "every tab is b's, memory too" in screen_text(app), 30,
                        what="the header saying the memory is b's")
            # Tab 5 is b's memory now, read over ssh: b's entry, which a's has not.
            await until(pilot, lambda: isinstance(panel(app).source, RemoteMemory)
                        and titles(app) == {"Shared", "Only on b"}, 120, what="b's memory on tab 5")
            await until(pilot, lambda: "host b: MEMORY.md: 2 entries" in screen_text(app), 30,
                        what="the summary naming b")
            table = panel(app).query_one("#memory-table")
            table.focus()
            table.move_cursor(row=table.get_row_index("line:3"), animate=False)
            await until(pilot, lambda: "b's deploy key lives in the vault" in preview(app), 60,
                        what="b's file in the preview, by b's loom memory show")
            shown = preview(app)
            assert "\x1b" not in shown and "\x07" not in shown and "\u241b]0;pwned\u2407" in shown, shown
            await until(pilot, lambda: "deploy key lives in the vault" in screen_text(app), 30,
                        what="the preview drawn")
            # Search is b's own: a's memory has no such words.
            await pilot.press("slash")
            await until(pilot, lambda: isinstance(app.screen, PromptScreen), 30, what="the search prompt")
            await pilot.press(*"vault", "enter")
            await until(pilot, lambda: isinstance(app.screen, DetailScreen) and "b-only.md" in screen_text(app), 60,
                        what="b's search hits")
            seen["search"] = screen_text(app)
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is app.console_screen, 30, what="back from the hits")
            # An entry added on b shows on u (no watch reaches another host).
            assert b.loom("memory", "add", "Added on b", "--hook", "written there").returncode == 0
            await pilot.press("u")
            await until(pilot, lambda: "Added on b" in titles(app), 120, what="b's new entry after u")
            # e: b's own `loom memory edit` over ssh -t; a test has no terminal, so the notice names it.
            table.focus()
            table.move_cursor(row=table.get_row_index("line:3"), animate=False)
            await pilot.press("e")
            await until(pilot, lambda: "editing is on host b" in app.console_screen.notices.text, 30,
                        what="the edit's command for b")
            seen["edit"] = app.console_screen.notices.text
            # Back on a's agent: a's own memory again, watched on this machine.
            await pilot.press("n")
            await until(pilot, lambda: app.console_screen.remote is None and isinstance(panel(app).source, LocalMemory)
                        and titles(app) == {"Shared"}, 60, what="a's memory again")
            await until(pilot, lambda: "MEMORY.md: 1 entry" in screen_text(app), 30, what="a's summary")
            assert "host b: MEMORY.md" not in screen_text(app)
            await pilot.press("q")

    try:
        asyncio.run(run())
    finally:
        kill_masters(a.state_dir)
    assert "b-only.md" in seen["search"] and "memory search on host b: vault (1 hits)" in seen["search"], seen
    assert " -t " in seen["edit"] and "memory edit --agent main -- b-only.md" in seen["edit"], seen["edit"]
    assert not (a_mem / "b-only.md").exists() and "Added on b" not in (a_mem / "MEMORY.md").read_text()


def test_another_hosts_memory_that_does_not_answer_says_so_and_is_read_again(make_harness, sshd, tmp_path):
    """A host nothing listens for: the panel's summary names it and ssh's reason, and `u` asks again."""
    a = make_harness()
    add_host(a.config_path, "c", ssh="c", ssh_options=["-F", str(sshd.client_config()), "-p", str(free_port())],
             loom=REMOTE_LOOM, connect_timeout="10s", timeout="60s")
    ctx = a.ctx()
    source = RemoteMemory(ctx.config.host("c"), ctx.state_dir, "main")

    class PanelApp(App):
        def compose(self) -> ComposeResult:
            yield MemoryPanel(source=source)

    def summary(app) -> str:
        return app.query_one("#memory-summary", Static).content.plain

    async def run():
        app = PanelApp()
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: summary(app).startswith("host c: unreachable: "), 60, what="c unreachable")
            assert "Connection refused" in summary(app), summary(app)
            assert app.query_one(MemoryPanel).memory_dir is None  # nothing of this machine's is watched
            first = app.query_one(MemoryPanel)._generation
            await pilot.press("u")
            await until(pilot, lambda: app.query_one(MemoryPanel)._generation > first, 30, what="read again on u")
            await until(pilot, lambda: summary(app).startswith("host c: unreachable: "), 60, what="still unreachable")

    try:
        asyncio.run(run())
    finally:
        kill_masters(a.state_dir)


def test_e_for_another_hosts_agent_edits_the_file_there_in_a_terminal(make_harness, sshd, tmp_path):
    """The command the panel's `e` runs for b's agent (RemoteMemory.edit_argv: b's `loom memory edit`
    over ssh -t), in a terminal of the test's own (a tmux pane): b's $VISUAL gets a terminal and
    edits b's file; a's memory is untouched."""
    b_mem = memory_dir(tmp_path / "b-memory", {"b-only.md": ("Only on b", b"first line\n")})
    b = make_harness(sections={"memory": {"dir": str(b_mem)}})
    a = make_harness()
    editor = tmp_path / "editor.py"
    editor.write_text("import os, sys\nwith open(sys.argv[-1], 'a') as f:\n"
                      "    f.write(f'edited on b, a terminal: {os.isatty(0) and os.isatty(1)}\\n')\n")
    # b's own environment names its editor (ssh forwards none of a's).
    add_host(a.config_path, "b", ssh="b", ssh_options=["-F", str(sshd.client_config())],
             loom=["env", f"VISUAL={sys.executable} {editor}", *REMOTE_LOOM], config=str(b.config_path),
             state_dir=str(b.state_dir), connect_timeout="10s", timeout="60s")
    ctx = a.ctx()
    argv = RemoteMemory(ctx.config.host("b"), ctx.state_dir, "main").edit_argv("b-only.md", {"VISUAL": "not-a's"})
    assert "-t" in argv
    terminal = f"loomtest-term-{secrets.token_hex(3)}"
    try:
        subprocess.run(["tmux", f"-L{terminal}", "new-session", "-d", "-x", "80", "-y", "24", shlex.join(argv)],
                       check=True, env=clean_env(), timeout=30)
        wait_for(lambda: "edited on b" in (b_mem / "b-only.md").read_text(), 60, what="b's file edited over ssh -t")
    finally:
        subprocess.run(["tmux", f"-L{terminal}", "kill-server"], capture_output=True, timeout=30)
        kill_masters(a.state_dir)
    assert (b_mem / "b-only.md").read_text() == "first line\nedited on b, a terminal: True\n"
