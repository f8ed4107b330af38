"""Operator holds and one-shot ticks end to end: a real tmux server, the demo agent, the daemon
or `loom tick` as subprocesses, and the ledger as the record of what happened and in what order."""

from __future__ import annotations

import json
import subprocess

import pytest
from harness import wait_for
from test_supervise import FAST, Daemon, relaunches

pytestmark = pytest.mark.e2e


def kinds_after(harness, first_id: int, wanted: set[str]) -> list[dict]:
    return [e for e in harness.events() if e["id"] > first_id and e["kind"] in wanted]


def test_a_hold_defers_the_crash_relaunch_until_release_then_exactly_one(make_harness):
    harness = make_harness(sections=FAST)
    session = harness.start()
    daemon = Daemon(harness)
    held = harness.loom("hold", "--reason", "swapping the model", "--json")
    assert held.returncode == 0, held.stderr
    assert json.loads(held.stdout)["hold"]["by"] == "operator"
    status = harness.loom("status")
    assert "HELD: held by the operator: swapping the model (until released)" in status.stdout
    # The daemon may record its own events (a canary witnessing the start) around the hold.
    mark = harness.events("hold_placed")[-1]["id"]
    before = len(relaunches(harness))

    assert harness.loom("inject", "/crash").returncode == 0
    wait_for(lambda: kinds_after(harness, mark, {"refused"}), 60, what="the relaunch refused for the hold")
    daemon.settle()  # many watchdog ticks see the dead pane while held
    assert len(relaunches(harness)) == before, "relaunched during a hold"
    refused = kinds_after(harness, mark, {"refused"})
    assert {(e["detail"]["action"], e["detail"]["reason"]) for e in refused} == {("relaunch", "hold")}
    assert len(refused) == len({e["cause"] for e in refused})  # once per kind, not once per tick

    released = harness.loom("release")
    assert released.returncode == 0 and "released the operator's hold" in released.stdout
    wait_for(lambda: len(relaunches(harness)) == before + 1, 60, what="the deferred relaunch")
    daemon.settle()
    assert len(relaunches(harness)) == before + 1
    order = [e["kind"] for e in kinds_after(harness, mark - 1, {"hold_placed", "refused", "hold_cleared", "relaunch"})]
    assert order[0] == "hold_placed" and order[-1] == "relaunch"
    assert order.index("hold_cleared") > order.index("refused")
    assert harness.pinned() == session  # the crash resumed, as without the hold
    assert harness.loom("release").returncode == 1  # nothing left to release
    assert daemon.stop() == 0
    assert harness.loom("ledger", "verify").returncode == 0


def test_a_timed_hold_ends_by_itself_and_the_relaunch_follows(make_harness):
    harness = make_harness(sections=FAST)
    harness.start()
    daemon = Daemon(harness)
    assert harness.loom("hold", "--for", "3s", "--reason", "a short pause").returncode == 0
    before = len(relaunches(harness))
    assert harness.loom("inject", "/crash").returncode == 0
    wait_for(lambda: len(relaunches(harness)) == before + 1, 60, what="the relaunch after the hold expired")
    cleared = harness.events("hold_cleared")[-1]
    assert cleared["detail"]["how"] == "expired"
    assert cleared["id"] < relaunches(harness)[-1]["id"]
    daemon.settle()
    assert len(relaunches(harness)) == before + 1
    assert daemon.stop() == 0


def test_two_watchdog_ticks_at_once_relaunch_a_crashed_agent_once(make_harness):
    harness = make_harness(sections=FAST)
    harness.start()
    before = len(relaunches(harness))
    assert harness.loom("inject", "/crash").returncode == 0
    wait_for(lambda: harness.agent_pid() is None, 30, what="the agent gone")
    procs = [harness.popen("-m", "loomtui", "tick", "watchdog", "--json", stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [p.communicate(timeout=180) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes in ([0, 0], [0, 75]), results
    outcomes = [json.loads(out) for out, _ in results]
    assert {o["status"] for o in outcomes} <= {"ran", "busy"}
    assert len(relaunches(harness)) == before + 1, outcomes
    fired = harness.loom("tick", "watchdog")  # the agent is back (booting): nothing more to do
    assert fired.returncode == 0, fired.stderr
    assert len(relaunches(harness)) == before + 1


def test_every_loop_ticks_once_from_the_command_line(make_harness):
    harness = make_harness(sections=FAST)
    harness.start()
    for loop in ("sentinel", "notify", "canary"):
        result = harness.loom("tick", loop, "--json")
        assert result.returncode == 0, (loop, result.stderr)
        assert json.loads(result.stdout)["status"] == "ran"
    assert harness.loom("tick", "nonsense").returncode == 2
    scrape = {(e["kind"]) for e in harness.events()}
    assert "canary" in scrape  # the canary tick probed: nothing had been probed yet
