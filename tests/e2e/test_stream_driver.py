"""The stream-json driver end to end (issue 17's first must-show): the real demo agent in print
mode behind the real `loom pump` in a real tmux pane, the real daemon. Each failure the tmux
driver recovers from is recovered the same way here, and the ledger verifies after it; an
injection during a turn is queued and reaches the agent after that turn.

The scenarios and their helpers are the tmux tests' own (test_supervise, test_canary,
test_witnessed_recovery); only the harness differs: the agent runs with `agent.driver =
"stream-json"`, and "ready" is the pump's status file, not a prompt on a screen.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
import uuid

import pytest
from conftest import REPO
from harness import AgentHarness, wait_for
from test_canary import FAST_WATCH, heard_after, runs
from test_supervise import FAST, Daemon, relaunches
from test_witnessed_recovery import witnessing

from loomtui.pump import transcript as pump_transcript
from loomtui.store.db import DB_NAME, Store

pytestmark = pytest.mark.e2e


class StreamHarness(AgentHarness):
    """The demo agent under the stream-json driver: the same config but for `agent.driver`."""

    def __init__(self, root, sections=None, **kwargs):
        sections = dict(sections or {})
        sections["agent"] = {"driver": "stream-json", **sections.get("agent", {})}
        super().__init__(root, sections=sections, **kwargs)

    def pump(self) -> dict:
        try:
            return json.loads((self.state_dir / "pump.json").read_text())
        except (OSError, ValueError):
            return {}

    def pump_up(self, session_id: str | None = None) -> bool:
        """The pane's own pump runs and its CLI sent init (for `session_id`, when given)."""
        doc = self.pump()
        pane = self.pane_pid()
        return (pane is not None and doc.get("pid") == pane and doc.get("cli_exit") is None
                and doc.get("session_id") is not None and (session_id is None or doc["session_id"] == session_id))

    def start(self) -> str:
        result = self.loom("recycle", "--fresh", "--reason", "test start")
        assert result.returncode == 0, result.stderr
        session_id = self.pinned()
        wait_for(lambda: self.pump_up(session_id), 30, what="the pump up with the demo agent's init")
        return session_id

    def records(self, direction: str | None = None) -> list[pump_transcript.Record]:
        return [r for r in pump_transcript.read(pump_transcript.path_in(self.state_dir))
                if direction is None or r.dir == direction]

    def starts(self, session_id: str) -> list[str]:
        return [t for t in self.transcript(session_id, role="meta") if t in ("start", "resume")]


@pytest.fixture
def make_stream(tmp_path):
    made: list[StreamHarness] = []

    def make(**kwargs) -> StreamHarness:
        harness = StreamHarness(tmp_path / f"s{len(made)}", **kwargs)
        made.append(harness)
        return harness

    yield make
    for harness in made:
        harness.cleanup()


def verified(harness) -> None:
    result = harness.loom("ledger", "verify")
    assert result.returncode == 0, result.stdout + result.stderr


def supervised(make_stream, canary: dict, boot_grace: str = "1s"):
    """test_canary.supervised, with the stream-json driver."""
    harness = make_stream(sections={"watchdog": FAST_WATCH, "canary": canary, "agent": {"boot_grace": boot_grace}})
    session = harness.start()
    daemon = Daemon(harness)
    wait_for(lambda: any(r["result"] == "ok" for r in runs(harness)), 120, what="a healthy ack")
    return harness, session, daemon


# -- the agent dies ----------------------------------------------------------------------------


@pytest.mark.incident("silent_deafness")
def test_a_crash_is_resumed_and_witnessed(make_stream):
    harness = make_stream(sections={**FAST, "agent": {"boot_grace": "30s"}})
    session = harness.start()
    daemon = Daemon(harness)
    wait_for(lambda: witnessing(harness, relaunches(harness)[-1]), 60, what="the start witnessed")
    old_agent = harness.agent_pid()
    assert harness.loom("inject", "/crash").returncode == 0
    sent = harness.events("inject")[-1]
    event = wait_for(lambda: relaunches(harness, "crash") + relaunches(harness, "exit"), 60, what="a relaunch")[0]
    assert event["source"] == "watchdog" and event["ts"] > sent["ts"]
    assert event["detail"]["mode"] == "resume" and event["detail"]["new_session"] == session
    # The pump exits with its CLI's status: /crash exits 1 (tmux 3.3a does not always learn it).
    assert event["detail"]["evidence"]["status"] in (1, None)
    wait_for(lambda: harness.agent_pid() not in (None, old_agent) and harness.pump_up(session), 60,
             what="the resumed agent behind a new pump")
    assert harness.starts(session) == ["start", "resume"] and harness.pinned() == session
    [ack] = wait_for(lambda: witnessing(harness, event), 60, what="a canary ack witnessing the relaunch")
    assert ack["detail"]["result"] == "ok"
    daemon.settle()
    assert len(relaunches(harness)) == 2  # the operator's start and this one
    assert daemon.stop() == 0
    verified(harness)


@pytest.mark.incident("exit_zero_is_failure")
def test_exit_zero_is_a_failure_too(make_stream):
    harness = make_stream(sections=FAST)
    session = harness.start()
    daemon = Daemon(harness)
    assert harness.loom("inject", "/exit0").returncode == 0
    event = wait_for(lambda: relaunches(harness, "exit"), 30, what="an exit relaunch")[0]
    assert event["detail"]["evidence"]["status"] in (0, None) and event["detail"]["mode"] == "resume"
    wait_for(lambda: harness.pump_up(session), 60, what="the agent back")
    assert harness.pinned() == session and harness.starts(session) == ["start", "resume"]
    daemon.settle()
    assert [e["cause"] for e in relaunches(harness)] == ["operator_fresh", "exit"]
    assert daemon.stop() == 0
    verified(harness)


# -- the agent goes deaf, or is only slow ------------------------------------------------------


@pytest.mark.incident("silent_deafness")
def test_wedge_two_misses_recycle_and_the_resumed_agent_acks(make_stream):
    # The wedge is a turn the CLI began (its init) and never ended: the pump's turns excuse its
    # misses until it has said nothing for turn_quiet (test_busy_turns_stream.py), short here.
    harness, session, daemon = supervised(make_stream, {"interval": "3s", "ack_timeout": "2s",
                                                        "misses_to_recycle": 2, "turn_quiet": "5s"}, "2s")
    assert harness.loom("inject", "/wedge").returncode == 0
    event = wait_for(lambda: relaunches(harness, "canary_failed"), 90, what="a canary_failed recycle")[0]
    assert event["detail"]["mode"] == "resume" and event["detail"]["new_session"] == session
    misses = [r for r in runs(harness) if r["result"] == "miss" and r["sent_at"] < event["ts"]]
    assert len(misses) >= 2
    # The wedged turn never ended: the probes waited in the pump's queue, never reaching the agent.
    probes = [e for e in harness.events("canary_sent") if e["ts"] < event["ts"] and e["detail"]["run"] in
              {m["id"] for m in misses}]
    assert probes and all(e["detail"]["delivery"] == "queued" for e in probes)
    assert all("never reached the agent" in m["why"] for m in misses)  # a fact beside the miss, not its cause
    wait_for(lambda: any(r["result"] == "ok" and r["sent_at"] > event["ts"] for r in runs(harness)), 90,
             what="the resumed agent acking")
    daemon.settle(3)
    assert len(relaunches(harness, "canary_failed")) == 1
    assert daemon.stop() == 0
    verified(harness)


@pytest.mark.incident("silent_deafness")
def test_a_cli_that_stopped_reading_its_input_is_recycled_by_the_canary(make_stream):
    """A CLI that closed its stdin and runs on (hung on its way out, say) can never hear again:
    the pump's write fails (`write_failed`) and it refuses every later line. That refusal is the
    agent's deafness, told by the kernel (a broken pipe), not a pane Loom could not type into:
    each probe it refuses is a miss, and two recycle the agent (resumed, its conversation kept).
    Before, each was `inject_failed` (never counted), and the agent stayed deaf for good."""
    harness, session, daemon = supervised(make_stream, {"interval": "3s", "ack_timeout": "2s",
                                                        "misses_to_recycle": 2})
    cli = harness.pump()["cli_pid"]
    assert harness.loom("inject", "/close-stdin").returncode == 0
    event = wait_for(lambda: relaunches(harness, "canary_failed"), 120, what="a canary_failed recycle")[0]
    assert event["detail"]["mode"] == "resume" and event["detail"]["new_session"] == session
    misses = [r for r in runs(harness) if r["result"] == "miss" and r["sent_at"] < event["ts"]]
    assert len(misses) >= 2 and all("no longer reads its input" in m["why"] or "could not write" in m["why"]
                                    for m in misses[-2:])
    assert [r for r in runs(harness) if r["result"] == "inject_failed" and r["sent_at"] < event["ts"]] == []
    wait_for(lambda: any(r["result"] == "ok" and r["sent_at"] > event["ts"] for r in runs(harness)), 90,
             what="the resumed agent acking")
    assert harness.pump()["cli_pid"] != cli
    daemon.settle(3)
    assert len(relaunches(harness, "canary_failed")) == 1
    assert daemon.stop() == 0
    verified(harness)


@pytest.mark.incident("confident_false_detector")
def test_a_busy_agent_is_not_recycled(make_stream):
    timeout = 10.0
    harness, _, daemon = supervised(make_stream, {"interval": "30m", "ack_timeout": f"{timeout:g}s"})
    # As with the tmux driver: the next probe finds the agent busy for longer than one timeout and
    # shorter than two, counted from its arrival. Then either the re-probe waits in the pump's queue
    # behind that turn and is delivered, and acked, when it ends; or, when the daemon looks after the
    # late ack came, that ack is recorded on the miss and ends the run (the agent heard).
    assert harness.loom("inject", f"/late-acks 1 {timeout * 1.2:g}").returncode == 0
    result = harness.loom("canary", "--json")
    probe = json.loads(result.stdout)
    assert result.returncode == 1 and probe["result"] == "miss"

    heard_after(harness, probe)
    daemon.settle(5)
    assert relaunches(harness, "canary_failed") == []
    assert daemon.stop() == 0
    verified(harness)


@pytest.mark.incident("confident_false_detector")
def test_a_locked_store_is_our_error_never_a_miss(make_stream):
    harness, _, daemon = supervised(make_stream, {"interval": "1s", "ack_timeout": "2s"})
    before = len(runs(harness))
    blocker = sqlite3.connect(harness.state_dir / DB_NAME, timeout=30, isolation_level=None)
    try:
        blocker.execute("BEGIN EXCLUSIVE")
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
    verified(harness)


# -- the resume fails --------------------------------------------------------------------------


@pytest.mark.incident("resuming_a_stranger")
def test_a_resume_that_finds_no_conversation_goes_fresh(make_stream):
    harness = make_stream(sections={"agent": {"resume_check": "5m"}})
    first = harness.start()
    # A resume that works ends its check once init came and nothing is pending, long before 5m.
    result = harness.loom("recycle", "--resume", timeout=120)
    assert result.returncode == 0, result.stderr
    assert "after the resume failed" not in result.stdout and harness.pinned() == first
    with Store.in_dir(harness.state_dir) as store:
        launched = json.loads(store.get_meta("agent_launch"))
    assert launched["session_id"] == first and launched["ready"]["ts"] >= launched["ts"]
    # The CLI says so on stderr and exits: fresh, as with the tmux driver.
    for path in (harness.data_dir / "sessions").iterdir():
        path.unlink()
    result = harness.loom("recycle", "--resume", timeout=120)
    assert result.returncode == 0, result.stderr
    assert "after the resume failed" in result.stdout
    [failed] = harness.events("resume_failed")
    # The CLI answers an error result before any init, and says so in it and on stderr, then exits,
    # as Claude Code does: whichever the check sees first fails the resume (the exit alone would not).
    assert failed["detail"]["session"] == first
    assert any(sign in failed["detail"]["why"] for sign in ("shows the resume failure", "error result"))
    assert [(e["cause"], e["detail"]["mode"]) for e in relaunches(harness)[-2:]] == [
        ("operator_resume", "resume"), ("resume_failed", "fresh")]
    third = harness.pinned()
    assert third != first
    wait_for(lambda: harness.pump_up(third), 60, what="the fallback fresh session behind its pump")
    verified(harness)


def test_a_message_that_says_no_conversation_found_fails_no_resume(make_stream):
    # The pump's pane echoes what is sent in and answered: a leftover delivered during the resume's
    # check that holds the failure's words (an operator quoting a log) is no failure; only the
    # CLI's stderr says that. It was read as one, and the resumed conversation thrown away.
    harness = make_stream(sections={"agent": {"resume_check": "5m"}})
    first = harness.start()
    gate = harness.root / "gate"
    assert harness.loom("inject", f"/wait-for {gate}").returncode == 0
    assert harness.loom("inject", "/say No conversation found with session ID: in the cron log").returncode == 0
    assert harness.events("inject")[-1]["detail"]["delivery"] == "queued"
    os.kill(wait_for(harness.agent_pid, 30, what="the agent"), signal.SIGKILL)
    wait_for(lambda: harness.pane_pid() is None, 30, what="the pane dead")
    result = harness.loom("recycle", "--resume", timeout=120)
    assert result.returncode == 0, result.stderr
    assert "/say No conversation found with session ID: in the cron log" in harness.transcript(first)
    assert harness.events("resume_failed") == []
    assert [(e["cause"], e["detail"]["mode"]) for e in relaunches(harness)[-1:]] == [("operator_resume", "resume")]
    assert harness.pinned() == first


def resumed_with_a_leftover(make_stream, leftover: str):
    """An agent killed in a turn with `leftover` queued behind it, resumed by the operator: the new
    pump delivers the leftover first, during the resume's check."""
    harness = make_stream(sections={"agent": {"resume_check": "5m"}})
    first = harness.start()
    gate = harness.root / "gate"
    assert harness.loom("inject", f"/wait-for {gate}").returncode == 0
    assert harness.loom("inject", leftover).returncode == 0
    assert harness.events("inject")[-1]["detail"]["delivery"] == "queued"
    os.kill(wait_for(harness.agent_pid, 30, what="the agent"), signal.SIGKILL)
    wait_for(lambda: harness.pane_pid() is None, 30, what="the pane dead")
    return harness, first, harness.loom("recycle", "--resume", timeout=120)


def test_an_error_result_after_init_keeps_the_resumed_conversation(make_stream):
    # A leftover answered at once with an error (a usage limit, a prompt too long) came after init:
    # the session loaded, and a turn in it failed. It was taken for a failed resume and the
    # conversation thrown away for a fresh one.
    harness, first, result = resumed_with_a_leftover(make_stream, "/error-result")
    assert result.returncode == 0, result.stderr
    assert "after the resume failed" not in result.stdout
    assert harness.events("resume_failed") == [] and harness.pinned() == first
    # The resumed CLI did get the leftover, and answered it with the error.
    assert "/error-result" in harness.transcript(first)
    assert [(e["cause"], e["detail"]["mode"]) for e in relaunches(harness)[-1:]] == [("operator_resume", "resume")]
    wait_for(lambda: harness.pump_up(first), 60, what="the resumed session behind its pump")
    verified(harness)


def test_a_resumed_cli_that_dies_after_init_is_a_launch_death_not_a_lost_conversation(make_stream):
    # An exit that says nothing of the session (a crash in the leftover's turn) is the launch's
    # death: launch_died, and the conversation stays pinned for the next relaunch to resume.
    harness, first, result = resumed_with_a_leftover(make_stream, "/crash")
    assert result.returncode != 0
    assert harness.events("resume_failed") == [] and harness.pinned() == first
    [died] = harness.events("launch_died")
    assert died["detail"]["session"] == first and "exited" in died["detail"]["why"]
    assert "/crash" in harness.transcript(first)
    assert [(e["cause"], e["detail"]["mode"]) for e in relaunches(harness)[-1:]] == [("operator_resume", "resume")]
    verified(harness)


def test_a_resume_that_hangs_without_init_is_resumed_and_left_to_the_canary(make_stream):
    from loomtui import actions

    harness = make_stream(sections={"agent": {"resume_check": "2s"}})
    first = harness.start()
    assert harness.loom("inject", "/poison").returncode == 0  # this session now hangs on every resume
    wait_for(lambda: "/poison" in harness.transcript(first), 30, what="the poison taken")
    outcome = actions.recycle(harness.ctx(), "resume", source="test").outcome
    assert outcome is not None and outcome.ok
    # Silent but not proven failed: resumed, and left to the canary.
    assert not outcome.resume_failed and outcome.mode == "resume" and harness.pinned() == first
    assert harness.events("resume_failed") == []
    verified(harness)


# -- injections during a turn ------------------------------------------------------------------


def test_an_injection_during_a_turn_is_queued_and_reaches_the_agent_after_it(make_stream):
    harness = make_stream()
    session = harness.start()
    gate = harness.root / "gate"
    assert harness.loom("inject", f"/wait-for {gate}").returncode == 0
    wait_for(lambda: harness.pump().get("turn") == "running", 30, what="the slow turn running")
    result = harness.loom("inject", "said during the turn")
    assert result.returncode == 0, result.stderr
    queued = harness.events("inject")[-1]
    assert queued["detail"]["delivery"] == "queued" and queued["detail"]["position"] == 1
    assert "said during the turn" not in harness.transcript(session)
    assert harness.pump()["queue"] == 1
    assert "1 queued" in harness.loom("status").stdout
    status = json.loads(harness.loom("status", "--json").stdout)
    assert status["agent"]["driver"] == "stream-json" and status["agent"]["stream"]["queue"] == 1
    assert status["agent"]["stream"]["turn"] == "running"
    gate.touch()
    wait_for(lambda: "said during the turn" in harness.transcript(session), 30, what="the queued line delivered")
    users = harness.transcript(session)
    assert users.index(f"/wait-for {gate}") < users.index("said during the turn")
    # In the pump's transcript: the turn's result came before the queued line went in.
    records = harness.records()
    seq = queued["detail"]["seq"]
    written = next(i for i, r in enumerate(records) if r.dir == "in" and r.data.get("seq") == seq)
    assert any(r.dir == "out" and r.event.get("type") == "result" for r in records[:written])
    assert records[written].data["origin"] == "operator"
    wait_for(lambda: harness.pump().get("queue") == 0 and harness.pump().get("turn") == "idle", 30,
             what="the queue drained")
    verified(harness)


@pytest.mark.incident("garbled_replay")
def test_a_line_waiting_through_a_relaunch_is_not_handed_to_the_new_pump(make_stream):
    import threading

    from loomtui.agent.inject import inject
    from loomtui.agent.stream_driver import StreamJsonDriver, pump_command
    from loomtui.store import locks

    harness = make_stream()
    harness.start()
    ctx = harness.ctx()
    driver = StreamJsonDriver(ctx.config, ctx.state_dir)
    looked, pane_pid = threading.Event(), driver.pane_pid

    def pane_pid_seen():
        pid = pane_pid()
        looked.set()
        return pid

    driver.pane_pid = pane_pid_seen
    results = []
    lock = locks.hold(harness.state_dir, locks.INJECT, timeout=5)  # as a relaunch holds it
    try:
        waiting = threading.Thread(target=lambda: results.append(
            inject(ctx, "meant for the old one", source="test", driver=driver)))
        waiting.start()
        assert looked.wait(60), "the injection never looked at the pane"
        old = harness.pane_pid()
        # A new pump, on the same socket path, takes the pane while the line waits (what a
        # relaunch does under the lock): its socket would take the line, were it handed over.
        command = pump_command(harness.state_dir, f"{sys.executable} -m loomtui.demo.agent --session-id {uuid.uuid4()}")
        swapped = harness.tmux("respawn-pane", "-k", "-e", f"LOOM_DEMO_DATA={harness.data_dir}",
                               "-e", f"PYTHONPATH={REPO}", "-t", "=agent:0.0", command)
        assert swapped.returncode == 0, swapped.stderr
        wait_for(lambda: harness.pane_pid() not in (None, old) and harness.pump_up(), 60, what="a new pump up")
    finally:
        lock.release()
    waiting.join(60)
    [result] = results
    assert not result.ok and "relaunched while this waited" in result.error
    assert not [r for r in harness.records("in") if r.data.get("text") == "meant for the old one"]


def test_a_probe_is_a_canary_turn_and_a_denial_is_recorded_once(make_stream):
    harness = make_stream(sections=FAST)
    harness.start()
    result = harness.loom("canary", "--json")
    assert result.returncode == 0 and json.loads(result.stdout)["result"] == "ok"
    ins = harness.records("in")
    assert ins[-1].data["origin"] == "canary"
    assert harness.loom("inject", "/deny").returncode == 0
    wait_for(lambda: (harness.pump().get("last_result") or {}).get("denials") == ["Bash"], 30,
             what="the denied turn ended")
    daemon = Daemon(harness)
    [denied] = wait_for(lambda: harness.events("permission_denied"), 30, what="the denial recorded")
    assert denied["detail"]["tools"] == ["Bash"] and denied["detail"]["origin"] == "operator"
    assert "curl" not in json.dumps(denied)  # the call's input is the agent's business, not the ledger's
    assert "last turn denied Bash" in harness.loom("status").stdout
    # The pane shows the assistant's words, which may be a dialog's: none is ever looked for here.
    dialog = "Do you trust the files in this folder? > 1. Yes, I trust this folder"
    assert harness.loom("inject", f"/say {dialog}").returncode == 0
    wait_for(lambda: "Yes, I trust this folder" in harness.screen(), 30, what="the dialog's words on the pane")
    daemon.settle(3)
    assert len(harness.events("permission_denied")) == 1
    assert harness.events("modal_dismissed") == [] and harness.events("keys") == []
    assert daemon.stop() == 0
    verified(harness)


# -- the demo ----------------------------------------------------------------------------------


def test_the_stream_json_demo_crashes_once_recovers_and_stops_cleanly(tmp_path):
    from test_demo_run import alive, demo_processes

    from loomtui.demo.launcher import Demo
    from loomtui.store import ledger

    demo = Demo(tmp_path / "demo", crash_after=5.0, driver="stream-json")
    seen: set[int] = set()
    try:
        demo.start()
        assert 'driver = "stream-json"' in demo.config_path.read_text()

        def events(kind):
            with Store.in_dir(demo.root / "state") as store:
                return [e.as_dict() for e in ledger.tail(store, 1000, kinds=[kind])]

        crash = wait_for(lambda: [e for e in events("relaunch") if e["cause"] in ("crash", "exit")], 180,
                         what="the demo's crash relaunched")[0]
        assert crash["detail"]["mode"] == "resume" and crash["source"] == "watchdog"
        wait_for(lambda: [e for e in events("canary") if e["detail"].get("witnessed") == crash["id"]], 180,
                 what="the relaunch witnessed")
        [crash_line] = events("inject")  # the demo's /crash, through the pump
        assert crash_line["detail"]["ok"] and crash_line["detail"]["delivery"] in ("delivered", "queued")
        seen |= demo_processes(demo)
    finally:
        seen |= demo_processes(demo)
        demo.stop()
        wait_for(lambda: not {p for p in seen if alive(p)} and not demo_processes(demo), 60,
                 what="every demo process gone after the stop")


# A CLI deaf to SIGTERM (Claude Code whose event loop hangs never runs its handler): it answers its
# first line once the file named by argv[1] exists, then never reads its input again.
DEAF_CLI = """import json, os, signal, sys, time
for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
    signal.signal(sig, signal.SIG_IGN)
print(json.dumps({"type": "system", "subtype": "init", "session_id": "deaf"}), flush=True)
sys.stdin.readline()
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
print(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": "one",
                  "session_id": "deaf"}), flush=True)
time.sleep(600)
"""


def test_a_cli_deaf_to_sigterm_is_stopped_and_its_pump_counts_the_line_it_never_read(make_stream, tmp_path):
    """A relaunch ends the pane's tree: the CLI, deaf to SIGTERM, is killed after the stop grace, and
    the pump (the pane's process) is let to see it gone and record the kept line it never read, so a
    line that hangs every CLI it reaches is set aside after pump.rules.MAX_UNREAD launches. Killed with
    its CLI, the pump recorded nothing and the line went to every launch until the ceiling."""
    import shlex

    from loomtui.agent.stream_driver import StreamJsonDriver, pump_command
    from loomtui.pump import client as pump_client

    harness = make_stream()
    harness.start()
    ctx = harness.ctx()
    go = tmp_path / "go"
    command = pump_command(harness.state_dir, shlex.join([sys.executable, "-c", DEAF_CLI, str(go)]))
    swapped = harness.tmux("respawn-pane", "-k", "-t", "=agent:0.0", command)
    assert swapped.returncode == 0, swapped.stderr
    wait_for(lambda: harness.pump().get("session_id") == "deaf" and harness.pump().get("pid") == harness.pane_pid(),
             60, what="the deaf CLI's pump up")
    cli_pid = harness.pump()["cli_pid"]
    sends = [pump_client.send(harness.state_dir, text, origin="operator", timeout=30) for text in ("one", "two")]
    assert [reply.state for reply in sends] == ["delivered", "queued"]
    go.touch()
    wait_for(lambda: [r.data["seq"] for r in harness.records("in")] == [1, 2], 60, what="the kept line written")
    driver = StreamJsonDriver(ctx.config, ctx.state_dir)
    assert driver.stop(1.0) == []
    assert not psutil_alive(cli_pid)
    assert [r.data for r in harness.records("pump") if r.data.get("what") == "unread"] == [
        {"what": "unread", "seqs": [2]}]
    kept = json.loads((pump_client.queue_dir(harness.state_dir) / "2.json").read_text())
    assert (kept["text"], kept["unread"]) == ("two", 1)
    # The pump recorded its CLI's end (SIGKILL, the driver's) and the line, so it outlived the CLI:
    # killed with it, it recorded neither. (tmux's pane_dead_status is no witness: under load tmux
    # showed the pane dead, its status not yet read, for longer than a test waits.)
    assert [r.data.get("signal") for r in harness.records("pump") if r.data.get("what") == "cli_exit"][-1] == 9


# DEAF_CLI that first starts, deaf to the hangup the pane's end sends its foreground group as the CLI
# is and with no environment of Loom's, a child (an MCP server started with a pared-down environment;
# its pid to argv[3]) and a stranger in its session whose parent is gone (its pid to argv[2]). The
# hangup is ignored before they are forked, so from their first instant (a `trap` in the child's
# shell came too late under load: the pane's end killed the stranger first).
STRANGER_CLI = """import signal, subprocess, sys
signal.signal(signal.SIGHUP, signal.SIG_IGN)
server = subprocess.Popen(["/bin/sh", "-c", "exec sleep 600"], env={})
subprocess.run(["/bin/sh", "-c", "sleep 601 & echo $! > " + sys.argv[2]], env={}, check=True)
open(sys.argv[3], "w").write(str(server.pid))
""" + DEAF_CLI


def test_a_cli_left_running_by_its_pump_killed_is_ended_before_the_next_launch(make_stream, tmp_path):
    """A pump SIGKILLed (the pane's process: the pane dies) leaves its CLI running, its input closed,
    the turn it ran going on. The relaunch's stop took the dead pane for "nothing to stop", and the
    new CLI resumed the conversation beside the old one. What the dead pane left in its session in
    the environment Loom launched the agent with is ended now, with what that started; a process
    there with neither is not."""
    import shlex

    from loomtui.agent.stream_driver import StreamJsonDriver, pump_command

    harness = make_stream()
    harness.start()
    ctx = harness.ctx()
    stranger_file, server_file = tmp_path / "stranger.pid", tmp_path / "server.pid"
    command = pump_command(harness.state_dir, shlex.join([sys.executable, "-c", STRANGER_CLI, str(tmp_path / "never"),
                                                          str(stranger_file), str(server_file)]))
    # The state dir as another spelling of it (`..`): the same directory.
    spelled = ctx.state_dir / ".." / ctx.state_dir.name
    swapped = harness.tmux("respawn-pane", "-k", "-e", f"LOOM_STATE_DIR={spelled}", "-e", "LOOM_AGENT=main",
                           "-t", "=agent:0.0", command)
    assert swapped.returncode == 0, swapped.stderr
    wait_for(lambda: harness.pump().get("session_id") == "deaf" and harness.pump().get("pid") == harness.pane_pid(),
             60, what="the deaf CLI's pump up")
    pump_pid, cli_pid = harness.pump()["pid"], harness.pump()["cli_pid"]
    server = int(wait_for(lambda: server_file.exists() and server_file.read_text(), 30, what="the server's pid"))
    stranger = int(stranger_file.read_text())
    try:
        assert os.getsid(stranger) == os.getsid(server) == os.getsid(cli_pid) == pump_pid  # one session: the pane's
        os.kill(pump_pid, signal.SIGKILL)
        wait_for(lambda: harness.tmux("display-message", "-p", "-t", "=agent:0.0", "#{pane_dead}").stdout.strip()
                 == "1", 60, what="the pane dead")
        assert psutil_alive(cli_pid) and psutil_alive(server)  # its input closed, it runs on
        # Made without the agent's dir, a driver cannot tell what is the agent's: it ends nothing.
        assert StreamJsonDriver(ctx.config, None).stop(1.0) == [] and psutil_alive(cli_pid)
        driver = StreamJsonDriver(ctx.config, ctx.state_dir)
        assert driver.stop(1.0) == []
        assert not psutil_alive(cli_pid) and not psutil_alive(server) and psutil_alive(stranger)
    finally:
        for pid in (stranger, server, cli_pid):
            if psutil_alive(pid):
                os.kill(pid, signal.SIGKILL)


def psutil_alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
