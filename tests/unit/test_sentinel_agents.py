"""Several agents: a job's failures are its agent's items, nudged into that agent only, and the
human is told whose they were."""

from __future__ import annotations

import pytest

from loomtui.context import Context
from loomtui.sentinel import queue
from loomtui.sentinel.tick import sentinel_tick
from loomtui.store import ledger


@pytest.fixture
def panes(make_pane):
    """Each agent's pane: a real tmux pane that reads lines, on a socket of its own."""
    return {"alpha": make_pane(), "beta": make_pane()}


@pytest.fixture
def two_agents(tmp_path, panes):
    logs = tmp_path / "logs"
    logs.mkdir()
    config = tmp_path / "config.toml"
    config.write_text(f"""
state_dir = "{tmp_path / 'state'}"
[sentinel]
renudge = "20m"
backstop = "30m"
[[agents]]
name = "alpha"
tmux_socket = "{panes['alpha'].socket}"
session = "agent"
[[agents]]
name = "beta"
tmux_socket = "{panes['beta'].socket}"
session = "agent"
[[jobs]]
name = "backup"
log = "{logs / 'backup.log'}"
[[jobs]]
name = "report"
log = "{logs / 'report.log'}"
agent = "beta"
""")
    ctx = Context.load(str(config), None, environ={})
    yield ctx, logs
    ctx.close()


@pytest.mark.e2e
def test_each_jobs_failures_are_its_agents_and_go_to_it_only(two_agents, panes):
    ctx, logs = two_agents
    (logs / "backup.log").write_text("ERROR disk full\n")
    (logs / "report.log").write_text("Traceback (most recent call last):\n")
    t0 = 1_000_000.0
    sentinel_tick(ctx, t0, notify=True)
    items = {i.job: i for i in queue.listing(ctx.store)}
    assert (items["backup"].agent, items["report"].agent) == ("alpha", "beta")
    # Each item typed into its own agent's pane only, and recorded under that agent.
    [to_alpha], [to_beta] = panes["alpha"].wait_lines(1), panes["beta"].wait_lines(1)
    assert f"Queue item {items['backup'].id}:" in to_alpha and '"backup"' in to_alpha
    assert f"Queue item {items['report'].id}:" in to_beta and '"report"' in to_beta
    typed = ledger.tail(ctx.store, 50, kinds=["queue_nudge"])
    assert sorted((e.agent, e.detail["job"], e.detail["ok"]) for e in typed) == [
        ("alpha", "backup", True), ("beta", "report", True)]
    assert sorted((e.detail["job"], e.agent) for e in ledger.tail(ctx.store, 50, kinds=["queue_new"])) == [
        ("backup", "alpha"), ("report", "beta")]
    # Past the backstop the human hears of it, with the agent named.
    sentinel_tick(ctx, t0 + 31 * 60, notify=True)
    escalations = ledger.tail(ctx.store, 50, kinds=["queue_escalate"])
    assert sorted(e.agent for e in escalations) == ["alpha", "beta"]
    texts = [r["text"] for r in ctx.store.query("SELECT text FROM outbox ORDER BY id")]
    assert any(t.startswith("[beta] ") and "report" in t for t in texts), texts
    assert any(t.startswith("[alpha] ") and "backup" in t for t in texts), texts
    # Each escalation carries the ledger's head as it stood: a SEQ:HASH that `verify --head` accepts.
    heads = [t.rsplit(" ledger ", 1)[1] for t in texts if " ledger " in t]
    assert len(heads) == 2, texts
    for head in heads:
        assert ledger.verify(ctx.store, kept=ledger.parse_head(head)).ok
