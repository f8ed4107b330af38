"""Agents have names in the store: the upgrade of a store made before that keeps its history."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from loomtui.agent import recovery
from loomtui.agent.launch import agent_env, render_command
from loomtui.agent.policy import Decision
from loomtui.timing import Instant
from loomtui.agent.watchdog import Watchdog
from loomtui.agent.watchdog_rules import Step
from loomtui.context import Context
from loomtui.store import ledger, outbox, session
from loomtui.store.db import DB_NAME, Store

OLD = Path(__file__).parent / "data" / "state-0007"  # made by the code at ec23f5f (see make.py there)


@pytest.fixture
def old_state(tmp_path):
    state = tmp_path / "state"
    shutil.copytree(OLD, state, ignore=shutil.ignore_patterns("*.py"))
    (state / DB_NAME).chmod(0o600)
    return state


def test_the_old_store_is_what_it_says(old_state):
    con = sqlite3.connect(old_state / DB_NAME)
    names = [r[0] for r in con.execute("SELECT name FROM schema_migrations ORDER BY name")]
    columns = {r[1] for r in con.execute("PRAGMA table_info(ledger)")}
    con.close()
    assert names[-1] == "0007_counters" and "agent" not in columns


def test_an_old_store_upgrades_with_its_history_and_its_chain(old_state):
    store = Store.in_dir(old_state)
    try:
        assert "0008_agents" in {r[0] for r in store.query("SELECT name FROM schema_migrations")}
        assert ledger.verify(store).ok and ledger.verify(store).count == 3
        events = ledger.tail(store, 10)
        assert [(e.kind, e.agent) for e in events] == [
            ("supervisor_start", "main"), ("relaunch", "main"), ("canary", "main")]
        assert events[1].cause == "crash" and events[1].detail["mode"] == "resume"
        assert [r["agent"] for r in store.query("SELECT agent FROM canary_runs")] == ["main"]
        assert [(r["job"], r["agent"]) for r in store.query("SELECT job, agent FROM queue_items")] == [("backup", "main")]
        assert session.pinned(store) == "aaaaaaaa-1111-4111-8111-111111111111"
        # The chain goes on from the old head, for `main` and for a named agent alike.
        ledger.append(store, "canary", source="canary", detail={"result": "ok"})
        ledger.append(store, "relaunch", source="watchdog", cause="crash", agent="scout")
        verdict = ledger.verify(store)
        assert verdict.ok and verdict.count == 5
        assert [e.agent for e in ledger.page(store, agent="scout")] == ["scout"]
        assert len(ledger.page(store, agent="main")) == 4
    finally:
        store.close()


def test_a_main_event_hashes_as_before_names_and_a_named_one_with_its_name():
    args = (ledger.GENESIS, 1, 1.5, "relaunch", "watchdog", "crash", "{}")
    assert ledger.event_hash(*args) == ledger.event_hash(*args, "main")
    assert ledger.event_hash(*args, "scout") != ledger.event_hash(*args)


@pytest.mark.parametrize("was,now", [("scout", "main"), ("main", "scout"), ("scout", "scout2")])
def test_moving_an_event_to_another_agent_is_caught(tmp_path, was, now):
    store = Store.in_dir(tmp_path)
    try:
        ledger.append(store, "supervisor_start", source="supervisor")
        ledger.append(store, "relaunch", source="watchdog", cause="crash", agent=was)
        ledger.append(store, "canary", source="canary")
        with store.write() as db:
            db.execute("UPDATE ledger SET agent = ? WHERE id = 2", (now,))
        verdict = ledger.verify(store)
        assert not verdict.ok and verdict.bad_id == 2 and "edited" in verdict.reason
    finally:
        store.close()


@pytest.mark.parametrize("name", ["", "Main", "-x", "a" * 33, "a b", "a/b", "ä"])
def test_a_bad_agent_name_is_refused_and_nothing_is_written(tmp_path, name):
    store = Store.in_dir(tmp_path)
    try:
        with pytest.raises(ValueError, match="bad agent name"):
            ledger.append(store, "canary", source="canary", agent=name)
        assert ledger.count(store) == 0
    finally:
        store.close()


TWO_AGENTS = """
[[agents]]
name = "main"
[[agents]]
name = "beta"
"""


@pytest.fixture
def two_agents(tmp_path):
    """The contexts of `main` and `beta`, two agents of one config and one state dir."""
    config = tmp_path / "config.toml"
    config.write_text(TWO_AGENTS)
    main = Context.load(str(config), str(tmp_path / "state"), {})
    beta = main.for_agent("beta")
    yield main, beta
    main.close()
    beta.close()


def test_an_agents_context_files_its_events_session_and_files_under_its_name(tmp_path, two_agents):
    main, beta = two_agents
    state = tmp_path / "state"
    assert (main.agent, beta.agent) == ("main", "beta")
    assert main.agent_dir == state and beta.agent_dir == state / "agents" / "beta"
    assert beta.acks_dir.is_dir() and oct(beta.agent_dir.stat().st_mode & 0o777) == "0o700"
    ledger.append(beta.store, "supervisor_start", source="test")
    ledger.append(main.store, "supervisor_start", source="test")
    ledger.append(beta.store, "supervisor_start", source="test", agent="main")  # said outright: it wins
    assert [e.agent for e in ledger.tail(main.store, 10)] == ["beta", "main", "main"]
    assert ledger.verify(main.store).ok
    # One store, one pinned session per agent, each with its sidecar in its own directory.
    with beta.store.write() as db:
        session.pin_in(db, "11111111-1111-1111-1111-111111111111")
    with main.store.write() as db:
        session.pin_in(db, "22222222-2222-2222-2222-222222222222")
    assert session.pinned(beta.store) == "11111111-1111-1111-1111-111111111111"
    assert session.pinned(main.store) == "22222222-2222-2222-2222-222222222222"
    assert session.read_sidecar(beta.agent_dir) == "11111111-1111-1111-1111-111111111111"
    assert session.read_sidecar(state) == "22222222-2222-2222-2222-222222222222"
    assert main.store.get_meta(session.KEY) == "22222222-2222-2222-2222-222222222222"  # main's key as before


def test_escalations_name_their_agent_when_there_are_several(two_agents):
    main, beta = two_agents
    Watchdog(beta).act(Step("alert", note="tmux socket gone"), None, None)
    recovery.escalate(beta, "crash", Decision("hold", escalate=True, reasons=("ceiling reached",)), "watchdog",
                      Instant(1000.0))
    texts = [m.text for m in outbox.pending(main.store)]
    alert = ledger.tail(main.store, 5, kinds=["operator_alert"])[-1]
    assert texts[0] == f"[beta] Loom: tmux socket gone ledger {alert.id}:{alert.hash}"  # the head goes with it
    assert texts[1].startswith("[beta] Loom stopped relaunching") and "loom recycle --agent beta" in texts[1]
    assert [e.agent for e in ledger.tail(main.store, 5, kinds=["operator_alert", "escalation"])] == ["beta"] * 2


def test_one_agents_escalations_read_as_before(tmp_path):
    ctx = Context.load(None, str(tmp_path / "state"), {"XDG_CONFIG_HOME": str(tmp_path)})
    try:
        recovery.escalate(ctx, "crash", Decision("hold", escalate=True, reasons=("ceiling reached",)), "watchdog",
                          Instant(1000.0))
        [message] = outbox.pending(ctx.store)
        assert message.text.startswith("Loom stopped relaunching") and "(loom recycle --resume or --fresh)" in message.text
    finally:
        ctx.close()


def test_a_named_agent_is_launched_with_its_own_directory_and_its_name(tmp_path, two_agents):
    main, beta = two_agents
    template = "claude --add-dir {state_dir}/acks --session-id {session_id}"
    assert render_command(beta, template, "s") == f"claude --add-dir {beta.agent_dir}/acks --session-id s"
    assert render_command(main, template, "s") == f"claude --add-dir {tmp_path / 'state'}/acks --session-id s"
    env = agent_env(beta, "s")
    # The store is shared: the agent's `loom` commands find it, and act as the agent.
    assert (env["LOOM_STATE_DIR"], env["LOOM_AGENT"]) == (str(tmp_path / "state"), "beta")
    assert agent_env(main, "s")["LOOM_AGENT"] == "main"
