"""Snapshots of the first screen (the overview) and every panel at 80x24 and 160x48, on a fixed
state and a frozen clock."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, Static, TabbedContent
from tui_state import NOW, held_console_ctx, until, utc  # noqa: F401  (the fixtures ctx and utc)

from loomtui.tui.agent_panel import AgentPanel
from loomtui.tui.app import LoomApp
from loomtui.tui.keymap import TABS
from loomtui.tui.memory_panel import MemoryPanel
from loomtui.tui.plots import PlotNumbersScreen

pytestmark = pytest.mark.usefixtures("utc")


def loaded(app, tab: str) -> bool:
    """Everything the tab's snapshot shows has arrived: the store's data, the files, the pane."""
    if app.snapshot is None or app.query_one(TabbedContent).active != tab:
        return False
    if tab == "agent":
        return overview_loaded(app)
    if tab == "memory":
        panel = app.query_one(MemoryPanel)
        preview = app.query_one("#memory-preview-text", Static).content.plain
        return panel.report is not None and preview != "" and not preview.startswith("loading")
    if tab == "timeline":
        return (app.query_one("#timeline-table", DataTable).row_count > 0
                and app.query_one("#timeline-status", Static).content.plain.startswith("incidents · page 1"))
    rows = {"canary": app.snapshot.canary, "queue": app.snapshot.queue, "fleet": app.snapshot.jobs}[tab]
    return 0 < len(rows) == app.query_one(f"#{tab}-table", DataTable).row_count


def ready_for(tab: str):
    async def run_before(pilot) -> None:
        app = pilot.app
        await until(pilot, lambda: app.snapshot is not None, "a first snapshot")
        await pilot.press(str([t for t, _ in TABS].index(tab) + 1))
        await until(pilot, lambda: loaded(app, tab), f"the {tab} panel's data")
        await pilot.wait_for_scheduled_animations()  # the tab underline slides

    return run_before


def overview_loaded(app) -> bool:
    """The first screen has everything: the summary, the pane and, when wide, every overview list."""
    if app.snapshot is None or app.query_one("#agent-panel", AgentPanel).query_one("#pane-text", Static).content.plain \
            == "loading…":
        return False
    if not app.console_screen.wide:
        return True
    return all(app.query_one(f"#overview-{name}-table", DataTable).row_count > 0
               for name in ("incidents", "queue", "fleet"))


async def first_screen(pilot) -> None:
    await until(pilot, lambda: overview_loaded(pilot.app), "the overview's data")
    await pilot.wait_for_scheduled_animations()


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_overview_snapshot(snap_compare, ctx, size):
    """The console's first screen, no key pressed: the summary above the tabs at 80x24; the
    overview beside the pane at 160x48."""
    app = LoomApp(ctx, now=lambda: NOW, watch=False, refresh_every=3600)
    assert snap_compare(app, terminal_size=size, run_before=first_screen)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_plot_numbers_snapshot(snap_compare, ctx, size):
    async def run_before(pilot) -> None:
        await first_screen(pilot)
        await pilot.press("p")
        await until(pilot, lambda: isinstance(pilot.app.screen, PlotNumbersScreen), "the plot numbers")
        await pilot.wait_for_scheduled_animations()

    app = LoomApp(ctx, now=lambda: NOW, watch=False, refresh_every=3600)
    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
@pytest.mark.parametrize("tab", [t for t, _ in TABS])
def test_panel_snapshot(snap_compare, ctx, tab, size):
    app = LoomApp(ctx, now=lambda: NOW, watch=False, refresh_every=3600)
    assert snap_compare(app, terminal_size=size, run_before=ready_for(tab))
