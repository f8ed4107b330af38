"""The console with several agents, on a real store and no tmux server: the agents view, and
selecting an agent switches every panel and the summary to it. With one agent nothing shows."""

from __future__ import annotations

import asyncio

import pytest
from textual.widgets import DataTable, Static
from tui_state import NOW, populate_agents, until, utc, write_agents_config  # noqa: F401  (utc: a fixture)

from loomtui.agent.hold_rules import Hold
from loomtui.agent.records import LaunchRecord
from loomtui.timing import Instant
from loomtui.context import Context
from loomtui.report.status import AgentLook, CanaryLast, RelaunchClaim, Status
from loomtui.tui import agents_view
from loomtui.tui.agents_view import AgentsScreen
from loomtui.tui.app import LoomApp
from loomtui.tui.keymap import APP_KEYS
from loomtui.tui.memory_panel import MemoryPanel
from loomtui.tui.modals import PromptScreen, RecycleScreen

pytestmark = pytest.mark.usefixtures("utc")


@pytest.fixture
def agents_ctx(tmp_path, request):
    config = write_agents_config(tmp_path, socket=f"loomtest-agents-{tmp_path.name[-6:]}-absent")
    ctx = Context.load(str(config), None, environ={})
    populate_agents(ctx)
    yield ctx
    ctx.close()


def screen_text(app) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def table(app, table_id: str) -> list[list[str]]:
    found = app.screen.query_one(f"#{table_id}", DataTable)
    return [[cell.plain for cell in found.get_row_at(i)] for i in range(found.row_count)]


def agents_loaded(app) -> bool:
    return isinstance(app.screen, AgentsScreen) and app.screen.rows is not None \
        and app.screen.query_one("#agents-table", DataTable).row_count == 2


# -- the rows, as pure functions of a status -----------------------------------------------------


def status(look: AgentLook | None, **kw) -> Status:
    base = dict(taken=NOW, state_dir="/s", config=None, pinned_session=None, ledger_events=0, heartbeats={},
                last_events=[], outbox={}, conflict=None, agent=look, canary=None, canary_settled=None,
                queue={"open": 0, "claimed": 0}, hold=None, last_launch=None, since_launch=None)
    base.update(kw)
    return Status(**base)


UP = AgentLook("up", pane={"dead": False}, tree={"process": "present", "pid": 7})


@pytest.mark.parametrize(("look", "kw", "want"), [
    (UP, {}, ("running", "ok")),
    (UP, {"since_launch": 1.0, "last_launch": LaunchRecord(NOW - 1.0)}, ("booting", "warn")),
    (UP, {"since_launch": 9.0, "last_launch": LaunchRecord(NOW - 9.0)}, ("running", "ok")),  # past its grace
    (UP, {"since_launch": 1.0, "last_launch": LaunchRecord(NOW - 1.0, ready=Instant(NOW))}, ("running", "ok")),
    (UP, {"hold": Hold(NOW - 60, "operator", "swap")}, ("running", "ok")),  # the hold has its own column
    (UP, {"relaunch": RelaunchClaim(1, NOW - 30, "crash", "resume", "watchdog")}, ("unwitnessed", "warn")),
    (UP, {"relaunch": RelaunchClaim(1, NOW - 30, "crash", "resume", "watchdog", 2, NOW - 20)}, ("running", "ok")),
    (AgentLook("gone", "no session"), {}, ("no tmux session", "bad")),
    (AgentLook("unknown", "timed out"), {}, ("tmux unknown", "warn")),
    (None, {}, ("tmux unknown", "warn")),
    (AgentLook("up", pane={"dead": True}), {}, ("exited", "bad")),
    (AgentLook("up", pane={"dead": False}, tree={"process": "missing"}), {}, ("process missing", "warn")),
])
def test_state_of(look, kw, want):
    assert agents_view.state_of(status(look, **kw), boot_grace=5.0) == want


def test_a_row_says_the_last_settled_canary_the_hour_s_relaunches_the_open_items_and_the_hold():
    st = status(UP, canary_settled=CanaryLast("miss", 125.0, None, ""), queue={"open": 3, "claimed": 1},
                hold=Hold.from_record({"ts": NOW - 60, "by": "operator", "reason": "swap", "until": NOW + 600}))
    row = agents_view.row_from("beta", st, relaunches=2, boot_grace=5.0)
    assert (row.name, row.state, row.canary, row.canary_level, row.relaunches, row.open_items) == \
        ("beta", "running", "miss 2m5s ago", "bad", 2, 3)
    assert row.hold == "operator 10m: swap"
    untimed = status(UP, hold=Hold.from_record({"ts": NOW - 60, "by": "ceiling", "reasons": ["3 relaunches in 1h"]}))
    assert agents_view.row_from("a", untimed, 0, 5.0).hold == "ceiling: 3 relaunches in 1h"
    expired = status(UP, hold=Hold.from_record({"ts": NOW - 700, "by": "operator", "reason": "swap", "until": NOW - 100}))
    assert agents_view.row_from("a", expired, 0, 5.0).hold == ""
    assert agents_view.row_from("a", status(UP), 0, 5.0).canary == "no probe yet"
    # Cells are Text, never markup: a hostile reason stays literal.
    hostile = agents_view.cells(agents_view.AgentRow("a", "[b]x[/b]", hold="[link=y]z"))
    assert [c.plain for c in hostile][1] == "[b]x[/b]" and hostile[5].plain == "[link=y]z"


def test_each_agent_s_row_is_its_own(agents_ctx):
    rows = {r.name: r for r in agents_view.AgentContexts(agents_ctx).rows(NOW)}
    alpha, beta = rows["alpha"], rows["beta"]
    assert (alpha.relaunches, beta.relaunches) == (0, 2)  # alpha's relaunch is three hours old
    assert (alpha.open_items, beta.open_items) == (0, 1)
    assert alpha.canary.startswith("ok 10m") and beta.canary.startswith("miss 5m")
    assert alpha.hold == "" and "swapping [b]model[/b]" in beta.hold
    assert alpha.state == beta.state == "no tmux session"


# -- the console -----------------------------------------------------------------------------------


def test_the_keyboard_selects_an_agent_and_every_panel_follows(agents_ctx):
    async def run():
        app = LoomApp(agents_ctx, now=lambda: NOW, watch=False, refresh_every=3600)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.snapshot is not None, "a first snapshot")
            assert app.snapshot.agent == "alpha" and " alpha " in screen_text(app)
            await pilot.press("2")
            await until(pilot, lambda: len(table(app, "canary-table")) == 1, "alpha's one probe")
            await pilot.press("g")
            await until(pilot, lambda: agents_loaded(app), "the agents view")
            assert [r[0] for r in table(app, "agents-table")] == ["alpha", "beta"]
            # The palette over the view offers none of the console's actions: they ran on alpha
            # beneath a view whose cursor was on beta.
            titles = {c.title for c in app.get_system_commands(app.screen)}
            assert not titles & {"Recycle", "Canary", "Hold", "Next agent", "Agents"}, titles
            await pilot.press("down", "enter")
            await until(pilot, lambda: app.snapshot is not None and app.snapshot.agent == "beta",
                        "beta's snapshot")
            assert not isinstance(app.screen, AgentsScreen)
            assert " beta " in screen_text(app) and "held by the operator" in screen_text(app)
            await until(pilot, lambda: [r[2] for r in table(app, "canary-table")] == ["miss", "ok"], "beta's probes")
            await pilot.press("3")
            assert [r[2] for r in table(app, "queue-table")] == ["beta-job"]
            await pilot.press("4")
            assert [r[0] for r in table(app, "fleet-table")] == ["beta-job"]
            await pilot.press("6", "t")
            await until(pilot, lambda: "events · page 1" in app.query_one("#timeline-status", Static).content.plain
                        and table(app, "timeline-table"), "beta's events")
            kinds = [r[1] for r in table(app, "timeline-table")]
            assert kinds.count("relaunch") == 2 and kinds.count("canary") == 2  # beta's alone

            # The keys act on the selected agent: the dialogs say so; the hold key offers beta's release.
            await pilot.press("r")
            await until(pilot, lambda: isinstance(app.screen, RecycleScreen), "the recycle dialog")
            assert "Relaunch agent beta?" in screen_text(app)
            await pilot.press("escape")
            await pilot.press("h")
            await until(pilot, lambda: isinstance(app.screen, PromptScreen), "the release prompt")
            assert app.screen.title_text.endswith("for agent beta. Type release to end it")
            await pilot.press("escape")

            # `n` goes round: back to alpha, whose panels come back.
            await pilot.press("n")
            await until(pilot, lambda: app.snapshot is not None and app.snapshot.agent == "alpha", "alpha again")
            await pilot.press("2")
            await until(pilot, lambda: len(table(app, "canary-table")) == 1, "alpha's one probe again")
            # Esc in the agents view keeps the agent selected.
            await pilot.press("g")
            await until(pilot, lambda: agents_loaded(app), "the agents view")
            await pilot.press("down", "escape")
            await until(pilot, lambda: not isinstance(app.screen, AgentsScreen), "back")
            assert app.console_screen.ctx.agent == "alpha"

    asyncio.run(run())


def test_an_agent_with_its_own_memory_brings_it_to_the_memory_panel(tmp_path):
    config = write_agents_config(tmp_path, socket=f"loomtest-mem-{tmp_path.name[-6:]}-absent", own_memory=("beta",))
    ctx = Context.load(str(config), None, environ={})

    def memory_rows(app) -> list[str]:
        return [r[1] for r in table(app, "memory-table")]

    async def run():
        app = LoomApp(ctx, now=lambda: NOW, watch=False, refresh_every=3600)
        async with app.run_test(size=(100, 30)) as pilot:
            await until(pilot, lambda: app.snapshot is not None, "a first snapshot")
            await pilot.press("5")
            await until(pilot, lambda: memory_rows(app) == ["Operator"], "the shared memory")
            await pilot.press("n")
            await until(pilot, lambda: memory_rows(app) == ["Beta"], "beta's own memory")
            assert app.query_one(MemoryPanel).memory_dir == tmp_path / "memory-beta"
            await pilot.press("n")
            await until(pilot, lambda: memory_rows(app) == ["Operator"], "the shared memory again")

    try:
        asyncio.run(run())
    finally:
        ctx.close()


def test_with_one_agent_the_agent_keys_neither_show_nor_act(tmp_path):
    config = write_agents_config(tmp_path, socket=f"loomtest-one-{tmp_path.name[-6:]}-absent", names=("solo",))
    ctx = Context.load(str(config), None, environ={})

    async def run():
        app = LoomApp(ctx, now=lambda: NOW, watch=False, refresh_every=3600)
        async with app.run_test(size=(120, 24)) as pilot:
            await until(pilot, lambda: app.snapshot is not None, "a first snapshot")
            text = screen_text(app)
            assert "Agents" not in text and "Next agent" not in text and " solo " not in text
            await pilot.press("g", "n")
            await pilot.pause()
            assert app.screen is app.console_screen and app.console_screen.ctx.agent == "solo"
            titles = [c.title for c in app.get_system_commands(app.screen)]
            assert "Agents" not in titles and "Canary" in titles

    try:
        asyncio.run(run())
    finally:
        ctx.close()


def test_the_agent_keys_have_ids():
    ids = {b.id for b in APP_KEYS}
    assert {"loom.agents", "loom.next_agent"} <= ids


def test_agents_view_snapshot(snap_compare, agents_ctx):
    """The agents view at 80x24: every agent's row, beta held and relaunched twice this hour."""
    async def run_before(pilot) -> None:
        await until(pilot, lambda: pilot.app.snapshot is not None, "a first snapshot")
        await pilot.press("g")
        await until(pilot, lambda: agents_loaded(pilot.app), "the agents view's rows")
        await pilot.wait_for_scheduled_animations()

    app = LoomApp(agents_ctx, now=lambda: NOW, watch=False, refresh_every=3600)
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_console_with_an_agent_selected_snapshot(snap_compare, agents_ctx):
    """The first screen at 80x24 after `n`: the summary names beta, held, its miss and its claim."""
    async def run_before(pilot) -> None:
        await until(pilot, lambda: pilot.app.snapshot is not None, "a first snapshot")
        await pilot.press("n")
        await until(pilot, lambda: pilot.app.snapshot is not None and pilot.app.snapshot.agent == "beta"
                    and pilot.app.query_one("#agent-panel").query_one("#pane-text", Static).content.plain
                    != "loading…", "beta's snapshot")
        await pilot.wait_for_scheduled_animations()

    app = LoomApp(agents_ctx, now=lambda: NOW, watch=False, refresh_every=3600)
    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_every_state_fits_its_column_at_80_and_each_reads_apart():
    # "agent process missing" and "agent process unknown" both read "agent process …" at 80 columns.
    words = [word for word, _ in agents_view.STATE_CELLS.values()]
    assert all(len(word) <= 15 for word in words), words
    assert len(set(words)) == len(set(agents_view.STATE_CELLS.values()))


def test_an_agent_that_cannot_be_read_says_why_in_the_wide_column(tmp_path):
    from loomtui.context import Context

    config = tmp_path / "config.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n[agent]\ntmux_socket = "loomtest-agents-unread"\n')
    (tmp_path / "state").mkdir(mode=0o700)
    (tmp_path / "state" / "loom.db").write_bytes(b"garbage" * 500)
    ctx = Context.load(str(config), None, environ={})
    try:
        row = agents_view.gather_row(ctx, NOW)
    finally:
        ctx.close()
    assert (row.state, row.state_level) == ("unreadable", "bad") and "loom.db" in row.why and row.hold == ""
    assert agents_view.cells(row)[-1].plain.startswith("not read: ")  # never read as a hold in force
