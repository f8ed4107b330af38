"""The console's hold key: `h` asks why (and for how long) and holds; with a hold in force the
same key offers the release. Both run the actions module the CLI and Telegram use."""

from __future__ import annotations

import asyncio

import pytest
from test_tui import screen_text, until

from loomtui.tui.app import LoomApp
from loomtui.tui.modals import PromptScreen

pytestmark = pytest.mark.e2e


def holds(app) -> list[tuple[str, bool]]:
    return [(text, ok) for action, text, ok in app.outcomes if action == "hold"]


def test_the_hold_key_holds_with_a_reason_and_releases(make_harness):
    harness = make_harness()
    harness.start()
    ctx = harness.ctx()

    async def run():
        app = LoomApp(ctx, watch=True)
        async with app.run_test(size=(120, 36)) as pilot:
            await until(pilot, lambda: app.snapshot is not None, what="a first snapshot")
            await pilot.press("h")
            await until(pilot, lambda: isinstance(app.screen, PromptScreen), what="the hold prompt")
            await pilot.press(*"30m")
            await pilot.press("enter")  # a duration without a reason is not a hold: the prompt says so, open
            await until(pilot, lambda: "a hold needs a reason" in screen_text(app), what="what a hold needs")
            assert isinstance(app.screen, PromptScreen)
            assert holds(app) == [] and not harness.events("hold_placed")

            await pilot.press(*" [b]new model[/b]")
            await pilot.press("enter")
            await until(pilot, lambda: holds(app), what="the hold outcome")
            assert holds(app)[-1][0].startswith("held by the operator: [b]new model[/b] (30m left)")
            placed = harness.events("hold_placed")[-1]
            assert placed["source"] == "tui" and placed["detail"]["until"] > placed["ts"]
            await until(pilot, lambda: app.snapshot.header.hold.startswith("held by the operator"),
                        what="the hold in the header")
            assert "[b]new model[/b]" in screen_text(app)  # shown literally, never as markup

            await pilot.press("h")
            await until(pilot, lambda: isinstance(app.screen, PromptScreen), what="the release prompt")
            await pilot.press(*"release")
            await pilot.press("enter")
            await until(pilot, lambda: len(holds(app)) == 2, what="the release outcome")
            assert holds(app)[-1] == ("released the operator's hold ([b]new model[/b]); automatic recovery is on "
                                      "again", True)
            assert harness.events("hold_cleared")[-1]["source"] == "tui"
            await until(pilot, lambda: not app.snapshot.header.hold, what="the header without the hold")

    try:
        asyncio.run(run())
    finally:
        ctx.close()
