"""The console explains itself at 80x24 (issue 27): every view its own headings, a filter that
never changes what an incident says, nothing that matters cut, keys that cannot act say why.

A real store written by Loom's own functions (tests/tui_state.py), a tmux socket with no server,
the console run by Textual's pilot at 80x24; the assertions read what the screen shows."""

from __future__ import annotations

import asyncio

import pytest
from textual.widgets import DataTable, Static
from tui_state import NOW, held_console_ctx, until, utc  # noqa: F401  (the fixtures ctx and utc)

from loomtui.tui.app import LoomApp

pytestmark = pytest.mark.usefixtures("utc")
SIZE = (80, 24)


def screen_lines(app) -> list[str]:
    return [strip.text for strip in app.screen._compositor.render_strips()]


def headings(app, table_id: str) -> list[str]:
    return [str(c.label) for c in app.query_one(f"#{table_id}", DataTable).columns.values()]


def rows(app, table_id: str) -> list[list[str]]:
    table = app.query_one(f"#{table_id}", DataTable)
    return [[cell.plain for cell in table.get_row_at(n)] for n in range(table.row_count)]


def timeline_status(app) -> str:
    return app.query_one("#timeline-status", Static).content.plain


def console(ctx) -> LoomApp:
    return LoomApp(ctx, now=lambda: NOW, watch=False, refresh_every=3600)


async def open_timeline(pilot) -> None:
    app = pilot.app
    await until(pilot, lambda: app.snapshot is not None, "a first snapshot")
    await pilot.press("6")
    await until(pilot, lambda: timeline_status(app).startswith("incidents · page 1")
                and app.query_one("#timeline-table", DataTable).row_count > 0, "the incidents")


async def set_filter(pilot, raw: str) -> None:
    from loomtui.tui.modals import PromptScreen

    await pilot.press("slash")
    await until(pilot, lambda: isinstance(pilot.app.screen, PromptScreen), "the filter prompt")
    await pilot.press(*raw)
    await pilot.press("enter")
    await until(pilot, lambda: f"filter {raw}" in timeline_status(pilot.app), f"the filter {raw}")


# -- 3. the events view has its own headings ------------------------------------------------------


def test_the_events_view_has_headings_of_its_own_and_the_incidents_view_gets_its_back(ctx):
    async def run():
        app = console(ctx)
        async with app.run_test(size=SIZE) as pilot:
            await open_timeline(pilot)
            assert headings(app, "timeline-table") == ["when", "status", "took", "sessions", "what"]
            await pilot.press("t")
            await until(pilot, lambda: timeline_status(app).startswith("events · page 1")
                        and any(r[1] == "supervisor_start" for r in rows(app, "timeline-table")), "the events")
            assert headings(app, "timeline-table") == ["when", "kind", "source", "cause", "detail"]
            start = next(r for r in rows(app, "timeline-table") if r[1] == "supervisor_start")
            assert start[2:4] == ["supervisor", ""] and start[4] == "pid=1"
            heading_line = next(line for line in screen_lines(app) if " kind " in line)
            for word in ("when", "kind", "source", "cause", "detail"):
                assert word in heading_line
            assert "status" not in heading_line and "sessions" not in heading_line
            await pilot.press("t")
            await until(pilot, lambda: timeline_status(app).startswith("incidents"), "the incidents again")
            assert headings(app, "timeline-table") == ["when", "status", "took", "sessions", "what"]

    asyncio.run(run())


# -- 4. a filter chooses which incidents show, never what they say --------------------------------


def test_a_kind_filter_shows_the_incidents_that_hold_it_each_as_it_is_unfiltered(ctx):
    async def run():
        app = console(ctx)
        async with app.run_test(size=SIZE) as pilot:
            await open_timeline(pilot)
            whole = {r[0]: r for r in rows(app, "timeline-table")}
            recovered = [r for r in whole.values() if r[1] == "recovered"]
            assert recovered and "canary_failed" in recovered[0][4]
            await set_filter(pilot, "kind:relaunch")
            await until(pilot, lambda: rows(app, "timeline-table") != list(whole.values()), "the filtered rows")
            filtered = rows(app, "timeline-table")
            # Only the incidents with a relaunch, each with the status and duration it has unfiltered
            # (grouped from the relaunches alone, the recovered one read `ongoing` for an hour).
            assert filtered and all(whole[r[0]] == r for r in filtered)
            assert recovered[0] in filtered and all("relaunch" in r[4] for r in filtered)
            assert not any(r[1] == "ongoing" for r in filtered)
            await set_filter(pilot, "kind:foreign_poller_reaped")
            await until(pilot, lambda: len(rows(app, "timeline-table")) == 1, "the reap's note alone")
            assert rows(app, "timeline-table")[0][4].startswith("foreign poller 4242 reaped")

    asyncio.run(run())


# -- 5. nothing that matters cut at 80 columns ------------------------------------------------------


def dialog_text(app) -> str:
    """The open dialog's words, its lines joined (a wrapped prompt reads as one sentence)."""
    return " ".join(" ".join(line.replace("█", " ").split()) for line in screen_lines(app))


def test_the_release_dialog_shows_its_prompt_whole_and_enter_says_what_is_needed(ctx):
    from loomtui.tui.modals import PromptScreen

    async def run():
        app = console(ctx)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.snapshot is not None and app.snapshot.header.hold, "the held state")
            await pilot.press("h")
            await until(pilot, lambda: isinstance(app.screen, PromptScreen), "the release dialog")
            await pilot.pause()
            assert "held at the ceiling: ceiling (until released). Type release to end it" in dialog_text(app)
            await pilot.press("enter")
            await until(pilot, lambda: "type release to end the hold, or Esc to keep it" in dialog_text(app),
                        "what the empty field needs")
            await pilot.press(*"relax", "enter")
            await until(pilot, lambda: "only the word release ends the hold" in dialog_text(app), "the wrong word")
            assert isinstance(app.screen, PromptScreen)  # still open: nothing was released, and it says so
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, PromptScreen), "the dialog closed")
            assert app.outcomes == []

    asyncio.run(run())


def test_the_hold_prompt_shows_its_question_whole_and_asks_for_a_reason(ctx):
    from loomtui.agent.recovery import HOLD_KEY
    from loomtui.tui.modals import PromptScreen

    with ctx.store.write() as db:
        db.execute("DELETE FROM meta WHERE key = ?", (HOLD_KEY,))

    async def run():
        app = console(ctx)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.snapshot is not None, "a first snapshot")
            assert not app.snapshot.header.hold
            await pilot.press("h")
            await until(pilot, lambda: isinstance(app.screen, PromptScreen), "the hold prompt")
            await pilot.pause()
            assert ("Hold Loom's own hands: [duration] reason (relaunches, reaps, modals and nudges wait; "
                    "observation goes on)") in dialog_text(app)
            for typed in ((), ("3", "0", "m")):
                await pilot.press(*typed, "enter")
                await until(pilot, lambda: "a hold needs a reason, e.g. 30m swapping the model" in dialog_text(app),
                            "what a hold needs")
            assert isinstance(app.screen, PromptScreen) and app.outcomes == []

    asyncio.run(run())


def test_the_header_keeps_its_words_whole_and_its_first_line_one_width(ctx):
    from dataclasses import replace

    from rich.cells import cell_len

    from loomtui.tui.header import render_header

    async def run():
        app = console(ctx)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.snapshot is not None, "a first snapshot")
            await pilot.pause()
            top = screen_lines(app)[:3]
            assert "agent HELD  session bbbbbbbb  supervisor heartbeat 2s ago" in top[0] and "…" not in top[0]
            assert "canary ok 20m ago (0.60s)  queue 1 open · 1 claimed" in top[1] and "…" not in top[1]
            # The hold says why in full; the incident's status and age are whole (its title may be cut).
            assert "hold held at the ceiling: ceiling (until released)  last incident held for 1m" in top[2]
            return app.snapshot.header

    header = asyncio.run(run())
    firsts = {cell_len(render_header(replace(header, supervisor=beat)).plain.split("\n")[0])
              for beat in ("heartbeat 2s ago", "heartbeat 59m59s ago", "STALE: beat 23h59m ago", "no heartbeat")}
    assert len(firsts) == 1 and firsts.pop() <= 78  # 80 columns less the header's padding
    busy = render_header(replace(header, unsent=3, held=False, agent="running", hold="")).plain.split("\n")
    assert busy[1].endswith("  3 unsent (loom status)") and cell_len(busy[1]) <= 78


def test_the_queue_line_shows_the_log_text_not_its_timestamp(ctx):
    with ctx.store.write() as db:
        db.execute(
            "INSERT INTO queue_items(job, kind, signature, sample, log, first_seen, last_seen, count, state, nudges) "
            "VALUES ('backup', 'line', 'sig4', ?, '/var/log/b.log', ?, ?, 1, 'open', 0)",
            ("2026-12-02T03:46:53.123+00:00 ConnectionError: refused", NOW - 100, NOW - 100))

    async def run():
        app = console(ctx)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.snapshot is not None, "a first snapshot")
            await pilot.press("3")
            await until(pilot, lambda: app.query_one("#queue-table", DataTable).row_count == 4, "the queue")
            await pilot.pause()
            assert headings(app, "queue-table") == ["#", "state", "job", "×", "seen", "line"]
            line = next(line for line in screen_lines(app) if " 4 " in line and "open" in line)
            assert "ConnectionError: refused" in line and "2026-12-02" not in line
            assert "11-18 11:05" in line  # when, in its own column
            # The detail below keeps the line whole, its stamp too.
            table = app.query_one("#queue-table", DataTable)
            table.move_cursor(row=[r.key.value for r in table.ordered_rows].index("q4"))
            await until(pilot, lambda: any("2026-12-02T03:46:53.123+00:00 ConnectionError" in x
                                           for x in screen_lines(app)), "the whole line in the detail")

    asyncio.run(run())


def test_the_timelines_what_wraps_whole_at_80_columns_and_the_events_view_stays_one_line_a_row(ctx):
    async def run():
        app = console(ctx)
        async with app.run_test(size=SIZE) as pilot:
            await open_timeline(pilot)
            await until(pilot, lambda: any(" sessions " in line for line in screen_lines(app)), "the rows on screen")
            lines = screen_lines(app)
            heading = next(n for n, line in enumerate(lines) if " sessions " in line and " what" in line)
            column = lines[heading].index(" what") + 1
            what = " ".join(" ".join(line[column:].split()) for line in lines[heading + 1:-1] if line[column:].strip())
            for title in (r[4] for r in rows(app, "timeline-table")):
                assert title in what  # every incident's words, whole, the row as tall as they need
            assert "canary_failed; 2 relaunches (resume→fresh); 2 misses" in what and "…" not in what
            await pilot.press("t")
            await until(pilot, lambda: timeline_status(app).startswith("events · page 1"), "the events")
            table = app.query_one("#timeline-table", DataTable)
            await until(pilot, lambda: table.row_count > 0, "the events' rows")
            assert all(row.height == 1 for row in table.rows.values())

    asyncio.run(run())


# -- 6. the console says why the agent died ---------------------------------------------------------


def pane_text(app) -> str:
    return app.query_one("#agent-panel").query_one("#pane-text", Static).content.plain


def test_the_agent_tab_says_how_the_last_launch_died_and_the_lines_it_printed(ctx):
    from loomtui.store import ledger

    ledger.append(ctx.store, "relaunch", source="cli", cause="operator_fresh",
                  detail={"mode": "fresh", "old_session": None, "new_session": "cccccccc"}, ts=NOW - 30)
    ledger.append(ctx.store, "launch_died", source="cli", cause="operator_fresh", ts=NOW - 29,
                  detail={"mode": "fresh", "session": "cccccccc", "status": 127,
                          "screen_tail": "bash: line 1: claude: command not found | [bold]x[/bold] \x1b[31mred"})

    async def run():
        app = console(ctx)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: "last lines" in pane_text(app), "the last words on the Agent tab")
            text = pane_text(app)
            assert "the agent exited at once (status 127); the last lines it printed:" in text
            assert "\n  bash: line 1: claude: command not found\n  [bold]x[/bold] ␛[31mred" in text
            await until(pilot, lambda: any("bash: line 1: claude: command not found" in line
                                           for line in screen_lines(app)), "the lines on screen")
            # A launch since: that death is old news.
            ledger.append(ctx.store, "relaunch", source="cli", cause="operator_fresh",
                          detail={"mode": "fresh", "old_session": "cccccccc", "new_session": "dddddddd"}, ts=NOW - 5)
            app.console_screen.refresh_data()
            await until(pilot, lambda: "last lines" not in pane_text(app), "the old death gone")
            assert pane_text(app).startswith("no agent pane: no tmux session")

    asyncio.run(run())


def test_a_dead_pane_shows_its_exit_status_and_its_last_words():
    from loomtui.tui.agent_panel import render_pane
    from loomtui.tui.snapshot import PaneView

    shown = render_pane(PaneView("dead", "Pane is dead (status 127, Wed Dec  2 03:00:00 2026)\n",
                                 "the pane's process exited (status 127)", died="the agent exited at once (status 127)",
                                 last_words=("bash: line 1: claude: command not found",))).plain
    assert "— the pane's process exited (status 127) —" in shown
    assert shown.endswith("the last lines it printed:\n  bash: line 1: claude: command not found")


# -- 7. the agent's pane scrolls with the keys, with scrollback ------------------------------------


def test_the_agent_pane_scrolls_with_the_keys_and_keeps_its_place_on_refresh(ctx):
    from loomtui.tui.agent_panel import PaneScroll
    from loomtui.tui.snapshot import PaneView

    history = "\n".join(f"line {n} of the agent's output" for n in range(1, 301))

    async def run():
        app = console(ctx)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.snapshot is not None, "a first snapshot")
            panel = app.query_one("#agent-panel")
            scroll = panel.query_one(PaneScroll)
            await until(pilot, lambda: app.focused is scroll, "the pane focused on tab 1")
            panel.show(PaneView("up", history))
            await until(pilot, lambda: scroll.max_scroll_y > 0 and scroll.scroll_y == scroll.max_scroll_y,
                        f"the end of the output {scroll.scroll_y} {scroll.max_scroll_y}", timeout=5)
            bottom = scroll.scroll_y
            await pilot.press("pageup")
            await until(pilot, lambda: scroll.scroll_y < bottom, "a page up")
            await pilot.press("up")
            await pilot.wait_for_scheduled_animations()  # the keys scroll smoothly: the place once settled
            await until(pilot, lambda: not app.animator.is_being_animated(scroll, "scroll_y"), "the scroll settled")
            place = scroll.scroll_y
            assert 0 < place < bottom
            # New output while scrolled back: the place is kept, not snapped to the end.
            panel.show(PaneView("up", history + "\nline 301"))
            await pilot.pause()
            assert scroll.scroll_y == place
            await pilot.press("home")
            await until(pilot, lambda: scroll.scroll_y == 0, "the top of the scrollback")
            assert any("line 1 of the agent's output" in line for line in screen_lines(app))
            await pilot.press("end")
            await until(pilot, lambda: scroll.scroll_y == scroll.max_scroll_y, "the end again")
            panel.show(PaneView("up", history + "\nline 301\nline 302"))
            await until(pilot, lambda: any("line 302" in line for line in screen_lines(app)), "following again")

    asyncio.run(run())


@pytest.mark.e2e
def test_the_console_captures_the_panes_scrollback_bounded(tmp_path, make_pane):
    from loomtui.agent import drivers
    from loomtui.context import Context
    from loomtui.tui.snapshot import SCROLLBACK

    pane = make_pane()
    count = SCROLLBACK + 500
    assert pane.tmux("respawn-pane", "-k", "-t", f"={pane.session}:0.0",
                     f"seq 1 {count}; exec sleep 2147483647").returncode == 0
    config = tmp_path / "loom.toml"
    config.write_text("[agent]\n" + "".join(f'{k} = "{v}"\n' for k, v in pane.agent_keys().items()))
    ctx = Context.load(str(config), str(tmp_path / "state"), environ={})
    try:
        from harness import wait_for

        driver = drivers.of(ctx)
        wait_for(lambda: str(count) in driver.screen(), 30, what="the numbers printed")
        lines = [line for line in driver.screen(SCROLLBACK).splitlines() if line.strip()]
        assert lines[-1] == str(count) and str(count - SCROLLBACK) in lines  # the scrollback above the screen
        assert "1" not in lines and len(lines) <= SCROLLBACK + 50  # bounded: the oldest lines stay in tmux
    finally:
        ctx.close()


# -- 8. keys that cannot act say why ----------------------------------------------------------------


def notices(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


def test_g_and_n_with_one_agent_say_there_is_no_other(ctx):
    async def run():
        app = console(ctx)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.snapshot is not None, "a first snapshot")
            for key in ("g", "n"):
                await pilot.press(key)
                await until(pilot, lambda: len(notices(app)) == ("g", "n").index(key) + 1, f"what {key} says")
            assert all(text.startswith("only agent main is configured: there is no other to switch to")
                       for text in notices(app))
            assert app.screen is app.console_screen  # no agents view opened
            assert not any("Agents" in line for line in screen_lines(app)[-1:])  # nor offered in the footer

    asyncio.run(run())


def test_d_resolves_only_the_queue_tabs_highlighted_row_and_elsewhere_says_where(ctx):
    from loomtui.tui.modals import PromptScreen

    async def run():
        app = console(ctx)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.snapshot is not None, "a first snapshot")
            await pilot.press("3")
            await until(pilot, lambda: app.query_one("#queue-table", DataTable).row_count == 3, "the queue")
            table = app.query_one("#queue-table", DataTable)
            table.move_cursor(row=1)
            chosen = app.query_one("#queue-panel").selected
            assert chosen is not None and chosen.state != "witnessed"
            await pilot.press("1", "d")  # the Agent tab: the row selected on the Queue tab is not resolved
            await until(pilot, lambda: notices(app), "what d says on the Agent tab")
            assert notices(app) == ["d resolves the queue item highlighted on the Queue tab: press 3 and choose one"]
            assert not isinstance(app.screen, PromptScreen)
            await pilot.press("3", "d")
            await until(pilot, lambda: isinstance(app.screen, PromptScreen), "the resolve prompt")
            assert app.screen.title_text.startswith(f"Resolve #{chosen.id} ")
            await pilot.press("escape")
            assert app.outcomes == []

    asyncio.run(run())


# -- 10. help and tabs say the same, distinct palette names, the canary's why, notices ------------


@pytest.mark.parametrize("size, first", [((80, 24), "Agent"), ((160, 48), "Overview")])
def test_help_names_tab_1_as_the_tab_reads_and_the_palette_names_are_distinct(ctx, size, first):
    from loomtui.tui.modals import HelpScreen

    async def run():
        app = console(ctx)
        async with app.run_test(size=size) as pilot:
            await until(pilot, lambda: app.snapshot is not None, "a first snapshot")
            assert f"{first} 1 " in screen_lines(app)[3]
            titles = [c.title for c in app.get_system_commands(app.screen)]
            assert len(titles) == len(set(titles)) and {"Canary", "Canary tab", f"{first} tab"} <= set(titles)
            await pilot.press("question_mark")
            await until(pilot, lambda: isinstance(app.screen, HelpScreen), "help")
            shown = {key: what for key, what, _ in app.screen.rows}
            assert shown["1"] == f"{first} tab" and shown["2"] == "Canary tab" and shown["c"] == "Canary"

    asyncio.run(run())


def test_the_canary_tabs_why_says_what_each_run_came_to_whole(ctx):
    async def run():
        app = console(ctx)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.snapshot is not None, "a first snapshot")
            await pilot.press("2")
            await until(pilot, lambda: app.query_one("#canary-table", DataTable).row_count == 7, "the runs")
            await until(pilot, lambda: any(" why" in line for line in screen_lines(app)), "the runs on screen")
            why = {r[0]: r[5] for r in rows(app, "canary-table")}
            assert why["2"] == why["3"] == "no ack within 3m" and why["7"] == "acked at 10:46:40"
            assert why["4"] == "a relaunch is under way" and why["6"].startswith("acks dir gone [/foo] [bold]x")
            # The error's words wrap in their column, whole and literal.
            lines = screen_lines(app)
            column = next(line for line in lines if " why" in line).index(" why") + 1
            shown = " ".join(" ".join(line[column:].split()) for line in lines if line[column:].strip())
            assert "acks dir gone [/foo] [bold]x [link=x]y ␛[31mred␛[0m bell␇ [/]" in shown

    asyncio.run(run())


def test_a_notice_takes_room_above_the_footer_and_never_covers_the_agent_pane(ctx):
    from loomtui.tui.agent_panel import PaneScroll
    from loomtui.tui.notice_bar import NoticeBar
    from loomtui.tui.snapshot import PaneView

    history = "\n".join(f"line {n} of the agent's output" for n in range(1, 301))

    async def run():
        app = console(ctx)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.snapshot is not None, "a first snapshot")
            panel = app.query_one("#agent-panel")
            panel.show(PaneView("up", history))
            await until(pilot, lambda: any("line 300 of" in line for line in screen_lines(app)), "the newest line")
            await pilot.press("g")
            bar = app.query_one(NoticeBar)
            await until(pilot, lambda: bar.display and bar.region.height > 0, "the notice")
            await until(pilot, lambda: any("line 300 of" in line for line in screen_lines(app)[:bar.region.y]),
                        "the newest line above the notice")
            scroll = panel.query_one(PaneScroll)
            assert scroll.region.bottom <= bar.region.y  # room made, nothing covered
            assert "agents: only agent main is configured" in screen_lines(app)[bar.region.y]
            assert all("only agent main" not in line for line in screen_lines(app)[:bar.region.y])  # no toast
            assert len(app._notifications) == 1  # still recorded as Textual's notification

    asyncio.run(run())


def test_an_open_incident_reads_for_so_long_in_the_summary_and_the_timeline_alike(ctx):
    clock_now = [NOW]

    async def run():
        app = LoomApp(ctx, now=lambda: clock_now[0], watch=False, refresh_every=3600)
        async with app.run_test(size=SIZE) as pilot:
            await open_timeline(pilot)
            held = next(r for r in rows(app, "timeline-table") if r[1] == "held")
            assert held[2] == "for 1m" and "last incident held for 1m: crash" in app.snapshot.header.incident.join(
                ["last incident ", ""])
            clock_now[0] = NOW + 30  # no new event: the open incident's time goes on, in both places
            app.console_screen.refresh_data()
            await until(pilot, lambda: app.snapshot.taken == NOW + 30, "the next refresh")
            await until(pilot, lambda: next(r for r in rows(app, "timeline-table") if r[1] == "held")[2]
                        == "for 1m30s", "the timeline's time so far")
            assert app.snapshot.header.incident.startswith("held for 1m30s: ")
            assert not any("ongoing" in r[2] or r[2].endswith("ago") for r in rows(app, "timeline-table"))

    asyncio.run(run())


# -- a timeline read that failed is read again at the next refresh --------------------------------


def test_a_timeline_error_is_read_again_at_the_next_refresh_not_at_the_next_event(ctx):
    # The error stayed (with no rows) until some agent wrote a new event: on a quiet system, for
    # many minutes. The store's open really refused for a while (a salvage's lock: a writer's
    # lock no longer stops a reader's open), then let go.
    from textual.app import App

    from loomtui.store import ledger
    from loomtui.store.db import DB_NAME, open_lock
    from loomtui.tui.timeline_panel import StoreEvents, TimelinePanel

    class Panel(App):
        def compose(self):
            yield TimelinePanel(StoreEvents(lambda: ctx.store), lambda: NOW, None)

    async def run():
        app = Panel()
        async with app.run_test(size=SIZE) as pilot:
            panel = app.query_one(TimelinePanel)
            await until(pilot, lambda: timeline_status(app).startswith("incidents · page 1"), "the incidents")
            count = ledger.count(ctx.store)
            panel.ledger_changed(count)
            ctx.close()  # the next read opens the store again, as after any store error
            with open_lock(ctx.state_dir / DB_NAME, exclusive=True, timeout=5):
                panel.reload()
                await until(pilot, lambda: timeline_status(app).startswith("timeline unavailable"), "the error",
                            timeout=120)
            panel.ledger_changed(count)  # a refresh: the ledger's size as it was
            await until(pilot, lambda: timeline_status(app).startswith("incidents · page 1"), "the incidents again")
            assert app.query_one("#timeline-table", DataTable).row_count > 0

    asyncio.run(run())


def test_the_newest_notice_is_on_the_screen_however_long_the_ones_before(ctx):
    # Three notices of 200 characters wrap past the bar's six rows: it clipped at the bottom, where
    # the newest was (an action's outcome), and showed the two older ones.
    from loomtui.tui.notice_bar import NoticeBar

    async def run():
        app = console(ctx)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.snapshot is not None, "a first snapshot")
            for n in range(3):
                app.notify("x" * 190 + f" END{n}", title="t", timeout=60, markup=False)
            bar = app.query_one(NoticeBar)
            await until(pilot, lambda: "END2" in "".join(screen_lines(app)[bar.region.y:bar.region.bottom]),
                        "the newest notice on the screen")
            assert bar.region.height <= 6

    asyncio.run(run())


# -- a prompt's title never pushes its answer's box off the screen ---------------------------------


def test_a_hold_reason_of_pages_leaves_the_release_prompt_s_box_on_screen():
    # A hold's reason is anyone's words (the agent's own, a Telegram user's): 1,600 characters of
    # it in the release prompt's title pushed the input below row 24, and `release` was typed blind.
    from textual.app import App
    from textual.widgets import Input

    from loomtui.tui.app import stylesheet
    from loomtui.tui.modals import PromptScreen

    title = "held by the operator: " + "migration notes " * 100 + " for agent main. Type release to end it"

    class Styled(App):
        CSS_PATH = stylesheet()  # the console's own dialogs

    async def run():
        app = Styled()
        async with app.run_test(size=SIZE) as pilot:
            app.push_screen(PromptScreen(title, "release"))
            await until(pilot, lambda: isinstance(app.screen, PromptScreen), "the prompt")
            await pilot.pause()
            box = app.screen.query_one(Input).region
            assert box.height > 0 and box.y + box.height <= SIZE[1], box
            shown = app.screen.query_one("#prompt-title", Static).content.plain
            assert shown.startswith("held by the operator: migration notes")
            assert shown.endswith("Type release to end it") and "…" in shown

    asyncio.run(run())
