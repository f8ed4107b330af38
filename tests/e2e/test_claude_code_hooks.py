"""Issue 26, part 1, with the real Claude Code CLI (tests/claude, pinned) against the loopback fake
of the Messages API, under the stream-json driver and the real daemon: its hooks fire through
`--settings {hook_settings}` (the file Loom wrote), SessionStart, UserPromptSubmit and Stop are
recorded, and an injected line is witnessed dispatched (never reported missing)."""

from __future__ import annotations

import pytest
from harness import wait_for
from test_claude_code_loom import ACK_TIMEOUT, LONG, fake, make_claude  # noqa: F401  (fixtures)
from test_hooks_witness import hook_rows, prompted
from test_supervise import FAST, Daemon, relaunches
from test_witnessed_recovery import witnessing

from fake_anthropic import claude_bin

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
