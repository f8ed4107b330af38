"""Issue 18's must-show for the console: two demo agents on one real tmux server; the keyboard
selects agent B and the recycle key relaunches B, and only B."""

from __future__ import annotations

import asyncio
import sys

import pytest
from conftest import REPO
from harness import toml_value, wait_for
from test_tui import screen_text, until

from loomtui.tui.agents_view import AgentsScreen
from loomtui.tui.app import LoomApp
from loomtui.tui.modals import RecycleScreen

pytestmark = pytest.mark.e2e

NAMES = ("alpha", "beta")
UP = ("running", "unwitnessed")  # no supervisor here: no canary witnesses the start


def two_agents(harness) -> None:
    """Rewrite the harness's config as two named demo agents on its tmux socket (a session each,
    named after the agent), each with its own demo data and bot, so their pollers are their own."""
    py = sys.executable
    process_match = toml_value(r"loomtui\.demo\.agent")
    lines = [f"state_dir = {toml_value(str(harness.state_dir))}"]
    for name in NAMES:
        lines += ["[[agents]]", f'name = "{name}"', f"tmux_socket = {toml_value(harness.socket)}",
                  f"cwd = {toml_value(str(harness.workdir))}",
                  f"fresh_command = {toml_value(f'{py} -m loomtui.demo.agent --session-id {{session_id}}')}",
                  f"resume_command = {toml_value(f'{py} -m loomtui.demo.agent --resume {{session_id}}')}",
                  f"process_match = {process_match}",
                  "poller_match = " + toml_value(rf"loomtui\.demo\.poller --bot {harness.bot}-{name}\b"),
                  'boot_grace = "2s"', 'resume_check = "1500ms"', 'stop_grace = "2s"',
                  "env = " + toml_value({"LOOM_DEMO_DATA": str(harness.data_dir / name),
                                         "LOOM_DEMO_BOT": f"{harness.bot}-{name}", "PYTHONPATH": str(REPO)})]
    harness.config_path.write_text("\n".join(lines) + "\n")


def screen_of(harness, name: str) -> str:
    return harness.tmux("capture-pane", "-p", "-J", "-t", f"={name}:0.0").stdout


def pane_pid(harness, name: str) -> int | None:
    out = harness.tmux("list-panes", "-t", f"={name}:0", "-F", "#{pane_dead} #{pane_pid}").stdout.split()
    return int(out[1]) if len(out) >= 2 and out[0] == "0" else None


def relaunches(harness, name: str) -> list[dict]:
    return [e for e in harness.events("relaunch") if e["agent"] == name]


def test_the_console_switches_agents_with_the_keyboard_and_recycles_the_selected_one_only(make_harness):
    from loomtui import actions

    harness = make_harness()
    two_agents(harness)
    ctx = harness.ctx()
    assert ctx.config.agent_names == list(NAMES)
    for name in NAMES:
        agent = ctx.for_agent(name)
        try:
            assert actions.recycle(agent, "fresh", source="cli", reason="test start").ok
        finally:
            agent.close()
        wait_for(lambda name=name: "> " in screen_of(harness, name), 60, what=f"{name}'s prompt")
    before = {name: pane_pid(harness, name) for name in NAMES}
    assert all(before.values()) and before["alpha"] != before["beta"]

    async def run():
        app = LoomApp(ctx, watch=True)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.snapshot and app.snapshot.agent == "alpha"
                        and app.snapshot.header.agent == "unwitnessed", 60, what="alpha up (no canary acked yet)")
            await pilot.press("g")
            await until(pilot, lambda: isinstance(app.screen, AgentsScreen) and app.screen.rows is not None
                        and all(r.state in UP for r in app.screen.rows), 60,
                        what="both agents up in the agents view")
            await pilot.press("down", "enter")
            await until(pilot, lambda: app.snapshot and app.snapshot.agent == "beta"
                        and app.snapshot.header.agent == "unwitnessed", 60, what="beta selected and up")
            assert " beta " in screen_text(app)
            await pilot.press("r")
            await until(pilot, lambda: isinstance(app.screen, RecycleScreen), what="the recycle dialog")
            await pilot.press("1")
            await until(pilot, lambda: any(a == "recycle" for a, _, _ in app.outcomes), 120,
                        what="the recycle's outcome")
            assert app.outcomes[-1][2], app.outcomes[-1]
            await pilot.press("q")

    asyncio.run(run())
    by_console = [e for e in harness.events("relaunch") if e["source"] == "tui"]
    assert [(e["agent"], e["cause"]) for e in by_console] == [("beta", "operator_resume")]
    assert len(relaunches(harness, "alpha")) == 1  # its start, and nothing since
    wait_for(lambda: pane_pid(harness, "beta") not in (None, before["beta"]), 60, what="beta's new pane process")
    assert pane_pid(harness, "alpha") == before["alpha"]
