"""The overview, its plots and the footer: the numbers the plots draw, the re-layout on resize,
and every tab's footer at 80 columns (no tmux needed: the socket is absent on purpose)."""

from __future__ import annotations

import asyncio
import time

import pytest
from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable, Sparkline, TabbedContent
from textual.widgets._footer import FooterKey
from tui_state import HOSTILE, NOW, held_console_ctx, until, utc  # noqa: F401  (the fixtures ctx and utc)

from loomtui.tui import series
from loomtui.tui.agent_panel import AgentPanel
from loomtui.tui.app import LoomApp
from loomtui.tui.footer import FittingFooter, fit
from loomtui.tui.keymap import APP_KEYS, TABS
from loomtui.tui.modals import HelpScreen
from loomtui.tui.overview_panel import OverviewPanel
from loomtui.tui.plots import PlotNumbersScreen, PlotsPanel, numbers

pytestmark = pytest.mark.usefixtures("utc")


def screen_lines(app) -> list[str]:
    return [strip.text for strip in app.screen._compositor.render_strips()]


# -- the numbers behind the plots ---------------------------------------------------------------


class P:
    def __init__(self, sent_at, result, latency=None):
        self.sent_at, self.result, self.latency = sent_at, result, latency


def test_latency_keeps_settled_probes_oldest_first_and_marks_misses():
    newest_first = [P(50, "ok", 0.5), P(40, "pending"), P(30, "miss"), P(20, "skipped"), P(10, "ok", 2.0),
                    P(5, "error")]
    lat = series.latency(newest_first)
    assert [p.sent_at for p in lat.points] == [5, 10, 30, 50]
    assert lat.marks == "! ✗ "
    # Not acked: drawn as tall as the slowest ack, so real latencies keep their scale.
    assert lat.values == [2.0, 2.0, 2.0, 0.5]
    assert lat.misses == 1
    assert len(series.latency([P(i, "ok", 1.0) for i in range(100)], last=60).points) == 60


def test_relaunches_by_hour_counts_each_cause_in_its_hour_and_ignores_older_ones():
    now = 100 * series.HOUR
    found = series.relaunches_by_hour([(now - 10, "crash"), (now - 20, "crash"), (now - 2.5 * series.HOUR, "exit"),
                                       (now - 25 * series.HOUR, "crash"), (now + 5, "crash"), (now, "")], now)
    assert list(found) == ["crash", "exit", "unknown"]  # busiest first
    assert found["crash"][-1] == 2 and sum(found["crash"]) == 2
    assert found["exit"][-3] == 1 and sum(found["exit"]) == 1
    assert found["unknown"][-1] == 1
    assert all(len(v) == series.DAY_HOURS for v in found.values())


def test_oldest_waiting_is_the_age_of_the_oldest_unwitnessed_item_at_each_hour():
    now = 100 * series.HOUR
    spans = [(now - 3 * series.HOUR, now - 1.5 * series.HOUR),   # waited 1.5 h, then witnessed
             (now - 1 * series.HOUR - 60, None)]                  # still waiting
    ages = series.oldest_waiting(spans, now)
    assert ages[:-3] == [0.0] * (series.DAY_HOURS - 3)
    assert ages[-3] == series.HOUR        # at now-2h the first had waited an hour
    assert ages[-2] == 60                 # at now-1h the first is done and the second is a minute old
    assert ages[-1] == series.HOUR + 60


@pytest.mark.parametrize("length,width", [(6, 86), (60, 20), (60, 60), (7, 3), (1, 5), (0, 4)])
def test_mark_columns_follow_the_sparkline_and_never_hide_a_miss(length, width):
    cols = series.columns(length, width)
    assert len(cols) == width
    if length:
        assert sorted({i for c in cols for i in c}) == list(range(length))  # every value is shown somewhere
    marks = " " * length
    if length:
        marks = marks[:length // 2] + "✗" + marks[length // 2 + 1:]
        assert "✗" in series.mark_row(marks, width)
    assert len(series.mark_row(marks, width)) == width


# -- the footer --------------------------------------------------------------------------------


def test_fit_keeps_quit_and_help_and_drops_the_least_needed_whole():
    keys = [(b, b.key if len(b.key) == 1 else "/") for b in APP_KEYS if b.show]
    panel = Binding("e", "edit", "Edit", id="memory.edit")
    shown = fit([(panel, "e"), *keys], 40)
    ids = [b.id for b in shown]
    assert "loom.quit" in ids and "loom.help" in ids and "memory.edit" in ids
    assert "loom.attach" not in ids
    display = dict(((b.id, d) for b, d in [(panel, "e"), *keys]))
    assert sum(len(display[b.id]) + len(b.description) + 2 for b in shown) <= 40
    assert [b.id for b in fit([(panel, "e"), *keys], 1000)] == ["memory.edit", *[b.id for b, _ in keys]]


def fitted_actions(app) -> list[str]:
    """The actions the footer should show now: the screen's shown keys, one per action, fitted."""
    unique: dict[str, Binding] = {}
    for _, binding, _, _ in app.screen.active_bindings.values():
        if binding.show and app.screen.shows_action(binding.action):  # g and n: only with several agents
            unique.setdefault(binding.action, binding)
    footer = app.screen.query_one(FittingFooter)
    width = footer.size.width or app.size.width
    return [b.action for b in fit([(b, app.get_key_display(b)) for b in unique.values()], width - 1)]


def test_every_tabs_footer_at_80_columns_shows_quit_and_no_key_cut(ctx):
    async def run():
        app = LoomApp(ctx, now=lambda: NOW, watch=False, refresh_every=3600)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.snapshot is not None, "a first snapshot")
            for n, (tab, _) in enumerate(TABS, start=1):
                await pilot.press(str(n))
                await until(pilot, lambda: app.query_one(TabbedContent).active == tab, f"tab {tab}")

                def footer_ok() -> bool:
                    # The footer recomposes after the focus moves: wait until it shows what `fit`
                    # picks from this tab's keys (not the last tab's), then check it is whole.
                    keys = list(app.screen.query(FooterKey))
                    return [k.action for k in keys] == fitted_actions(app) and any(
                        k.description == "Quit" for k in keys) and all(
                        k.region.right <= 80 and k.region.width > 0 for k in keys)

                await until(pilot, footer_ok, f"a whole footer on the {tab} tab")
                assert "q Quit" in screen_lines(app)[-1], (tab, screen_lines(app)[-1])
            # The Memory tab keeps its own keys too (the one that lost Quit before).
            await pilot.press("5")
            await until(pilot, lambda: "e Edit" in screen_lines(app)[-1] and "q Quit" in screen_lines(app)[-1],
                        "the memory keys beside Quit")

    asyncio.run(run())


# -- the overview ------------------------------------------------------------------------------


def test_the_overview_appears_at_150_columns_and_goes_away_without_a_restart(ctx):
    async def run():
        app = LoomApp(ctx, now=lambda: NOW, watch=False, refresh_every=3600)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.snapshot is not None, "a first snapshot")
            screen = app.console_screen
            tabs = app.query_one(TabbedContent)
            overview, pane, side = app.query_one(OverviewPanel), app.query_one("#agent-panel"), \
                app.query_one("#side-agent")
            assert not screen.wide and pane.display and not overview.display and not side.display
            summary = "\n".join(screen_lines(app)[:3])
            for bit in ("agent HELD", "supervisor heartbeat", "canary ok", "1 open · 1 claimed", "hold held at the ceiling",
                        "last incident held"):
                assert bit in summary, bit
            assert str(tabs.get_tab("agent").label) == "Agent 1"

            await pilot.resize_terminal(160, 48)
            await until(pilot, lambda: screen.wide and overview.display, "the wide layout")
            # The pane shows once, on the right; the overview takes tab 1's place.
            assert side.display and not pane.display
            assert str(tabs.get_tab("agent").label) == "Overview 1"
            await until(pilot, lambda: app.query_one("#overview-queue-table", DataTable).row_count == 2,
                        "the waiting queue items")
            visible_panes = [w for w in app.query(AgentPanel) if w.display and w.region.area]
            assert [w.id for w in visible_panes] == ["side-agent"]
            # Tab keys still work wide, and back.
            await pilot.press("3")
            await until(pilot, lambda: tabs.active == "queue", "the queue tab")
            await pilot.press("1")
            await until(pilot, lambda: tabs.active == "agent" and overview.region.area > 0, "the overview again")

            await pilot.resize_terminal(80, 24)
            await until(pilot, lambda: not screen.wide and pane.display and not overview.display, "the narrow layout")
            assert str(tabs.get_tab("agent").label) == "Agent 1"

    asyncio.run(run())


def test_overview_cells_and_plot_numbers_are_text_and_hostile_text_stays_literal(ctx):
    async def run():
        app = LoomApp(ctx, now=lambda: NOW, watch=False, refresh_every=3600)
        async with app.run_test(size=(160, 48)) as pilot:
            table = app.query_one("#overview-queue-table", DataTable)
            await until(pilot, lambda: table.row_count == 2, "the waiting queue items")
            for row in range(table.row_count):
                assert all(isinstance(c, Text) for c in table.get_row_at(row))
            assert table.get_row_at(0)[2].plain == "news[/bold]letter"
            assert "[/foo] [bold]x [link=x]y" in table.get_row_at(0)[4].plain
            assert "\x1b" not in table.get_row_at(0)[4].plain
            plots = app.query_one(PlotsPanel)
            assert plots.query_one("#latency-spark", Sparkline).data == [0.8, 1.4, 1.4, 1.4, 1.4, 0.6]
            await pilot.press("p")
            await until(pilot, lambda: isinstance(app.screen, PlotNumbersScreen), "the plot numbers")
            text = "\n".join(screen_lines(app))
            assert "canary latency" in text and "relaunches per hour" in text and "oldest waiting" in text
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, PlotNumbersScreen), "the numbers closed")
            await pilot.press("question_mark")
            await until(pilot, lambda: isinstance(app.screen, HelpScreen), "help")
            assert "Plots" in "\n".join(screen_lines(app))

    asyncio.run(run())
    titles = [title.plain for title, _ in numbers(app_snapshot(ctx))]
    assert titles[0].startswith("canary latency") and HOSTILE not in "".join(titles)


def app_snapshot(ctx):
    from loomtui.tui.snapshot import Source

    return Source(ctx).load(NOW)


def test_the_overview_follows_new_ledger_events_and_reads_them_once(ctx):
    from loomtui.store import ledger
    from loomtui.tui.snapshot import Source

    source = Source(ctx)
    first = source.load(NOW)
    again = source.load(NOW + 1)
    assert again.overview.incidents is first.overview.incidents  # no new event: nothing read again
    ledger.append(ctx.store, "relaunch", source="watchdog", cause="crash",
                  detail={"mode": "resume", "old_session": "s", "new_session": "s"}, ts=NOW + 2)
    later = source.load(NOW + 3)
    # The held incident (the state's last) now counts the relaunch.
    assert first.overview.incidents[0].relaunches == 0 and later.overview.incidents[0].relaunches == 1
    assert (NOW + 2, "crash") in later.overview.relaunches and (NOW + 2, "crash") not in first.overview.relaunches
    assert "1 relaunch (resume)" in later.header.incident


def test_the_summary_says_who_holds_why_and_how_long_and_an_unwitnessed_relaunch(ctx):
    import json

    from loomtui.agent.recovery import HOLD_KEY
    from loomtui.report import status as status_mod
    from loomtui.store import ledger
    from loomtui.tui.header import render_header
    from loomtui.tui.snapshot import PaneView, header_from

    now = time.time()  # the hold's end is judged on the wall clock by the status model

    def header():
        return header_from(status_mod.gather(ctx, events=0, now=now, look=False), PaneView("up", "", ""), ctx.config)

    held = header()
    assert held.agent_level == "bad" and held.hold.startswith("held at the ceiling: ceiling")
    ctx.store.set_meta(HOLD_KEY, json.dumps({"ts": now - 60, "by": "operator", "reason": "moving the box",
                                             "until": now + 3600}))
    operator = header()
    assert operator.hold.startswith("held by the operator: moving the box (") and operator.hold.endswith(" left)")
    assert operator.agent_level == "bad"
    ctx.store.set_meta(HOLD_KEY, json.dumps({"ts": now - 3600, "by": "operator", "reason": "done",
                                             "until": now - 1}))
    expired = header()
    assert expired.hold == "" and expired.agent == "running"  # a timed hold ends by itself
    ledger.append(ctx.store, "relaunch", source="watchdog", cause="crash",
                  detail={"mode": "resume", "old_session": "s", "new_session": "s"}, ts=now - 5)
    claimed = header()
    assert claimed.claim == "unwitnessed relaunch 5s ago (crash)"
    assert "unwitnessed" in render_header(claimed).plain and not expired.claim
    # The agent's own word says it too, first on the header, as `loom status` does: not "running" in
    # green while nothing has heard it since (the claim's line can be cut at 80 columns).
    assert (claimed.agent, claimed.agent_level) == ("unwitnessed", "warn")
    assert render_header(claimed).plain.split("\n")[0].count("unwitnessed") == 1
