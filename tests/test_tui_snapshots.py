"""Snapshots of every panel at 80x24 and 160x48, on a fixed state and a frozen clock."""

from __future__ import annotations

import os
import time

import pytest
from textual.widgets import DataTable
from tui_state import NOW, populate, write_config

from loomtui.context import Context
from loomtui.tui.app import LoomApp
from loomtui.tui.keymap import TABS


@pytest.fixture(autouse=True)
def utc():
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


@pytest.fixture
def ctx(tmp_path):
    config = write_config(tmp_path, socket="loomtest-snapshot-absent")
    context = Context.load(str(config), None, environ={})
    populate(context, held=True)
    yield context
    context.close()


def ready_for(tab: str):
    async def run_before(pilot) -> None:
        app = pilot.app
        deadline = time.monotonic() + 20
        while app.snapshot is None and time.monotonic() < deadline:
            await pilot.pause(0.05)
        await pilot.press(str([t for t, _ in TABS].index(tab) + 1))
        table_id = {"canary": "canary-table", "queue": "queue-table", "fleet": "fleet-table",
                    "timeline": "timeline-table", "memory": "memory-table"}.get(tab)
        if table_id:
            while time.monotonic() < deadline:
                tables = app.query(f"#{table_id}")
                if tables and tables.first(DataTable).row_count:
                    break
                await pilot.pause(0.05)
        await pilot.pause(0.3)

    return run_before


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
@pytest.mark.parametrize("tab", [t for t, _ in TABS])
def test_panel_snapshot(snap_compare, ctx, tab, size):
    app = LoomApp(ctx, now=lambda: NOW, watch=False, refresh_every=3600)
    assert snap_compare(app, terminal_size=size, run_before=ready_for(tab))
