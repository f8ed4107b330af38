"""Issue 17's second must-show: Loom with `agent.driver = "stream-json"` supervising the real Claude
Code CLI (tests/claude, pinned) behind the real `loom pump` in a real tmux pane, the model being
the loopback fake of the Messages API (tests/fake_anthropic.py).

- a canary acked through a real Bash tool call;
- kill -9 of the CLI: resumed, and the next model request carries the earlier turns;
- a silent model: the canary misses, and the agent is recycled;
- three injections sent during a long turn reach the model after it, in order, one turn each,
  and all three are in the session after a resume.

No test here skips: without the CLI each fails saying that `make test` installs it.
"""

from __future__ import annotations

import json
import os
import re
import signal

import pytest
from conftest import REPO
import fake_anthropic
from fake_anthropic import FakeAnthropic, claude_bin
from harness import AgentHarness, wait_for
from test_canary import FAST_WATCH, probe_json, runs
from test_supervise import FAST, Daemon, relaunches
from test_witnessed_recovery import witnessing

from loomtui.agent import proctree
from loomtui.pump import client as pump_client
from loomtui.pump import transcript as pump_transcript
from loomtui.telegram import bridge

pytestmark = pytest.mark.e2e

CLI_MATCH = r"\.bin/claude\b"   # the CLI; the pump's command line names it too, and so do the CLI's forks
# A turn of the real CLI against the fake takes about a second here; a loaded 2-core machine may
# take many times that. Deadlines are generous; no assertion is on speed.
ACK_TIMEOUT = "30s"
SILENT_ACK_TIMEOUT = "15s"     # two of these pass before the silent model's recycle
LONG = 180


class ClaudeHarness(AgentHarness):
    """The real CLI under the stream-json driver, talking only to `fake`, its home under `root`."""

    def __init__(self, root, fake: FakeAnthropic, sections=None, allowed: tuple[str, ...] = (), **kwargs):
        self.fake = fake
        claude = claude_bin()
        home = root / "claude-home"
        # The canary touches a file in the state dir: outside the cwd, so its directory is added.
        tools = " ".join(f"'{tool}'" for tool in ("Bash(touch:*)", *allowed))
        flags = f"--allowedTools {tools} --add-dir {{state_dir}}/acks"
        agent = {
            "driver": "stream-json",
            "fresh_command": f"{claude} --session-id {{session_id}} {flags}",
            "resume_command": f"{claude} --resume {{session_id}} {flags}",
            "process_match": CLI_MATCH,
            "poller_match": "",
            "boot_grace": "2s",
            "env": {**fake.env(home), "PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO)},
        }
        sections = dict(sections or {})
        sections["agent"] = {**agent, **sections.get("agent", {})}
        super().__init__(root, sections=sections, modals=[], **kwargs)

    def pump(self) -> dict:
        try:
            return json.loads((self.state_dir / "pump.json").read_text())
        except (OSError, ValueError):
            return {}

    def pump_up(self) -> bool:
        """The pane's own pump runs with its CLI (which says nothing before its first message)."""
        doc = self.pump()
        pane = self.pane_pid()
        return pane is not None and doc.get("pid") == pane and doc.get("cli_exit") is None \
            and isinstance(doc.get("cli_pid"), int)

    def start(self) -> str:
        result = self.loom("recycle", "--fresh", "--reason", "test start")
        assert result.returncode == 0, result.stdout + result.stderr
        wait_for(self.pump_up, 60, what="the pump up with the CLI")
        return self.pinned()

    def agent_pid(self) -> int | None:
        """The CLI itself: the process the pane's pump started (pump.json's `cli_pid`), while it runs
        as that pump's child. Not the deepest process matching CLI_MATCH: the CLI forks to run each
        hook and tool, and a fork bears the CLI's command line until it execs, so now and then the
        deepest match is one of those (seen here during the start's canary turn). A kill test that
        killed one left the CLI running and waited for a relaunch that could never come."""
        doc, pane = self.pump(), self.pane_pid()
        cli = doc.get("cli_pid")
        if pane is None or doc.get("pid") != pane or doc.get("cli_exit") is not None or not isinstance(cli, int):
            return None
        try:
            _, parents = proctree.walk(pane)
            running = parents.get(cli) == pane and not proctree.is_zombie(cli) \
                and re.search(CLI_MATCH, proctree.cmdline(cli)) is not None
        except proctree.Ambiguous:
            return None
        return cli if running else None

    def records(self, direction: str | None = None) -> list[pump_transcript.Record]:
        return [r for r in pump_transcript.read(pump_transcript.path_in(self.state_dir))
                if direction is None or r.dir == direction]

    def inject(self, text: str) -> dict:
        result = self.loom("inject", text)
        assert result.returncode == 0, result.stdout + result.stderr
        return self.events("inject")[-1]

    def turn_ended(self, seq: int) -> bool:
        last = self.pump().get("last_result") or {}
        return last.get("seq") == seq or any(r.dir == pump_transcript.IN and r.data.get("seq", 0) > seq
                                             for r in self.records())

    def cleanup(self) -> None:
        # The CLI is in the pane's tree: AgentHarness kills the tmux server's children by pid.
        super().cleanup()


@pytest.fixture
def fake():
    with FakeAnthropic() as served:
        yield served


@pytest.fixture
def make_claude(tmp_path, fake):
    made: list[ClaudeHarness] = []

    def make(**kwargs) -> ClaudeHarness:
        harness = ClaudeHarness(tmp_path / f"c{len(made)}", fake, **kwargs)
        made.append(harness)
        return harness

    yield make
    # Before the fake closes: a CLI left running would be talking to nothing.
    for harness in made:
        harness.cleanup()


def in_seq(harness: ClaudeHarness, text: str) -> int:
    [record] = [r for r in harness.records(pump_transcript.IN) if r.data.get("text") == text]
    return record.data["seq"]


def last_said(request) -> str:
    texts = request.user_texts()
    return texts[-1] if texts else ""


def verified(harness) -> None:
    result = harness.loom("ledger", "verify")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_canary_is_acked_through_a_real_bash_tool_call(make_claude, fake):
    harness = make_claude(sections={"canary": {"ack_timeout": ACK_TIMEOUT}})
    harness.start()
    code, probe = probe_json(harness)
    assert code == 0 and probe["result"] == "ok", probe
    ack = harness.state_dir / "acks" / probe["nonce"]
    # The probe went to the CLI as the canary's turn...
    [sent] = [r for r in harness.records(pump_transcript.IN) if probe["nonce"] in r.data.get("text", "")]
    assert sent.data["origin"] == "canary"
    # The ack is the touch itself; the turn's tool result and its end come after it.
    wait_for(lambda: harness.turn_ended(sent.data["seq"]), LONG, what="the canary's turn ended")
    # ... the model asked for Bash `touch ACK`, the CLI ran it and said so, and the turn succeeded.
    events = [r.event for r in harness.records(pump_transcript.OUT) if r.offset > sent.offset]
    calls = [b for e in events if e.get("type") == "assistant" for b in e["message"]["content"]
             if b.get("type") == "tool_use"]
    assert [(c["name"], c["input"]["command"]) for c in calls] == [("Bash", f"touch {ack}")]
    results = [b for e in events if e.get("type") == "user" for b in e["message"]["content"]
               if isinstance(b, dict) and b.get("type") == "tool_result"]
    assert [(r["tool_use_id"], r["is_error"]) for r in results] == [(calls[0]["id"], False)]
    [result] = [e for e in events if e.get("type") == "result"]
    assert result["is_error"] is False and result["permission_denials"] == []
    # The model saw the tool's result come back: the request after the call carries it.
    follow = [r for r in fake.main_requests() if any(
        isinstance(b, dict) and b.get("type") == "tool_result" and b.get("tool_use_id") == calls[0]["id"]
        for m in r.body["messages"] if isinstance(m.get("content"), list) for b in m["content"])]
    assert follow, "no model request carried the Bash tool's result"
    assert harness.pump()["last_result"]["denials"] == []
    assert runs(harness)[-1]["result"] == "ok"


def test_kill_9_of_the_cli_is_resumed_and_the_next_request_carries_the_earlier_turns(make_claude, fake):
    harness = make_claude(sections={**FAST, "canary": {"ack_timeout": ACK_TIMEOUT, "interval": "30m"},
                                    "agent": {"boot_grace": "5s"}})
    session = harness.start()
    daemon = Daemon(harness)
    wait_for(lambda: witnessing(harness, relaunches(harness)[-1]), LONG, what="the start witnessed")
    sent = harness.inject("remember MARK-BEFORE-KILL")
    assert sent["detail"]["delivery"] == "delivered"
    seq = in_seq(harness, "remember MARK-BEFORE-KILL")
    wait_for(lambda: harness.turn_ended(seq), LONG, what="the turn before the kill ended")
    old = wait_for(harness.agent_pid, 30, what="the CLI's pid")
    os.kill(old, signal.SIGKILL)
    relaunch = wait_for(lambda: relaunches(harness, "crash") + relaunches(harness, "exit"), LONG,
                        what="the relaunch")[0]
    assert relaunch["source"] == "watchdog" and relaunch["detail"]["mode"] == "resume"
    assert relaunch["detail"]["new_session"] == session and harness.pinned() == session
    wait_for(lambda: harness.agent_pid() not in (None, old), LONG, what="the resumed CLI")
    # The resumed CLI asks the model nothing until it is spoken to; the canary witnessing the
    # relaunch speaks first, and its request carries every earlier turn of the session.
    [ack] = wait_for(lambda: witnessing(harness, relaunch), LONG, what="a canary ack witnessing the relaunch")
    assert ack["detail"]["result"] == "ok"
    after = [r for r in fake.main_requests() if r.ts > relaunch["ts"]]
    assert after, "the resumed CLI asked the model nothing"
    said = after[0].user_texts()
    assert "remember MARK-BEFORE-KILL" in said
    assert said.index("remember MARK-BEFORE-KILL") < len(said) - 1 and "liveness check" in said[-1]
    assert "heard: remember MARK-BEFORE-KILL" in after[0].texts()
    # The first canary turn of the session (the start's witness) is there too, before it.
    assert "liveness check" in said[0]
    assert len(relaunches(harness)) == 2
    assert daemon.stop() == 0
    verified(harness)


@pytest.mark.incident("silent_deafness")
def test_a_silent_model_makes_the_canary_miss_and_the_agent_is_recycled(make_claude, fake):
    # The silent model's turn is open (the CLI's init, then nothing): the pump's turns excuse its
    # misses until it has said nothing for turn_quiet, short here (docs/HOOKS.md, Busy or deaf).
    harness = make_claude(sections={"watchdog": FAST_WATCH,
                                    "canary": {"interval": "3s", "ack_timeout": SILENT_ACK_TIMEOUT,
                                               "misses_to_recycle": 2, "turn_quiet": "10s"}})
    session = harness.start()
    daemon = Daemon(harness)
    wait_for(lambda: any(r["result"] == "ok" for r in runs(harness)), LONG, what="a healthy ack")
    fake.silent = True
    silenced = max(r.ts for r in fake.requests)
    relaunch = wait_for(lambda: relaunches(harness, "canary_failed"), 2 * LONG, what="a canary_failed recycle")[0]
    assert relaunch["detail"]["mode"] == "resume" and relaunch["detail"]["new_session"] == session
    before = [r for r in runs(harness) if r["sent_at"] < relaunch["ts"]]
    assert [r["result"] for r in before][-2:] == ["miss", "miss"]
    # The model was asked and never answered: the CLI lived, its turn held.
    assert any(r.ts >= silenced for r in fake.main_requests())
    fake.silent = False
    wait_for(lambda: any(r["result"] == "ok" and r["sent_at"] > relaunch["ts"] for r in runs(harness)), LONG,
             what="the resumed agent acking once the model answers again")
    assert daemon.stop() == 0
    verified(harness)


def test_injections_during_a_long_turn_arrive_after_it_in_order_and_survive_a_resume(make_claude, fake):
    harness = make_claude()
    session = harness.start()
    fake.slow = 3600    # the next turn lasts until the test lowers it
    long_turn = harness.inject("a long task L0")
    assert long_turn["detail"]["delivery"] == "delivered"
    wait_for(lambda: any(last_said(r) == "a long task L0" for r in fake.main_requests()), LONG,
             what="the long turn at the model")
    names = ["injected I1", "injected I2", "injected I3"]
    sent = [harness.inject(name) for name in names]
    assert [e["detail"]["delivery"] for e in sent] == ["queued"] * 3
    assert harness.pump()["queue"] == 3 and harness.pump()["turn"] == "running"
    # Nothing of them reached the CLI, let alone the model, while the turn ran.
    assert not any(r.data.get("text") in names for r in harness.records(pump_transcript.IN))
    assert not any(n in t for r in fake.main_requests() for t in r.user_texts() for n in names)
    fake.slow = 0
    wait_for(lambda: harness.pump().get("queue") == 0 and harness.pump().get("turn") == "idle"
             and harness.pump().get("turns") == 4, LONG, what="the long turn and three more ended")
    # One turn each, in the order sent, each after the one before it ended.
    turns = [last_said(r) for r in fake.main_requests()]
    assert turns[turns.index("a long task L0"):] == ["a long task L0", *names]
    written = [r for r in harness.records() if r.dir == pump_transcript.IN
               or (r.dir == pump_transcript.OUT and r.event.get("type") == "result")]
    order = [r.data["text"] if r.dir == pump_transcript.IN else "result" for r in written]
    assert order[order.index("a long task L0"):] == ["a long task L0", "result", names[0], "result",
                                                     names[1], "result", names[2], "result"]
    # After a resume, the session holds all three, in order.
    result = harness.loom("recycle", "--resume", "--reason", "test resume")
    assert result.returncode == 0, result.stdout + result.stderr
    wait_for(harness.pump_up, 60, what="the resumed pump up")
    assert harness.pinned() == session
    resumed_at = relaunches(harness)[-1]["ts"]
    harness.inject("after the resume R1")
    first = wait_for(lambda: [r for r in fake.main_requests() if r.ts > resumed_at], LONG,
                     what="the resumed CLI's first request")[0]
    said = first.user_texts()
    assert said[-5:] == ["a long task L0", *names, "after the resume R1"]
    verified(harness)


def test_a_background_tasks_end_is_a_turn_of_the_clis_own_and_lines_wait_for_it(make_claude, fake):
    """Claude Code 2.1.332 tells the model of a background task's end (Bash's `run_in_background`)
    in a turn it takes by itself: the task's `system` events, then `init` ... `result`, no line
    written. The pump took it for idle: a line sent meanwhile went in at once and was merged into
    that turn, whose result was taken for the line's answer; and a task's event took the files of
    lines the CLI had not read yet. The task was the Telegram operator's (the line reaches the pump
    as the command loop's does): the bridge tells them its own turn's answer, and not W1's."""
    harness = make_claude(allowed=("Bash(sleep:*)",))
    harness.start()
    fake.notice_slow = 3600  # the CLI's own turn lasts until the test lowers it
    started = pump_client.send(harness.state_dir, "in the background: sleep 2", origin=bridge.TELEGRAM, ref="77")
    assert started.state == "delivered"

    def own_turn_running() -> bool:
        doc = harness.pump()
        return doc.get("turn") == "running" and doc.get("turn_seq") is None and \
            any(fake_anthropic.is_notice(r) for r in fake.main_requests())

    wait_for(own_turn_running, LONG, what="the CLI's own turn at the model, the pump saying it runs")
    waiting = harness.inject("while it runs W1")
    assert waiting["detail"]["delivery"] == "queued"
    assert harness.pump()["queue"] == 1
    assert not any(r.data.get("text") == "while it runs W1" for r in harness.records(pump_transcript.IN))
    fake.notice_slow = 0
    wait_for(lambda: harness.pump().get("queue") == 0 and harness.pump().get("turn") == "idle"
             and any(r.dir == pump_transcript.OUT and r.event.get("type") == "result"
                     and r.data.get("turn") == in_seq(harness, "while it runs W1") for r in harness.records()),
             LONG, what="the own turn ended, then W1's")
    # W1 reached the model in a turn of its own, after the notice's, never inside it.
    notices = [r for r in fake.main_requests() if fake_anthropic.is_notice(r)]
    assert notices and not any("while it runs W1" in t for r in notices for t in r.user_texts())
    assert last_said(fake.main_requests()[-1]) == "while it runs W1"
    # Every result names the line whose turn it ended, or says it was the CLI's own.
    results = [r for r in harness.records(pump_transcript.OUT) if r.event.get("type") == "result"]
    assert [("own" if r.data.get("own_turn") else r.data.get("turn")) for r in results] == [
        in_seq(harness, "in the background: sleep 2"), "own", in_seq(harness, "while it runs W1")]
    inits = [r for r in harness.records(pump_transcript.OUT) if r.event.get("subtype") == "init"]
    assert [bool(r.data.get("own_turn")) for r in inits] == [False, True, False]  # the turns read begin there
    # The bridge, on the real transcript: the operator's line answered, then its task's end in the
    # CLI's own words; W1 was the operator's `loom inject`, never echoed.
    _, answers = bridge.advance(bridge.Cursor(), harness.records())
    assert [(a.what, a.text) for a in answers][-1] == ("task", "noted: a background task ended.")
    assert [a.what for a in answers] == ["answer", "task"]
    verified(harness)
