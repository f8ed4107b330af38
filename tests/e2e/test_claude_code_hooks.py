"""Issue 26, part 1, with the real Claude Code CLI (tests/claude, pinned) against the loopback fake
of the Messages API, under the stream-json driver and the real daemon: its hooks fire through
`--settings {hook_settings}` (the file Loom wrote), SessionStart, UserPromptSubmit and Stop are
recorded, and an injected line is witnessed dispatched (never reported missing). The fake model
answering 429 fails the CLI's turn with a StopFailure `rate_limit`: a rate_limited hold, no
relaunch, one message, and the next turn that succeeds ends it."""

from __future__ import annotations

import json
import os
import signal

import pytest
from conftest import REPO
from harness import wait_for
from test_claude_code_loom import ACK_TIMEOUT, LONG, fake, make_claude  # noqa: F401  (fixtures)
from test_harness_causes import outbox
from test_hooks_witness import hook_rows, prompted
from test_supervise import FAST, Daemon, relaunches
from test_witnessed_recovery import witnessing

from fake_anthropic import claude_bin

from loomtui.pump import transcript as pump_transcript

pytestmark = pytest.mark.e2e

FLAGS = "--settings {hook_settings} --allowedTools 'Bash(touch:*)' --add-dir {state_dir}/acks"


def test_the_cli_s_hooks_are_recorded_and_an_injected_line_is_witnessed(make_claude):
    claude = claude_bin()
    harness = make_claude(sections={
        **FAST, "canary": {"ack_timeout": ACK_TIMEOUT, "interval": "30m"},
        "agent": {"fresh_command": f"{claude} --session-id {{session_id}} {FLAGS}",
                  "resume_command": f"{claude} --resume {{session_id}} {FLAGS}",
                  "dispatch_timeout": "5s", "boot_grace": "5s"}})
    session = harness.start()
    daemon = Daemon(harness)
    wait_for(lambda: witnessing(harness, relaunches(harness)[-1]), LONG, what="the start witnessed")
    [started] = wait_for(lambda: hook_rows(harness, "SessionStart"), LONG, what="the CLI's SessionStart")
    assert (started["session_id"], started["source"]) == (session, "startup")
    assert harness.events("session_started")[0]["detail"]["session_id"] == session
    sent = harness.inject("remember HOOKED-LINE")
    [submitted] = wait_for(lambda: prompted(harness, "remember HOOKED-LINE"), LONG, what="its UserPromptSubmit")
    assert submitted["session_id"] == session
    wait_for(lambda: [r for r in hook_rows(harness, "Stop") if r["id"] > submitted["id"]], LONG,
             what="the turn's Stop")
    # Past the line's dispatch timeout (40 watchdog looks, 300 ms apart with FAST): witnessed, so not missing.
    daemon.settle(ticks=40)
    typed_missing = {e["detail"]["typed"] for e in harness.events("dispatch_missing")}
    assert sent["id"] not in typed_missing and not typed_missing, harness.events("dispatch_missing")
    assert daemon.stop() == 0


def test_the_fake_model_s_429_becomes_a_rate_limited_hold_and_a_later_turn_releases_it(tmp_path, fake, make_claude):
    claude = claude_bin()
    home = tmp_path / "c0" / "claude-home"  # make_claude's first harness's root
    # No retries: the CLI fails the turn at the first 429 instead of backing off for minutes.
    env = {**fake.env(home), "PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO), "CLAUDE_CODE_MAX_RETRIES": "0"}
    harness = make_claude(sections={
        **FAST, "canary": {"ack_timeout": ACK_TIMEOUT, "interval": "30m"},
        "agent": {"fresh_command": f"{claude} --session-id {{session_id}} {FLAGS}",
                  "resume_command": f"{claude} --resume {{session_id}} {FLAGS}",
                  "boot_grace": "5s", "env": env}})
    harness.start()
    daemon = Daemon(harness)
    wait_for(lambda: witnessing(harness, relaunches(harness)[-1]), LONG, what="the start witnessed")
    started = relaunches(harness)
    fake.rate_limited = True
    harness.inject("a turn the model refuses")
    failures = wait_for(lambda: hook_rows(harness, "StopFailure"), LONG * 2, what="the CLI's StopFailure")
    # Under load the CLI may report a second refused request of the same turn (CI saw two rows):
    # every one of them is the model's 429.
    assert all(f["source"] == "rate_limit" for f in failures), failures
    held = wait_for(lambda: json.loads(harness.loom("status", "--json").stdout)["hold"], LONG, what="the hold")
    assert (held["by"], held["cause"]) == ("harness", "rate_limited")
    [told] = wait_for(lambda: outbox(harness), LONG, what="the operator told")
    assert "rate_limit" in told
    fake.rate_limited = False
    after = len(hook_rows(harness, "Stop"))
    harness.inject("and now it answers")
    wait_for(lambda: len(hook_rows(harness, "Stop")) > after, LONG, what="a turn that succeeds")
    [cleared] = wait_for(lambda: harness.events("hold_cleared"), LONG, what="the hold ended")
    assert cleared["detail"]["how"] == "succeeded"
    daemon.settle()
    assert relaunches(harness) == started and outbox(harness) == [told]
    assert daemon.stop() == 0


def test_after_a_kill_the_cli_s_resume_start_with_the_pinned_id_is_the_proof(make_claude):
    claude = claude_bin()
    harness = make_claude(sections={
        **FAST, "canary": {"ack_timeout": ACK_TIMEOUT, "interval": "30m"},
        "agent": {"fresh_command": f"{claude} --session-id {{session_id}} {FLAGS}",
                  "resume_command": f"{claude} --resume {{session_id}} {FLAGS}", "boot_grace": "60s"}})
    session = harness.start()
    daemon = Daemon(harness)
    wait_for(lambda: witnessing(harness, relaunches(harness)[-1]), LONG, what="the start witnessed",
             explain=daemon.explain)
    old = wait_for(harness.agent_pid, 30, what="the CLI's pid")
    os.kill(old, signal.SIGKILL)
    # The CLI itself died, as its pump saw (not one of its forks: ClaudeHarness.agent_pid).
    wait_for(lambda: [r for r in harness.records(pump_transcript.PUMP) if r.data.get("what") == "cli_exit"
                      and r.data.get("signal") == signal.SIGKILL], LONG, what="the pump seeing its CLI killed",
             explain=daemon.explain)
    relaunch = wait_for(lambda: relaunches(harness, "crash") + relaunches(harness, "exit"), LONG,
                        what="the relaunch", explain=daemon.explain)[0]
    assert relaunch["detail"]["mode"] == "resume"
    [proof] = wait_for(lambda: harness.events("resume_proven"), LONG, what="the resume proven by its SessionStart",
                       explain=daemon.explain)
    assert proof["detail"]["relaunch"] == relaunch["id"]
    assert proof["detail"]["started"] == {"source": "resume", "session_id": session}
    assert not harness.events("resume_failed") and harness.pinned() == session
    assert daemon.stop() == 0
