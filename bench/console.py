"""Console start time and frame time with a million ledger events.

Builds a store with 1,000,000 hash-chained events (relaunches and canary runs sprinkled in),
then measures, headless at 160x48 (so the first screen is the overview beside the pane): app start
to the first full snapshot on screen, the timeline's first page, an older page, a filtered page,
and the time of one refresh (load + render, the overview's plots and lists included).
"""

from __future__ import annotations

import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, machine, median, ratio_line, summary, was_line  # noqa: F401
from textual.app import App, ComposeResult
from textual.widgets import DataTable, Static

from loomtui.context import Context
from loomtui.store import ledger
from loomtui.store.db import Store
from loomtui.tui.app import LoomApp

EVENTS = 1_000_000


def build(state: Path) -> None:
    rng = random.Random(7)
    state.mkdir(parents=True)
    store = Store.in_dir(state)
    t0 = time.time() - EVENTS
    made = 0
    while made < EVENTS:
        with store.write() as db:
            for _ in range(20_000):
                roll = rng.random()
                if roll < 0.002:
                    ledger.append_in(db, "relaunch", source="watchdog", cause=rng.choice(["crash", "canary_failed"]),
                                     detail={"mode": "resume", "old_session": "s", "new_session": "s"}, ts=t0 + made)
                elif roll < 0.02:
                    ledger.append_in(db, "canary", source="canary", detail={"result": rng.choice(["ok", "ok", "miss"])},
                                     ts=t0 + made)
                else:
                    ledger.append_in(db, "inject", source="cli", detail={"length": 10, "digest": "x", "ok": True},
                                     ts=t0 + made)
                made += 1
    store.close()


class Minimal(App):
    def compose(self) -> ComposeResult:
        yield Static("hello")


async def minimal_first_screen() -> float:
    t = time.perf_counter()
    app = Minimal()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        return time.perf_counter() - t


async def measure(ctx: Context) -> None:
    anchor = median([await minimal_first_screen() for _ in range(5)])
    t = time.perf_counter()
    app = LoomApp(ctx, watch=False, refresh_every=3600)
    async with app.run_test(size=(160, 48)) as pilot:
        while app.snapshot is None:
            await pilot.pause(0.01)
        first = time.perf_counter() - t
        print(ratio_line("start to first snapshot on screen", first, "minimal Textual app", anchor))
        print(was_line("  not to regress", first, 0.7))
        table = app.query_one("#timeline-table", DataTable)
        await pilot.press("6")
        t = time.perf_counter()
        while table.row_count == 0:
            await pilot.pause(0.01)
        # The timeline loads its first page while the app starts; this is what is left to wait for.
        print(f"timeline first page (incidents):   {(time.perf_counter() - t) * 1000:8.1f} ms more  "
              f"({table.row_count} rows)")
        timeline = app.query_one("#timeline-panel")
        for label, action in (("older page", timeline.action_older), ("events view", timeline.action_toggle_mode),
                              ("filter kind:relaunch", lambda: timeline.set_filter("kind:relaunch crash"))):
            before = timeline.generation
            t = time.perf_counter()
            action()
            while timeline.generation == before or app.workers and any(
                    w.group == "timeline" and not w.is_finished for w in app.workers):
                await pilot.pause(0.01)
            print(f"timeline {label:<25} {(time.perf_counter() - t) * 1000:8.1f} ms")
        frames = []
        for _ in range(20):
            before = app.snapshot
            t = time.perf_counter()
            app.console_screen.refresh_data()
            while app.snapshot is before:
                await pilot.pause(0.005)
            await pilot.pause(0)
            frames.append(time.perf_counter() - t)
        print(summary("one refresh (load + render)", frames))


def main() -> int:
    print(f"machine: {machine()}")
    # An existing state dir (argv[1]) is reused: building the million events takes a minute or more.
    state = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="loom-bench-console-")) / "state"
    if not (state / "loom.db").exists():
        t = time.perf_counter()
        build(state)
        print(f"built {EVENTS:,} events in {time.perf_counter() - t:.0f} s")
    ctx = Context.load(None, str(state), environ={})
    try:
        asyncio.run(measure(ctx))
    finally:
        ctx.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
