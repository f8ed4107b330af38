"""Several agents: a job's failures are its agent's items, nudged into that agent only, and the
human is told whose they were."""

from __future__ import annotations

import pytest

from loomtui import actions
from loomtui.agent.inject import InjectResult
from loomtui.context import Context
from loomtui.sentinel import queue
from loomtui.sentinel.tick import sentinel_tick
from loomtui.store import ledger


@pytest.fixture
def two_agents(tmp_path):
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
[[agents]]
name = "beta"
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


def test_each_jobs_failures_are_its_agents_and_go_to_it_only(two_agents, monkeypatch):
    ctx, logs = two_agents
    nudged: list[tuple[str, str]] = []

    def fake_nudge(agent_ctx, text, *, source, detail):
        nudged.append((agent_ctx.agent, detail["job"]))
        return InjectResult(True, len(text), "d", "")

    monkeypatch.setattr(actions, "nudge", fake_nudge)
    (logs / "backup.log").write_text("ERROR disk full\n")
    (logs / "report.log").write_text("Traceback (most recent call last):\n")
    t0 = 1_000_000.0
    sentinel_tick(ctx, t0, notify=True)
    items = {i.job: i for i in queue.listing(ctx.store)}
    assert (items["backup"].agent, items["report"].agent) == ("alpha", "beta")
    assert sorted(nudged) == [("alpha", "backup"), ("beta", "report")]
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
