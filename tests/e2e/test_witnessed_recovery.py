"""Witnessed recovery end to end: a killed agent is relaunched and then heard from again, with
nobody asking; tmux's pane-died hook wakes the watchdog, and the exit poll still catches a pane
whose hook never fired."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest
from harness import wait_for
from test_supervise import Daemon, relaunches

from loomtui.agent.tmux import EXIT_HOOK, EXIT_OPTION
from loomtui.report import incidents
from loomtui.report import status as status_mod
from loomtui.store import ledger
from loomtui.store.db import Store

pytestmark = pytest.mark.e2e

DEMO_READY = r"(?m)^> $"  # the demo agent's prompt on a line of its own (what the demo config says)


def timeline(harness) -> list[incidents.Incident]:
    with Store.in_dir(harness.state_dir) as store:
        return incidents.group(ledger.tail(store, 100000, kinds=list(incidents.KINDS)))


def witnessing(harness, relaunch: dict) -> list[dict]:
    return [e for e in harness.events("canary") if e["detail"].get("witnessed") == relaunch["id"]]


def witnessed_start(harness) -> None:
    """The daemon has witnessed the operator's start (so no probe is being typed as we kill)."""
    start = relaunches(harness)[-1]
    wait_for(lambda: witnessing(harness, start), 60, what="the start witnessed")


def kill_agent(harness) -> int:
    pid = wait_for(harness.agent_pid, 30, what="the agent's pid")
    os.kill(pid, signal.SIGKILL)
    return pid


@pytest.mark.incident("silent_deafness")
def test_a_killed_agent_is_relaunched_and_witnessed_with_nobody_asking(make_harness):
    harness = make_harness(sections={"agent": {"ready_match": DEMO_READY, "boot_grace": "30s"}})
    session = harness.start()
    daemon = Daemon(harness)
    # The operator's start is witnessed too, by the daemon's canary, without a `loom canary`.
    witnessed_start(harness)
    kill_agent(harness)
    relaunch = wait_for(lambda: relaunches(harness, "crash") + relaunches(harness, "exit"), 60,
                        what="the relaunch")[0]
    assert relaunch["source"] == "watchdog" and relaunch["detail"]["new_session"] == session
    [ack] = wait_for(lambda: witnessing(harness, relaunch), 60, what="a canary ack witnessing the relaunch")
    assert ack["detail"]["result"] == "ok" and ack["detail"]["launch"] == relaunch["id"]
    assert ack["id"] > relaunch["id"]
    # Nobody asked: every probe since the relaunch was the daemon's own.
    assert {e["source"] for e in harness.events("canary_sent") if e["id"] > relaunch["id"]} == {"canary"}
    # The incident's "took" runs to that ack.
    [incident] = [i for i in timeline(harness) if relaunch["id"] in i.event_ids]
    assert incident.status == incidents.RECOVERED
    assert incident.witness == ack["id"] and incident.end == ack["ts"]
    # And `loom status` calls the relaunch witnessed.
    ctx = harness.ctx()
    claim = status_mod.gather(ctx, look=False).relaunch
    assert claim is not None and claim.event == relaunch["id"] and claim.witnessed
    assert daemon.stop() == 0


def test_an_exit_is_acted_on_at_once_without_waiting_for_the_poll(make_harness):
    # Full ticks and exit polls an hour apart: only the exit events (tmux's pane-died hook, the
    # kernel's pidfd) can bring the watchdog in time.
    harness = make_harness(sections={"watchdog": {"interval": "1h", "exit_check": "1h"},
                                     "agent": {"ready_match": DEMO_READY}})
    harness.start()
    daemon = Daemon(harness)
    witnessed_start(harness)
    kill_agent(harness)
    relaunch = wait_for(lambda: relaunches(harness, "crash") + relaunches(harness, "exit"), 60, what="a relaunch")[0]
    wait_for(lambda: witnessing(harness, relaunch), 60, what="the relaunch witnessed")
    # The new pane has the hook again, pointing into this state dir.
    assert EXIT_HOOK in harness.tmux("show-hooks", "-w", "-t", "=agent:0").stdout
    option = harness.tmux("show-options", "-w", "-v", "-t", "=agent:0", EXIT_OPTION).stdout.strip()
    assert option == str(harness.state_dir / "signals" / "pane-died")
    assert daemon.stop() == 0


# The daemon as a machine without pidfds runs it (os.pidfd_open is Linux's): only the hook and the poll.
NO_PIDFD = "import os, runpy; del os.pidfd_open; runpy.run_module('loomtui', run_name='__main__', alter_sys=True)"


def test_a_pane_whose_hook_never_fires_is_still_caught_by_the_exit_poll(make_harness):
    harness = make_harness(sections={"watchdog": {"interval": "1h", "exit_check": "300ms"},
                                     "agent": {"ready_match": DEMO_READY}})
    harness.start()
    removed = harness.tmux("set-hook", "-u", "-w", "-t", "=agent:0", "pane-died")
    assert removed.returncode == 0, removed.stderr
    assert "pane-died" not in harness.tmux("show-hooks", "-w", "-t", "=agent:0").stdout
    signal_file = harness.state_dir / "signals" / "pane-died"
    signal_file.unlink(missing_ok=True)
    log = open(harness.root / "supervise-no-pidfd.log", "w")
    proc = harness.popen("-c", NO_PIDFD, "supervise", stdout=log, stderr=subprocess.STDOUT)
    wait_for(lambda: harness.events("supervisor_start") or proc.poll() is not None, 30, what="the daemon up")
    assert proc.poll() is None
    witnessed_start(harness)
    kill_agent(harness)
    try:
        relaunch = wait_for(lambda: relaunches(harness, "crash") + relaunches(harness, "exit"), 60,
                            what="a relaunch")[0]
    except AssertionError as exc:
        raise AssertionError(f"{exc}\ndaemon log:\n{open(log.name).read()[-3000:]}") from None
    assert relaunch["source"] == "watchdog"
    assert not signal_file.exists()  # the hook never fired: the poll alone saw it
    wait_for(lambda: witnessing(harness, relaunch), 60, what="the relaunch witnessed")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0


def test_an_operator_relaunch_says_who_will_witness_it_and_status_shows_the_claim(make_harness):
    harness = make_harness(sections={"agent": {"ready_match": DEMO_READY}})
    harness.start()
    # No daemon: nobody will probe, and the operator is told so plainly.
    result = harness.loom("recycle", "--resume")
    assert result.returncode == 0, result.stderr
    assert "unwitnessed: no loom supervise is running" in result.stdout and "loom canary" in result.stdout
    status = json.loads(harness.loom("status", "--json").stdout)
    relaunch = relaunches(harness)[-1]
    assert status["relaunch"]["event"] == relaunch["id"] and status["relaunch"]["witnessed"] is False
    assert "UNWITNESSED" in harness.loom("status").stdout
    # An operator's probe witnesses it as well as the daemon's would.
    assert harness.loom("canary").returncode == 0
    [ack] = witnessing(harness, relaunch)
    status = json.loads(harness.loom("status", "--json").stdout)
    assert status["relaunch"]["witnessed"] is True and status["relaunch"]["witness_event"] == ack["id"]
    assert "UNWITNESSED" not in harness.loom("status").stdout
    # With the daemon running, the same command leaves the witnessing to it, and it happens.
    daemon = Daemon(harness)
    result = harness.loom("recycle", "--resume")
    assert result.returncode == 0 and "loom supervise probes it" in result.stdout
    relaunch = relaunches(harness)[-1]
    wait_for(lambda: witnessing(harness, relaunch), 60, what="the daemon witnessing the operator's relaunch")
    assert daemon.stop() == 0


@pytest.mark.incident("resuming_a_stranger")
def test_a_ready_agent_ends_the_resume_check_and_a_failed_resume_still_goes_fresh(make_harness):
    # A resume check far longer than any wait below: only the prompt can end it early.
    harness = make_harness(sections={"agent": {"ready_match": DEMO_READY, "resume_check": "5m"}})
    first = harness.start()
    result = harness.loom("recycle", "--resume", timeout=120)
    assert result.returncode == 0, result.stderr
    with Store.in_dir(harness.state_dir) as store:
        launched = json.loads(store.get_meta("agent_launch"))
    assert launched["session_id"] == first and launched["ready"]["ts"] >= launched["ts"]
    # The failure is printed, the agent exits, and no prompt ever shows: fresh, as before.
    for path in (harness.data_dir / "sessions").iterdir():
        path.unlink()
    result = harness.loom("recycle", "--resume", timeout=120)
    assert result.returncode == 0, result.stderr
    assert "after the resume failed" in result.stdout
    assert [(e["cause"], e["detail"]["mode"]) for e in relaunches(harness)[-2:]] == [
        ("operator_resume", "resume"), ("resume_failed", "fresh")]
    assert harness.pinned() != first
