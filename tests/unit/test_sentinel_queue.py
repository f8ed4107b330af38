"""The queue through the sentinel tick and the CLI: nudges on an injected clock, claims, witnesses."""

from __future__ import annotations

import json
import sys

import pytest
from test_sentinel_scan import Fleet, run_job

from loomtui import actions
from loomtui.agent.inject import InjectResult
from loomtui.sentinel import claims, queue
from loomtui.sentinel import tick as sentinel_mod
from loomtui.store import ledger, locks, outbox

PY = sys.executable


@pytest.fixture
def one_job(tmp_path):
    f = Fleet(tmp_path / "fleet", [{"name": "backup"}],
              {"renudge": "20m", "backstop": "30m"})
    yield f
    f.ctx.close()


@pytest.fixture
def typed(monkeypatch):
    """What the sentinel asked to type, kept instead of typed (test_sentinel_e2e types for real).

    The fake records nothing in the store: whatever the tests find there, the real code wrote.
    """
    sent: list[tuple[str, dict]] = []
    ok = {"value": True}

    def fake_nudge(ctx, text, *, source, detail):
        assert source == "sentinel"
        sent.append((text, detail))
        return InjectResult(ok["value"], len(text), "d", "" if ok["value"] else "pane gone")

    monkeypatch.setattr(actions, "nudge", fake_nudge)
    sent_ok = ok
    return sent, sent_ok


@pytest.mark.incident("supervisor_blind_spot")
def test_nudge_renudge_backstop_once_and_resolution_stops_it_all(one_job, typed):
    f, (sent, _) = one_job, typed
    f.write("backup", "ERROR disk full\n")
    t0 = 1_000_000.0
    f.tick(t0, notify=True)
    [item] = f.items()
    for minute in range(1, 120):
        f.tick(t0 + minute * 60, notify=True)
    # Nudged at 0, 20, 40, 60, 80 and 100 minutes; each one recorded by the injection path.
    assert len(sent) == 6
    # The injection path is the one that records a nudge; the sentinel adds no second record.
    assert ledger.tail(f.ctx.store, 1000, kinds=["queue_nudge"]) == []
    assert all(f"Queue item {item.id}" in text and f'loom resolve {item.id} --note "' in text for text, _ in sent)
    assert [d["nudge"] for _, d in sent] == [1, 2, 3, 4, 5, 6]
    assert [d["renudge"] for _, d in sent] == [False] + [True] * 5
    messages = outbox.recent(f.ctx.store)
    assert len(messages) == 1 and f"queue item {item.id}" in messages[0].text
    assert messages[0].dedupe_key == f"queue-{item.id}-backstop"
    [esc] = ledger.tail(f.ctx.store, 100, kinds=["queue_escalate"])
    assert esc.ts == t0 + 30 * 60 and esc.detail["item"] == item.id
    state = queue.get(f.ctx.store, item.id)
    assert (state.nudges, state.last_nudge_at, state.escalated_at) == (6, t0 + 100 * 60, t0 + 30 * 60)

    claims.resolve(f.ctx, item.id, "freed space on /var", source="cli", session_id="s-1", now=t0 + 120 * 60)
    for minute in range(121, 300):
        f.tick(t0 + minute * 60, notify=True)
    assert len(sent) == 6 and len(outbox.recent(f.ctx.store)) == 1
    assert ledger.verify(f.ctx.store).ok


def test_no_nudge_during_a_relaunch_and_a_failed_nudge_is_retried(one_job, typed):
    f, (sent, ok) = one_job, typed
    f.write("backup", "FATAL config missing\n")
    with locks.hold(f.ctx.state_dir, locks.RECYCLE, timeout=5):
        report = f.tick(1000.0, notify=True)
    assert report.relaunching and sent == [] and f.items()[0].nudges == 0
    ok["value"] = False
    report = f.tick(1060.0, notify=True)
    assert report.nudge_failed == [f.items()[0].id] and f.items()[0].nudges == 0
    ok["value"] = True
    report = f.tick(1120.0, notify=True)
    assert report.nudged == [f.items()[0].id] and f.items()[0].nudges == 1 and len(sent) == 2


def test_nudges_per_tick_are_capped_and_the_rest_follow(tmp_path, typed):
    sent, _ = typed
    f = Fleet(tmp_path / "many", [{"name": f"j{i}"} for i in range(8)])
    try:
        for i in range(8):
            f.write(f"j{i}", "ERROR broken\n")
        first = f.tick(1000.0, notify=True)
        second = f.tick(1060.0, notify=True)
        assert len(first.nudged) == sentinel_mod.MAX_NUDGES_PER_TICK and first.nudges_deferred == 3
        assert len(second.nudged) == 3 and len(sent) == 8
    finally:
        f.ctx.close()


def test_claim_then_clean_run_witnesses_and_a_failing_run_reopens(one_job, typed):
    f = one_job
    assert run_job(f, "backup", PY, "-c", "print('ERROR: tape jammed'); raise SystemExit(2)").returncode == 2
    f.tick(notify=False)
    items = {i.kind: i for i in f.items()}
    assert set(items) == {"line", "exit"}
    from conftest import run_loom

    res = run_loom("resolve", str(items["exit"].id), "--note", "cleared \x1b[31mthe jam",
                   env={**f.env(), "LOOM_SESSION_ID": "sess-42"})
    assert res.returncode == 0, res.stderr
    claim = queue.get(f.ctx.store, items["exit"].id)
    assert (claim.state, claim.claimed_by, claim.claimed_session) == ("claimed", "cli", "sess-42")
    assert "\x1b" not in claim.note
    [event] = ledger.tail(f.ctx.store, 10, kinds=["queue_claim"])
    assert event.source == "cli" and event.detail["session"] == "sess-42" and "jam" not in json.dumps(event.detail)

    f.tick(notify=False)  # nothing ran since the claim: still claimed
    assert queue.get(f.ctx.store, claim.id).state == "claimed"
    assert run_job(f, "backup", PY, "-c", "print('all good')").returncode == 0
    report = f.tick(notify=False)
    assert report.witnessed == [claim.id] and queue.get(f.ctx.store, claim.id).witness_run is not None
    assert queue.get(f.ctx.store, items["line"].id).state == "open"  # never claimed, so not witnessed

    # The same failure again is a new item (the old one was witnessed); claim it, then fail again.
    assert run_job(f, "backup", PY, "-c", "raise SystemExit(2)").returncode == 2
    f.tick(notify=False)
    [fresh] = [i for i in f.items() if i.kind == "exit" and i.state == "open"]
    assert fresh.id != claim.id
    claims.resolve(f.ctx, fresh.id, "really fixed now", source="cli")
    assert run_job(f, "backup", PY, "-c", "raise SystemExit(2)").returncode == 2
    report = f.tick(notify=False)
    again = queue.get(f.ctx.store, fresh.id)
    assert report.reopened == [fresh.id] and again.state == "open" and again.reopens == 1
    assert again.note.startswith("claim did not hold") and "really fixed now" in again.note
    assert again.count == 2
    assert [e.detail["item"] for e in ledger.tail(f.ctx.store, 100, kinds=["queue_reopen"])] == [fresh.id]
    assert [e.detail["item"] for e in ledger.tail(f.ctx.store, 100, kinds=["queue_witness"])] == [claim.id]
    assert ledger.verify(f.ctx.store).ok


def test_failure_lines_after_the_claim_reopen_even_without_run_job(one_job):
    f = one_job
    f.write("backup", "ERROR nightly sync failed: 3 files\n")
    f.tick(notify=False)
    [item] = f.items()
    claims.resolve(f.ctx, item.id, "fixed the sync target", source="tui")
    f.tick(notify=False)
    assert queue.get(f.ctx.store, item.id).state == "claimed"
    f.write("backup", "ERROR nightly sync failed: 5 files\n")
    f.tick(notify=False)
    assert queue.get(f.ctx.store, item.id).state == "open"


def test_queue_and_resolve_cli(one_job):
    from conftest import run_loom

    f = one_job
    f.write("backup", "ERROR \x1b]0;pwned\x07 bad [red]markup[/red] $(id)\n")
    f.tick(notify=False)
    [item] = f.items()
    out = run_loom("queue", env=f.env())
    assert out.returncode == 0 and "1 open, 0 claimed" in out.stdout
    assert "\x1b" not in out.stdout and "\x07" not in out.stdout and "[red]markup[/red]" in out.stdout
    data = json.loads(run_loom("queue", "--json", env=f.env()).stdout)
    assert data["counts"] == {"open": 1, "claimed": 0, "witnessed": 0} and data["items"][0]["id"] == item.id
    missing = run_loom("resolve", "999", "--note", "x", env=f.env())
    assert missing.returncode == 1 and "no queue item 999" in missing.stderr
    empty = run_loom("resolve", str(item.id), "--note", "  ", env=f.env())
    assert empty.returncode == 1 and "--note" in empty.stderr
    assert run_loom("resolve", str(item.id), "--note", "done", env=f.env()).returncode == 0
    out = run_loom("queue", env=f.env()).stdout
    assert "0 open, 1 claimed" in out and "claimed by cli" in out and "waiting for the job's next clean run" in out
    scan = run_loom("sentinel", "scan", "--json", "--no-nudge", env=f.env())
    assert scan.returncode == 0 and json.loads(scan.stdout)["jobs"] == 1
