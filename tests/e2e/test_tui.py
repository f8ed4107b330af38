"""The console with Pilot: every key against a real store and a real agent, hostile text, degraded states."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import sys
import threading
import time

import pytest
from harness import locked_by_another, wait_for
from rich.text import Text
from textual.command import CommandList, CommandPalette
from textual.widgets import DataTable, Static, TabbedContent
from tui_state import NOW, populate, write_config

from loomtui.context import Context
from loomtui.store import heartbeats, ledger
from loomtui.store.db import DB_NAME, open_lock
from loomtui.tui.app import LoomApp
from loomtui.tui.console_screen import AGENT_ACTIONS, HOST_ACTIONS
from loomtui.tui.keymap import APP_KEYS, TABS
from loomtui.tui.modals import DetailScreen, HelpScreen, PromptScreen, RecycleScreen
from loomtui.tui.timeline_panel import EVENT_PAGE

pytestmark = pytest.mark.e2e


def screen_text(app) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def until(pilot, predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)


def recycles(app) -> int:
    return [a for a, _, _ in app.outcomes].count("recycle")


def palette_choice(app) -> str | None:
    """The command the palette would run on Enter."""
    if not isinstance(app.screen, CommandPalette):
        return None
    commands = app.screen.query_one(CommandList)
    if commands.highlighted is None:
        return None
    return commands.get_option_at_index(commands.highlighted).hit.text


def record_notices(app) -> list[tuple[str, str]]:
    """Every notice from now on as (title, message); notices on screen expire, this list does not."""
    seen: list[tuple[str, str]] = []
    notify = app.notify

    def recording(message, *args, **kwargs):
        seen.append((kwargs.get("title", ""), str(message)))
        return notify(message, *args, **kwargs)

    app.notify = recording
    return seen


def timeline_status(app) -> str:
    return app.query_one("#timeline-status", Static).content.plain


def cells(app, table_id: str) -> list[list[Text]]:
    table = app.query_one(f"#{table_id}", DataTable)
    return [table.get_row_at(i) for i in range(table.row_count)]


@pytest.fixture
def populated(tmp_path):
    config = write_config(tmp_path, socket=f"loomtest-none-{tmp_path.name[-6:]}")
    ctx = Context.load(str(config), None, environ={})
    populate(ctx)
    ctx.close()
    ctx = Context.load(str(config), None, environ={})
    yield ctx
    ctx.close()


def test_every_binding_has_an_id_and_shows_in_help_and_palette(populated):
    ids = [b.id for b in APP_KEYS]
    assert all(ids) and len(set(ids)) == len(ids)

    async def run():
        app = LoomApp(populated, now=lambda: NOW, watch=False)
        async with app.run_test(size=(100, 40)) as pilot:
            await pilot.press("question_mark")
            await until(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help screen")
            text = screen_text(app)
            for binding in APP_KEYS:
                assert binding.description in text
            await pilot.press("escape")
            titles = [c.title for c in app.get_system_commands(app.screen)]
            for binding in APP_KEYS:
                if binding.action != "quit":
                    # With one agent there is no other to choose, and without [[hosts]] no host to
                    # see: those keys are in help only.
                    assert (binding.description in titles) == (binding.action not in (*AGENT_ACTIONS, *HOST_ACTIONS))
            await pilot.press("q")
        assert not app.is_running

    asyncio.run(run())


def test_panels_show_the_store_and_hostile_text_renders_literally(populated):
    async def run():
        app = LoomApp(populated, now=lambda: NOW, watch=False)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.snapshot is not None, what="a first snapshot")
            header = screen_text(app)
            assert "no tmux session" in header and "bbbbbbbb" in header and "1 open · 1 claimed" in header
            await pilot.press("2")
            canary = cells(app, "canary-table")
            assert [c[2].plain for c in canary][:3] == ["ok", "error", "ok"]
            assert "[/foo] [bold]x [link=x]y" in canary[1][5].plain and "\x1b" not in canary[1][5].plain
            await pilot.press("3")
            queue = cells(app, "queue-table")
            assert [r[1].plain for r in queue] == ["open", "claimed", "witnessed"]
            assert queue[0][2].plain == "news[/bold]letter"
            assert "[/foo] [bold]x" in queue[0][5].plain
            await until(pilot, lambda: "news[/bold]letter" in screen_text(app), what="the job name on screen")
            await pilot.press("4")
            fleet = cells(app, "fleet-table")
            assert [r[0].plain for r in fleet] == ["news[/bold]letter", "backup"]
            assert fleet[0][1].plain == "exit 1" and fleet[0][4].plain == "1"
            await pilot.press("5")
            await until(pilot, lambda: "Hostile" in screen_text(app), what="the memory index")
            await pilot.press("slash")
            await until(pilot, lambda: isinstance(app.screen, PromptScreen), what="the memory search prompt")
            await pilot.press(*"click")
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, DetailScreen), what="the search results")
            assert "hostile.md" in screen_text(app) and "[link=x]click[/link]" in screen_text(app)
            await pilot.press("escape")
            await pilot.press("6")
            await until(pilot, lambda: app.query_one("#timeline-table", DataTable).row_count >= 3, what="incidents")
            timeline = cells(app, "timeline-table")
            statuses = [r[1].plain for r in timeline]
            assert "recovered" in statuses
            recovered = timeline[statuses.index("recovered")]
            assert "canary_failed" in recovered[4].plain and "resume→fresh" in recovered[4].plain
            assert recovered[3].plain == "aaaaaaaa→bbbbbbbb"
            # The detail view of the recovered incident lists its events.
            table = app.query_one("#timeline-table", DataTable)
            table.focus()
            table.move_cursor(row=statuses.index("recovered"))
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, DetailScreen), what="the incident detail")
            assert "relaunch" in screen_text(app) and "canary_failed" in screen_text(app)
            await pilot.press("escape")
            # events view, filter, paging
            await pilot.press("t")
            await until(pilot, lambda: any(r[1].plain == "supervisor_start" for r in cells(app, "timeline-table")),
                        what="the raw events")
            assert any("[/foo] [bold]x" in r[4].plain and "\x1b" not in r[4].plain
                       for r in cells(app, "timeline-table"))
            await pilot.press("slash")
            await until(pilot, lambda: isinstance(app.screen, PromptScreen), what="the filter prompt")
            await pilot.press(*"kind:relaunch")
            await pilot.press("enter")
            await until(pilot, lambda: {r[1].plain for r in cells(app, "timeline-table")} == {"relaunch"},
                        what="only relaunch events")
            await pilot.press("left_square_bracket")  # all three fit on the newest page: nothing older
            await until(pilot, lambda: "page 2" in timeline_status(app), what="the older page")
            assert cells(app, "timeline-table") == []
            await pilot.press("right_square_bracket")
            await until(pilot, lambda: "page 1" in timeline_status(app), what="back to the newest page")
            assert {r[1].plain for r in cells(app, "timeline-table")} == {"relaunch"}
            assert len(cells(app, "timeline-table")) == 3
            assert app.is_running

    asyncio.run(run())


def test_timeline_pages_to_older_events_and_back(populated):
    # More events than one page holds, so the older page shows other rows.
    with populated.store.write() as db:
        for n in range(EVENT_PAGE + 50):
            ledger.append_in(db, "inject", source="cli", detail={"n": n}, ts=NOW - 1800 + n)

    def shown(app) -> list[str]:
        return [row.key.value for row in app.query_one("#timeline-table", DataTable).ordered_rows]

    async def run():
        app = LoomApp(populated, now=lambda: NOW, watch=False)
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press("6", "t")
            await until(pilot, lambda: "events · page 1" in timeline_status(app)
                        and len(shown(app)) == EVENT_PAGE, what="the newest page of events")
            newest = shown(app)
            await pilot.press("left_square_bracket")
            await until(pilot, lambda: "page 2" in timeline_status(app), what="the older page")
            older = shown(app)
            assert older and not set(older) & set(newest)
            assert max(int(k[1:]) for k in older) < min(int(k[1:]) for k in newest)
            assert "supervisor_start" in [r[1].plain for r in cells(app, "timeline-table")]  # the first event
            await pilot.press("right_square_bracket")
            await until(pilot, lambda: "page 1" in timeline_status(app), what="the newest page again")
            assert shown(app) == newest

    asyncio.run(run())


def test_actions_against_a_real_agent(make_harness, tmp_path):
    harness = make_harness(sections={"canary": {"ack_timeout": "15s"}},
                           jobs=[{"name": "flaky", "log": str(tmp_path / "flaky.log"), "schedule": "every 1h"}])
    session = harness.start()
    # A real queue item: a failing job run, scanned by the sentinel.
    assert harness.loom("run-job", "flaky", "--", sys.executable, "-c",
                        "print('ERROR: it broke'); raise SystemExit(3)").returncode == 3
    scan = harness.loom("sentinel", "scan")
    assert scan.returncode == 0, scan.stderr
    ctx = harness.ctx()

    async def run():
        app = LoomApp(ctx, watch=True)
        async with app.run_test(size=(120, 36)) as pilot:
            # Launched by `loom recycle --fresh`, no canary acked since: up, but not heard yet.
            await until(pilot, lambda: app.snapshot and app.snapshot.header.agent == "unwitnessed",
                        what="the agent up, unwitnessed")
            assert "demo agent" in screen_text(app)  # the pane tail, from real tmux

            await pilot.press("c")
            await until(pilot, lambda: any(a == "canary" for a, _, _ in app.outcomes), what="the canary outcome")
            assert app.outcomes[-1][1].startswith("ok: acked in") and app.outcomes[-1][2]
            await until(pilot, lambda: app.snapshot.header.agent == "running", what="running once the canary acked")

            # The same action from the command palette: typed by name, run with Enter.
            await pilot.press("ctrl+p")
            await until(pilot, lambda: isinstance(app.screen, CommandPalette), what="the command palette")
            await pilot.press(*"Canary")
            await until(pilot, lambda: palette_choice(app) == "Canary", what="Canary chosen in the palette")
            await pilot.press("enter")
            await until(pilot, lambda: [a for a, _, _ in app.outcomes].count("canary") == 2, what="a second canary")
            assert app.outcomes[-1][1].startswith("ok: acked in") and app.outcomes[-1][2]
            assert [e["source"] for e in harness.events("canary_sent")] == ["tui", "tui"]

            await pilot.press("i")
            await until(pilot, lambda: isinstance(app.screen, PromptScreen), what="the inject prompt")
            await pilot.press(*"hello [/bold] from the console")
            await pilot.press("enter")
            await until(pilot, lambda: any(a == "inject" for a, _, _ in app.outcomes), what="the inject outcome")
            wait_for(lambda: "hello [/bold] from the console" in harness.transcript(session), what="typed text")

            await pilot.press("3")
            await until(pilot, lambda: app.query_one("#queue-table", DataTable).row_count >= 1, what="queue rows")
            await pilot.press("d")
            await until(pilot, lambda: isinstance(app.screen, PromptScreen), what="the resolve prompt")
            await pilot.press(*"fixed the flaky job")
            await pilot.press("enter")
            await until(pilot, lambda: any(a == "resolve" for a, _, _ in app.outcomes), what="the resolve outcome")
            assert "claimed" in app.outcomes[-1][1]
            await until(pilot, lambda: cells(app, "queue-table")[0][1].plain == "claimed", what="claimed on screen")

            await pilot.press("a")
            await until(pilot, lambda: "attach needs a real terminal" in " ".join(
                str(n.message) for n in app._notifications), what="the attach notice")

            await pilot.press("r")
            await until(pilot, lambda: isinstance(app.screen, RecycleScreen), what="the recycle dialog")
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, RecycleScreen), what="cancelled by esc")
            await pilot.press("r")
            await until(pilot, lambda: isinstance(app.screen, RecycleScreen), what="the recycle dialog")
            await pilot.click("#cancel")
            await until(pilot, lambda: not isinstance(app.screen, RecycleScreen), what="cancelled by a click")
            assert harness.pinned() == session and harness.events("relaunch")[-1]["source"] == "cli"

            agent = harness.agent_pid()
            await pilot.press("r")
            await until(pilot, lambda: isinstance(app.screen, RecycleScreen), what="the recycle dialog")
            await pilot.press("1")
            await until(pilot, lambda: recycles(app) == 1, 60, what="the resume outcome")
            resumed_at = time.time()
            assert app.outcomes[-1][2], app.outcomes[-1]
            assert harness.pinned() == session
            resume = harness.events("relaunch")[-1]
            assert (resume["cause"], resume["source"]) == ("operator_resume", "tui")
            wait_for(lambda: harness.agent_pid() not in (None, agent), what="the agent relaunched")
            wait_for(lambda: "resumed: " in harness.screen(), what="the resumed agent's greeting")
            await until(pilot, lambda: app.snapshot.taken > resumed_at and app.snapshot.header.agent == "unwitnessed",
                        what="the agent up again (not heard since: unwitnessed), in a newer snapshot")

            await pilot.press("r")
            await until(pilot, lambda: isinstance(app.screen, RecycleScreen), what="the recycle dialog")
            await pilot.press("r", "r")  # a held `r`: the keys are handled when press returns
            assert isinstance(app.screen, RecycleScreen) and len(app.screen_stack) == 2  # one dialog, not three
            await pilot.press("2")
            await until(pilot, lambda: recycles(app) == 2, 60, what="the fresh outcome")
            assert app.outcomes[-1][2] and harness.pinned() != session
            await until(pilot, lambda: harness.pinned()[:8] in screen_text(app), what="the new session in the header")

            for n, (tab, _) in enumerate(TABS, start=1):
                await pilot.press(str(n))
                assert app.query_one(TabbedContent).active == tab
            await pilot.press("q")
        relaunch = harness.events("relaunch")[-1]
        assert relaunch["source"] == "tui" and relaunch["cause"] == "operator_fresh"
        assert [e["source"] for e in harness.events("queue_claim")] == ["tui"]

    asyncio.run(run())


CONSOLE = "Canary 2  Queue 3"  # the console's tab bar: on the screen while the console is


def test_q_during_a_probe_ends_the_console_without_waiting_out_the_ack(make_harness):
    # The probe's thread kept the process for up to its ack timeout after `q`: the screen restored,
    # no prompt back, a console that looked hung over ssh. The console's closing now stops the
    # wait (the daemon's canary settles the probe). A wedged agent never acks; ten minutes to wait.
    harness = make_harness(sections={"canary": {"ack_timeout": "10m"}})
    harness.start()
    assert harness.loom("inject", "/wedge").returncode == 0
    ctx = harness.ctx()

    async def run():
        app = LoomApp(ctx, watch=False)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.snapshot is not None, what="the first snapshot")
            await pilot.press("c")
            await until(pilot, lambda: harness.events("canary_sent"), timeout=60, what="the probe typed")
            await pilot.press("q")

    ended = threading.Event()

    def console():
        asyncio.run(run())  # returns once the loop's worker threads have ended, the probe's too
        ended.set()

    threading.Thread(target=console, daemon=True).start()
    assert ended.wait(120), "the console waited out the probe's ack"
    ctx.close()


def test_console_survives_a_locked_store_and_a_missing_tmux(tmp_path):
    config = write_config(tmp_path, socket=f"loomtest-gone-{tmp_path.name[-6:]}")
    ctx = Context.load(str(config), None, environ={})
    populate(ctx)
    ctx.close()
    path = tmp_path / "state" / DB_NAME
    # A salvage holds the store (its open lock): not even a read can open it.
    salvage = contextlib.ExitStack()
    salvage.enter_context(open_lock(path, exclusive=True, timeout=5))
    ctx = Context.load(str(config), None, environ={})

    async def run():
        app = LoomApp(ctx, now=lambda: NOW, refresh_every=0.3, watch=False)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.snapshot and app.snapshot.store_error, what="the store error shown")
            assert "store unavailable" in screen_text(app) and "no tmux session" in screen_text(app)
            for key in "123456":
                await pilot.press(key)
            notices = record_notices(app)
            await pilot.press("c")
            # The probe cannot write its run: the worker's store error is the notice, and no outcome.
            error = await until(pilot, lambda: next((m for t, m in notices if t == "error"), None),
                                what="the canary's error notice")
            assert error.startswith("_run_canary: store ") and "database is locked" in error, error
            assert notices == [("canary", "probing…"), ("error", error)] and app.outcomes == []
            assert app.is_running
            # Whether a hold is in force cannot be read: `h` offers neither a new hold (it would
            # replace one unseen) nor a release; it says why.
            await pilot.press("h")
            said = await until(pilot, lambda: next((m for t, m in notices if t == "hold"), None), what="h's notice")
            assert "is not known" in said and "database is locked" in said
            assert not isinstance(app.screen, PromptScreen)
            salvage.close()
            await until(pilot, lambda: app.snapshot and not app.snapshot.store_error, what="recovery")
            assert "bbbbbbbb" in screen_text(app)
            # Another writer holds the store's lock (a backup, a long sqlite3 session): the console
            # reads on, and a probe's write is refused once its busy wait is over.
            blocker = locked_by_another(path)
            try:
                notices.clear()
                await pilot.press("c")
                error = await until(pilot, lambda: next((m for t, m in notices if t == "error"), None),
                                    what="the second probe's error notice", timeout=120)
                assert error.startswith("_run_canary: store ") and error.endswith("database is locked"), error
                assert app.snapshot is not None and not app.snapshot.store_error and app.outcomes == []
                assert app.is_running and "bbbbbbbb" in screen_text(app)
            finally:
                blocker.close()
            assert ctx.store.query_one("SELECT count(*) AS n FROM canary_runs")["n"] == 7  # populate's, no more

    try:
        asyncio.run(run())
    finally:
        salvage.close()
        ctx.close()


def test_a_corrupt_store_is_shown_not_fatal(tmp_path):
    config = write_config(tmp_path, socket=f"loomtest-gone-{tmp_path.name[-6:]}")
    (tmp_path / "state").mkdir(mode=0o700)
    (tmp_path / "state" / DB_NAME).write_bytes(b"garbage" * 500)
    ctx = Context.load(str(config), None, environ={})

    async def run():
        app = LoomApp(ctx, watch=False)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.snapshot and app.snapshot.store_error, what="the store error")
            assert "store unavailable" in screen_text(app)
            await pilot.press("6")
            await until(pilot, lambda: "timeline unavailable" in screen_text(app), what="the timeline's error")
            assert app.is_running

    asyncio.run(run())
    ctx.close()


def test_pane_output_with_escapes_and_bad_bytes_renders_literally(make_harness):
    hostile = (r"printf '\033[31mred\033[0m [/foo] [bold unclosed [link=x]x\n\377\376 invalid\n'; "
               "exec sleep 600 # {session_id}")
    harness = make_harness(sections={"agent": {"fresh_command": hostile, "process_match": "sleep"}})
    assert harness.loom("recycle", "--fresh").returncode == 0
    ctx = harness.ctx()

    async def run():
        app = LoomApp(ctx, watch=False, refresh_every=0.3)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: "[/foo] [bold unclosed [link=x]x" in screen_text(app)
                        and "invalid" in screen_text(app), what="hostile pane text, both lines")
            text = screen_text(app)
            assert "red" in text and "\x1b" not in text, repr(text)
            assert app.is_running

    asyncio.run(run())


def test_demo_starts_and_stops_everything(tmp_path):
    from loomtui.demo.launcher import Demo

    demo = Demo(tmp_path / "demo")
    try:
        config = demo.start()
        ctx = Context.load(str(config), None, environ={})
        try:
            wait_for(lambda: heartbeats.read(ctx.store).get("supervisor"), 30, what="the demo supervisor")
            pids = [p.pid for p in demo.procs]
        finally:
            ctx.close()
    finally:
        demo.stop()
    import psutil

    assert all(not psutil.pid_exists(p) or psutil.Process(p).status() == psutil.STATUS_ZOMBIE for p in pids)
    gone = subprocess.run(["tmux", f"-L{demo.socket}", "list-sessions"], capture_output=True, text=True)
    assert gone.returncode != 0


def test_the_console_in_a_real_terminal_attaches_and_comes_back(make_harness, installed, tmp_path):
    """The installed loom-tui in a tmux pane of its own (a real pty, $TMUX set as for an operator in
    tmux): `a` attaches to the agent's pane and detaching comes back; `e` hands the terminal to vim."""
    vim = shutil.which("vim") or shutil.which("vi")
    assert vim, "the editor test needs vim or vi"
    memory_dir = tmp_path / "memory"
    memory_dir.mkdir()
    (memory_dir / "MEMORY.md").write_text("- [Operator](operator.md) — who runs this box\n")
    note = memory_dir / "operator.md"
    note.write_text("# Operator\n\nPrefers short messages.\n")
    harness = make_harness(sections={"memory": {"dir": str(memory_dir)}})
    harness.start()
    outer = f"{harness.socket}-outer"
    term = ["tmux", f"-L{outer}", "-f/dev/null"]
    # No vimrc, no viminfo, no swap file beside the memory, and no file message: the long path would
    # wrap at 80 columns into a "Press ENTER" prompt.
    editor = f"{vim} -u NONE -i NONE -n --cmd 'set shortmess+=F'"
    # The pane inherits the environment of the tmux server this starts: the operator's, no PYTHONPATH.
    env = installed.env({"LOOM_CONFIG": str(harness.config_path), "EDITOR": editor, "VISUAL": editor})
    try:
        subprocess.run([*term, "new-session", "-d", "-s", "op", "-x", "80", "-y", "24", "-c", str(tmp_path),
                        f"{installed.bin / 'loom-tui'}; sleep 600"], check=True, env=env)

        def screen():
            return subprocess.run([*term, "capture-pane", "-p", "-t", "=op:0.0"], capture_output=True,
                                  text=True).stdout

        def keys(*args: str) -> None:
            subprocess.run([*term, "send-keys", "-t", "=op:0.0", *args], check=True)

        def shown(condition, what: str, timeout: float = 30) -> None:
            last = ""

            def check() -> bool:
                nonlocal last
                last = screen()
                return condition(last)

            try:
                wait_for(check, timeout, what=what)
            except AssertionError as exc:
                raise AssertionError(f"{exc}; the terminal shows:\n{last}") from None

        shown(lambda s: CONSOLE in s, "the console drawn in the terminal", 60)
        keys("a")
        shown(lambda s: "demo agent · session" in s and CONSOLE not in s, "the agent's own pane, attached")
        keys("C-b", "d")
        shown(lambda s: CONSOLE in s, "the console back after detaching")

        keys("5")
        shown(lambda s: "Prefers short messages." in s, "the memory file's preview")
        keys("e")
        shown(lambda s: CONSOLE not in s and "Prefers short messages." in s
              and any(line.startswith("~") for line in s.splitlines()), "vim on the memory file")
        keys("G", "o")
        keys("-l", "Added in vim, from the console.")
        keys("Escape")
        keys("-l", ":wq")
        keys("Enter")
        shown(lambda s: CONSOLE in s, "the console back after the editor")
        assert note.read_text() == "# Operator\n\nPrefers short messages.\nAdded in vim, from the console.\n"
        shown(lambda s: "Added in vim, from the console." in s, "the edit in the preview")

        keys("q")
        shown(lambda s: CONSOLE not in s, "the console quit")
    finally:
        server = subprocess.run([*term, "display-message", "-p", "#{pid}"], capture_output=True, text=True).stdout
        subprocess.run([*term, "kill-server"], capture_output=True)
        if server.strip().isdigit():
            import psutil

            try:
                for child in psutil.Process(int(server)).children(recursive=True):
                    child.kill()
            except psutil.Error:
                pass


def test_attach_without_tmux_is_a_notice_not_a_crash(populated, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")

    async def run():
        app = LoomApp(populated, now=lambda: NOW, watch=False)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.snapshot is not None, what="a first snapshot")
            await pilot.press("a")
            await until(pilot, lambda: any("tmux binary not found" in str(n.message) for n in app._notifications),
                        what="the notice")
            assert app.is_running

    asyncio.run(run())


def test_the_console_follows_a_store_the_daemon_replaced(populated):
    import os

    from loomtui.store import session
    from loomtui.store.db import Store

    async def run():
        app = LoomApp(populated, now=lambda: NOW, refresh_every=0.2, watch=False)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.snapshot and "bbbbbbbb" in screen_text(app), what="the old store")
            state = populated.state_dir
            for suffix in ("", "-wal", "-shm"):  # what salvage does: the file and its log, moved aside
                if (state / f"{DB_NAME}{suffix}").exists():
                    os.replace(state / f"{DB_NAME}{suffix}", state / f"{DB_NAME}.damaged-test{suffix}")
            with Store.in_dir(state) as fresh:
                with fresh.write() as db:
                    session.pin_in(db, "cccccccc-3333-4333-8333-333333333333")
            await until(pilot, lambda: "cccccccc" in screen_text(app), what="the replacement store shown")

    asyncio.run(run())
