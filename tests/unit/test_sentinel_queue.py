"""The queue through the sentinel tick and the CLI: nudges on an injected clock, claims, witnesses."""

from __future__ import annotations

import json
import sys

import pytest
from test_sentinel_scan import Fleet, run_job

from loomtui.sentinel import claims, queue
from loomtui.sentinel import tick as sentinel_mod
from loomtui.store import ledger, locks, outbox
from loomtui.text import digest

PY = sys.executable


@pytest.fixture
def pane(make_pane):
    """The agent's pane: a real tmux pane that reads lines, so the nudges go the whole real way
    (actions.nudge, the hold check, inject.lock, the paste, the ledger); test_sentinel_e2e has
    the demo agent read them."""
    return make_pane()


@pytest.fixture
def one_job(tmp_path):
    f = Fleet(tmp_path / "fleet", [{"name": "backup"}], {"renudge": "20m", "backstop": "30m"})
    yield f
    f.ctx.close()


@pytest.fixture
def nudged_job(tmp_path, pane):
    f = Fleet(tmp_path / "nudged", [{"name": "backup"}],
              {"renudge": "20m", "backstop": "30m"}, agent=pane.agent_keys())
    yield f
    f.ctx.close()


def nudges(f: Fleet) -> list:
    return ledger.tail(f.ctx.store, 1000, kinds=["queue_nudge"])


@pytest.mark.e2e
@pytest.mark.incident("supervisor_blind_spot")
def test_nudge_renudge_backstop_once_and_resolution_stops_it_all(nudged_job, pane):
    f = nudged_job
    f.write("backup", "ERROR disk full\n")
    t0 = 1_000_000.0
    f.tick(t0, notify=True)
    [item] = f.items()
    for minute in range(1, 120):
        f.tick(t0 + minute * 60, notify=True)
    # Nudged at 0, 20, 40, 60, 80 and 100 minutes, each typed into the pane and recorded once,
    # by the injection path (the sentinel adds no second record).
    sent = pane.wait_lines(6)
    assert len(sent) == 6
    assert all(text.startswith(f"[loom sentinel] Queue item {item.id}:") and
               f'loom resolve {item.id} --note "' in text for text in sent)
    events = nudges(f)
    assert [e.detail["nudge"] for e in events] == [1, 2, 3, 4, 5, 6]
    assert [e.detail["renudge"] for e in events] == [False] + [True] * 5
    assert all(e.source == "sentinel" and e.detail["ok"] and e.detail["item"] == item.id for e in events)
    assert [e.detail["digest"] for e in events] == [digest(text) for text in sent]
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
    assert len(nudges(f)) == 6 and len(outbox.recent(f.ctx.store)) == 1
    assert pane.lines() == sent
    assert ledger.verify(f.ctx.store).ok


@pytest.mark.e2e
def test_no_nudge_during_a_relaunch_and_a_failed_nudge_is_retried(nudged_job, pane):
    f = nudged_job
    f.write("backup", "FATAL config missing\n")
    with locks.hold(f.ctx.state_dir, locks.RECYCLE, timeout=5):
        report = f.tick(1000.0, notify=True)
    assert report.relaunching and nudges(f) == [] and f.items()[0].nudges == 0
    pane.end_reader()  # the agent's pane is there, its process gone: nothing can be typed
    report = f.tick(1060.0, notify=True)
    assert report.nudge_failed == [f.items()[0].id] and f.items()[0].nudges == 0
    [failed] = nudges(f)
    assert failed.cause == "inject_failed" and not failed.detail["ok"] and "dead" in failed.detail["error"]
    pane.respawn()
    report = f.tick(1120.0, notify=True)
    assert report.nudged == [f.items()[0].id] and f.items()[0].nudges == 1
    [typed] = pane.wait_lines(1)
    assert typed.startswith(f"[loom sentinel] Queue item {f.items()[0].id}:")
    assert [e.detail["ok"] for e in nudges(f)] == [False, True]


@pytest.mark.e2e
def test_nudges_per_tick_are_capped_and_the_rest_follow(tmp_path, pane):
    f = Fleet(tmp_path / "many", [{"name": f"j{i}"} for i in range(8)], agent=pane.agent_keys())
    try:
        for i in range(8):
            f.write(f"j{i}", "ERROR broken\n")
        first = f.tick(1000.0, notify=True)
        assert len(first.nudged) == sentinel_mod.MAX_NUDGES_PER_TICK and first.nudges_deferred == 3
        assert len(nudges(f)) == sentinel_mod.MAX_NUDGES_PER_TICK
        second = f.tick(1060.0, notify=True)
        assert len(second.nudged) == 3
        sent = pane.wait_lines(8)
        assert sorted(int(t.split("Queue item ", 1)[1].split(":", 1)[0]) for t in sent) == sorted(
            i.id for i in f.items())
    finally:
        f.ctx.close()


def test_claim_then_clean_run_witnesses_and_a_failing_run_reopens(one_job):
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
