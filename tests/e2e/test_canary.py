"""The canary end to end: the demo agent acks, a wedge is caught, a busy agent is not recycled."""

from __future__ import annotations

import json
import shutil
import signal
import sqlite3
import subprocess
import threading

import pytest
from harness import wait_for
from test_supervise import Daemon, relaunches

from loomtui.store.db import DB_NAME, Store

pytestmark = pytest.mark.e2e

FAST_WATCH = {"interval": "1s", "exit_check": "300ms", "backoff_base": "300ms", "backoff_max": "1s"}


def supervised(make_harness, canary: dict, boot_grace: str = "1s"):
    """A started demo agent under `loom supervise` with fast watchdog intervals, once it has acked."""
    harness = make_harness(sections={"watchdog": FAST_WATCH, "canary": canary, "agent": {"boot_grace": boot_grace}})
    session = harness.start()
    daemon = Daemon(harness)
    wait_for(lambda: any(r["result"] == "ok" for r in runs(harness)), 120, what="a healthy ack")
    return harness, session, daemon


def runs(harness):
    with Store.in_dir(harness.state_dir) as store:
        return [dict(r) for r in store.query("SELECT * FROM canary_runs ORDER BY id")]


def probe_json(harness):
    result = harness.loom("canary", "--json")
    return result.returncode, json.loads(result.stdout)


def test_on_demand_probe_acks_with_latency(make_harness):
    harness = make_harness(sections={"canary": {"ack_timeout": "10s"}})
    harness.start()
    code, probe = probe_json(harness)
    assert code == 0 and probe["result"] == "ok" and probe["latency"] >= 0
    row = runs(harness)[-1]
    assert row["result"] == "ok" and row["latency"] == probe["latency"] and row["ack_at"] >= row["sent_at"]
    assert not (harness.state_dir / "acks" / probe["nonce"]).exists()  # ack files are cleaned up
    events = harness.events("canary")
    assert events[-1]["detail"]["result"] == "ok"
    plain = harness.loom("canary")
    assert plain.returncode == 0 and plain.stdout.startswith("ok: acked in")


def test_a_second_probe_joins_the_one_in_flight(make_harness):
    harness = make_harness(sections={"canary": {"ack_timeout": "20s"}})
    session = harness.start()
    assert harness.loom("inject", "/slow 6").returncode == 0  # keeps the first probe in flight a while
    results = []
    threads = [threading.Thread(target=lambda: results.append(probe_json(harness))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 3 and all(code == 0 for code, _ in results)
    assert len({p["id"] for _, p in results}) == 1
    assert sum(p["joined"] for _, p in results) == 2
    assert len(runs(harness)) == 1
    assert len([t for t in harness.transcript(session) if "liveness check" in t]) == 1


def test_no_agent_is_inject_failed_not_a_miss(harness):
    code, probe = probe_json(harness)
    assert code == 1 and probe["result"] == "inject_failed"


@pytest.mark.incident("confident_false_detector")
def test_deleted_acks_dir_is_our_error_not_the_agents_miss(make_harness):
    harness = make_harness(sections={"canary": {"ack_timeout": "15s"}})
    harness.start()
    assert harness.loom("inject", "/slow 4").returncode == 0
    proc = harness.popen("-m", "loomtui", "canary", "--json", stdout=subprocess.PIPE, text=True)
    wait_for(lambda: any(r["result"] == "pending" for r in runs(harness)), what="a probe in flight")
    shutil.rmtree(harness.state_dir / "acks")
    out, _ = proc.communicate(timeout=60)
    probe = json.loads(out)
    assert proc.returncode == 1 and probe["result"] == "error" and "acks dir" in probe["why"]
    assert runs(harness)[-1]["result"] == "error"


@pytest.mark.incident("silent_deafness")
def test_wedge_two_misses_recycle_and_the_resumed_agent_acks(make_harness):
    harness, session, daemon = supervised(make_harness, {"interval": "3s", "ack_timeout": "2s",
                                                         "misses_to_recycle": 2}, "2s")
    assert harness.loom("inject", "/wedge").returncode == 0
    event = wait_for(lambda: relaunches(harness, "canary_failed"), 60, what="a canary_failed recycle")[0]
    assert event["detail"]["mode"] == "resume" and event["detail"]["new_session"] == session
    misses = [r for r in runs(harness) if r["result"] == "miss"]
    assert len(misses) >= 2
    wait_for(lambda: any(r["result"] == "ok" and r["sent_at"] > event["ts"] for r in runs(harness)), 60,
             what="the resumed agent acking")
    daemon.settle(3)
    assert len(relaunches(harness, "canary_failed")) == 1
    assert daemon.stop() == 0


@pytest.mark.incident("correct_and_wrong_together")
def test_the_incident_a_session_that_wedges_after_every_resume(make_harness):
    harness, first, daemon = supervised(make_harness, {"interval": "3s", "ack_timeout": "2s"}, "2s")
    assert harness.loom("inject", "/poison").returncode == 0
    fresh = wait_for(lambda: [e for e in relaunches(harness, "canary_failed") if e["detail"]["mode"] == "fresh"],
                     120, what="the session started fresh")[0]
    recycles = relaunches(harness, "canary_failed")
    # Resumed at most once, then fresh: never the same deaf session a third time.
    assert [e["detail"]["mode"] for e in recycles] == ["resume", "fresh"]
    assert recycles[0]["detail"]["new_session"] == first and fresh["detail"]["new_session"] != first
    wait_for(lambda: [r for r in runs(harness) if r["result"] == "ok" and r["sent_at"] > fresh["ts"]], 60,
             what="the fresh session acking")
    # The resumed session was recycled on two misses of its own launch, never on fewer: the time
    # deaf per incident (one interval + two timeouts + the relaunch) is measured by bench/recovery.py.
    between = [r for r in runs(harness) if recycles[0]["ts"] < r["sent_at"] < fresh["ts"]]
    assert [r["result"] for r in between][-2:] == ["miss", "miss"] and "ok" not in [r["result"] for r in between]
    daemon.settle(3)
    assert len(relaunches(harness, "canary_failed")) == 2
    assert daemon.stop() == 0


@pytest.mark.incident("confident_false_detector")
def heard_after(harness, probe: dict) -> None:
    """A missed probe of a busy agent ends in a proof that it heard: the probe's own late ack
    recorded, or the one re-probe after it acking (whichever the daemon's timing gives)."""
    def heard() -> list:
        rows = runs(harness)
        late = [r for r in rows if r["id"] == probe["id"] and r["ack_at"] is not None]
        return late or [r for r in rows if r["id"] > probe["id"] and r["result"] == "ok"]

    [answer] = wait_for(heard, 60, what="the missed probe acked late, or the re-probe after it acking")[:1]
    if answer["id"] != probe["id"]:
        assert [r["result"] for r in runs(harness) if probe["id"] < r["id"] < answer["id"]] == []  # one re-probe


def test_a_busy_agent_is_not_recycled(make_harness):
    timeout = 10.0
    harness, _, daemon = supervised(make_harness, {"interval": "30m", "ack_timeout": f"{timeout:g}s"})
    # The next probe finds the agent busy for longer than one timeout and shorter than two, counted
    # from the probe's arrival: it misses whatever the machine's speed. Then either the daemon's
    # re-probe (typed while the agent is busy) is read and acked once the agent is free, or, when
    # the daemon looks after the late ack came, that ack is recorded on the miss (canary_late_ack)
    # and ends the run of misses: the agent heard, and no re-probe is needed.
    assert harness.loom("inject", f"/late-acks 1 {timeout * 1.2:g}").returncode == 0
    code, probe = probe_json(harness)
    assert code == 1 and probe["result"] == "miss"

    heard_after(harness, probe)
    daemon.settle(5)
    assert relaunches(harness, "canary_failed") == []
    assert daemon.stop() == 0


@pytest.mark.incident("confident_false_detector")
def test_a_locked_store_is_our_error_never_a_miss(make_harness):
    harness, _, daemon = supervised(make_harness, {"interval": "1s", "ack_timeout": "2s"})
    before = len(runs(harness))
    blocker = sqlite3.connect(harness.state_dir / DB_NAME, timeout=30, isolation_level=None)
    try:
        blocker.execute("BEGIN EXCLUSIVE")
        # Fault injection: hold the store until the daemon's canary has met the lock (its writes
        # wait out the busy timeout, then fail), however long that takes on this machine.
        wait_for(lambda: "store unavailable during the probe" in daemon.output(), 180,
                 what="the canary meeting the locked store")
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    wait_for(lambda: any(r["result"] == "error" and "store" in r["why"] for r in runs(harness)[before:]), 30,
             what="the store fault recorded as the canary's own error")
    daemon.settle(5)
    assert relaunches(harness, "canary_failed") == []
    assert daemon.stop() == 0


def test_sigterm_during_a_probe_does_not_wait_it_out(make_harness):
    harness = make_harness(sections={"watchdog": FAST_WATCH, "canary": {"interval": "1s", "ack_timeout": "90s"},
                                     "agent": {"boot_grace": "1s"}})
    harness.start()
    assert harness.loom("inject", "/slow 120").returncode == 0  # the next probe will wait
    daemon = Daemon(harness)
    wait_for(lambda: any(r["result"] == "pending" for r in runs(harness)), 30, what="a probe in flight")
    daemon.proc.send_signal(signal.SIGTERM)
    # Far less than the 90 s the probe would otherwise wait: the daemon gives the probe up.
    assert daemon.proc.wait(30) == 0
    assert runs(harness)[-1]["result"] == "pending"  # settled later from the ack file, never guessed


def test_a_tmux_that_does_not_answer_the_probe_fails_its_typing_and_is_no_miss(make_harness):
    # What the simulator's machine must copy (sim/machine.py): a probe into a hung tmux fails its
    # typing (inject_failed, which counts for nothing) and leaves no pending run to be settled
    # later as a miss, which with a busy agent's late ack before it would recycle a busy agent.
    import os

    from loomtui import actions
    from loomtui.canary.rules import INJECT_FAILED

    harness = make_harness()
    harness.start()
    server = harness.server_pid()
    os.kill(server, signal.SIGSTOP)
    try:
        probe = actions.canary_now(harness.ctx(), source="canary")
    finally:
        os.kill(server, signal.SIGCONT)
    assert probe.result == INJECT_FAILED and "did not answer" in probe.why
    assert [r["result"] for r in runs(harness)] == [INJECT_FAILED]
