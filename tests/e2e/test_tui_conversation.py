"""With the stream-json driver the console's agent panel shows the conversation from the pump's
transcript, as it grows, with untrusted text shown literally."""

from __future__ import annotations

import asyncio

from textual.widgets import Static
from tui_state import HOSTILE, NOW, populate, write_config

from loomtui.context import Context
from loomtui.pump import transcript
from loomtui.tui.app import LoomApp


async def until(pilot, predicate, timeout: float = 60.0, what: str = "condition"):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        value = predicate()
        if value:
            return value
        await pilot.pause(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def pane_text(app) -> str:
    return app.query_one("#agent-panel #pane-text", Static).content.plain


def test_the_agent_panel_shows_the_conversation_as_it_grows(tmp_path):
    config = write_config(tmp_path, socket=f"loomtest-none-{tmp_path.name[-6:]}")
    text = config.read_text().replace('[agent]\n', '[agent]\ndriver = "stream-json"\n', 1)
    config.write_text(text)
    ctx = Context.load(str(config), None, environ={})
    populate(ctx)
    assert ctx.config.agent.driver == "stream-json"
    writer = transcript.Writer(transcript.path_in(ctx.state_dir))
    writer.append("in", seq=1, origin="telegram", ref="tg-1", text="what is on today?")
    writer.append("out", event={"type": "assistant", "message": {"content": [{"type": "text", "text": HOSTILE}]}})
    writer.append("out", event={"type": "result", "subtype": "success", "is_error": False, "result": HOSTILE})

    async def run():
        app = LoomApp(ctx, now=lambda: NOW, refresh_every=0.3, watch=False)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("1")
            await until(pilot, lambda: "what is on today?" in pane_text(app), what="the first turn")
            shown = pane_text(app)
            assert "you (telegram) › what is on today?" in shown
            assert "[/foo] [bold]x [link=x]y" in shown and "\x1b" not in shown and "\x07" not in shown
            assert "no agent pane" in shown  # no tmux here: said, and the conversation still shows
            writer.append("in", seq=2, origin="canary", ref="", text="touch the ack file")
            await until(pilot, lambda: "you (canary) › touch the ack file" in pane_text(app), what="the next turn")
            await pilot.press("q")

    try:
        asyncio.run(run())
    finally:
        writer.close()
        ctx.close()
