"""The console's agent line shows the turn as the agent's hooks tell it, in `loom status`'s words
(issue 26), and a hold the harness placed reads plainly wherever holds are shown.

A real store written by Loom's own functions (tests/tui_state.py), hook events left as the hook
command leaves them and recorded by the hooks loop's own ingest, the console run by Textual's
pilot at 80x24; the assertions read what the screen shows."""

from __future__ import annotations

import asyncio
import json
import os

import pytest
from fake_clock import FakeClock
from tui_state import NOW, until, utc, write_config, populate  # noqa: F401  (the fixture utc)

from loomtui import clock
from loomtui.agent.recovery import HOLD_KEY
from loomtui.context import Context
from loomtui.hooks import ingest, settings
from loomtui.report import status as status_mod
from loomtui.tui.app import LoomApp

pytestmark = pytest.mark.usefixtures("utc")
SIZE = (80, 24)
HOOKED = ('fresh_command = "claude --settings {hook_settings} --session-id {session_id}"\n'
          'resume_command = "claude --settings {hook_settings} --resume {session_id}"\n')


def screen_lines(app) -> list[str]:
    return [strip.text for strip in app.screen._compositor.render_strips()]


def console(ctx) -> LoomApp:
    return LoomApp(ctx, now=lambda: NOW, watch=False, refresh_every=3600)


@pytest.fixture(name="hooked")
def hooked_console_ctx(tmp_path):
    """The console-worthy state, its agent's commands passing Loom's hooks settings, no hold."""
    config = write_config(tmp_path, socket="loomtest-console-turn-absent")
    config.write_text(config.read_text().replace("[agent]\n", "[agent]\n" + HOOKED, 1))
    context = Context.load(str(config), None, environ={})
    settings.write(context.agent_dir)
    populate(context)
    with context.store.write() as db:
        db.execute("DELETE FROM meta WHERE key = ?", (HOLD_KEY,))
    yield context
    context.close()


def hook(ctx: Context, n: int, at: float, event: str, **fields) -> None:
    """One event file as the hook command leaves it, written at `at`, recorded by the hooks loop's ingest."""
    path = settings.events_dir(ctx.agent_dir) / f"ev.{n}.json"
    path.write_text(json.dumps({"session_id": "s-1", "hook_event_name": event, **fields}))
    os.utime(path, (at, at))
    with clock.use(FakeClock(at, 9000.0 + at - NOW, "b-hooks")):
        assert len(ingest.collect(ctx)) == 1


def test_the_agent_line_shows_the_busy_turn_as_loom_status_says_it(hooked):
    hook(hooked, 1, NOW - 245, "UserPromptSubmit", prompt="refactor the sender")
    hook(hooked, 2, NOW - 5, "PostToolUse", tool_name="Bash", tool_input={"command": "[bold]make[/bold]"})
    said = status_mod.gather(hooked, events=0, now=NOW, look=False).turn.describe()
    assert said == "busy 4m5s, last tool Bash; last hook PostToolUse 5s ago"

    async def run():
        app = console(hooked)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.snapshot is not None and app.snapshot.header.turn, "the turn")
            await pilot.pause()
            top = screen_lines(app)[:5]
            assert top[3].strip() == "turn busy 4m5s, last tool Bash  last hook PostToolUse 5s ago"
            assert top[2].startswith(" hold none") and "Agent 1" in top[4]  # a line of its own, the tabs below

    asyncio.run(run())


def test_a_permission_prompt_shows_its_words_whole_never_as_markup(hooked):
    hook(hooked, 1, NOW - 60, "UserPromptSubmit", prompt="deploy")
    hook(hooked, 2, NOW - 30, "Notification", notification_type="permission_prompt",
         message="Claude needs your permission to use [b]Bash[/b]")

    async def run():
        app = console(hooked)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.snapshot is not None and app.snapshot.header.turn, "the turn")
            await pilot.pause()
            line = screen_lines(app)[3]
            # The prompt's words whole, literally; the last hook's age after them is what 80 columns cut.
            assert line.startswith(" turn waiting for permission: Claude needs your permission to use [b]Bash[/b]")
            assert line.rstrip().endswith("…")
            assert app.snapshot.header.turn_level == "warn"

    asyncio.run(run())


def test_no_hooks_configured_no_turn_line(tmp_path):
    config = write_config(tmp_path, socket="loomtest-console-turn-absent")
    ctx = Context.load(str(config), None, environ={})
    populate(ctx)

    async def run():
        app = console(ctx)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.snapshot is not None, "a first snapshot")
            await pilot.pause()
            assert app.snapshot.header.turn == ""
            assert not any(line.startswith(" turn ") for line in screen_lines(app)[:4])
            assert "Agent 1" in screen_lines(app)[3]  # three lines of summary, the tabs right below

    try:
        asyncio.run(run())
    finally:
        ctx.close()


def test_a_rate_limit_hold_reads_plainly_in_the_summary_and_the_release_dialog(hooked):
    from loomtui.tui.modals import PromptScreen

    hook(hooked, 1, NOW - 180, "UserPromptSubmit", prompt="go on")
    hook(hooked, 2, NOW - 120, "StopFailure", error="rate_limit", error_details="429 Too Many Requests")

    async def run():
        app = console(hooked)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.snapshot is not None and app.snapshot.header.hold, "the harness's hold")
            await pilot.pause()
            top = screen_lines(app)[:4]
            assert "agent HELD" in top[0]
            assert "hold rate-limited until a turn succeeds (28m left)  last incident" in top[2]
            assert top[3].strip() == "turn idle  last hook StopFailure 2m ago"
            await pilot.press("h")
            await until(pilot, lambda: isinstance(app.screen, PromptScreen), "the release dialog")
            await pilot.pause()
            words = " ".join(" ".join(line.replace("█", " ").split()) for line in screen_lines(app))
            assert "rate-limited until a turn succeeds (28m left). Type release to end it" in words

    asyncio.run(run())


def test_the_agents_view_says_a_harness_hold_plainly():
    from loomtui.agent.hold_rules import Hold
    from loomtui.tui.agents_view import hold_cell

    held = Hold(NOW - 120, "harness", "the agent CLI reported billing_error", NOW + 1680, "billing")
    assert hold_cell(held, NOW) == "billing issue 28m: until a turn succeeds"
    operator = Hold(NOW - 60, "operator", "swapping the model", NOW + 1740)
    assert hold_cell(operator, NOW) == "operator 29m: swapping the model"
