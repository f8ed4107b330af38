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
