"""Issue 26 with the real Claude Code CLI (tests/claude, pinned) as an interactive screen in a real
tmux pane (the tmux driver, Loom's default), against the loopback fake of the Messages API, under
the real daemon: its hooks fire through `--settings {hook_settings}`, a long pasted line (2,000
characters) reaches UserPromptSubmit whole and is witnessed dispatched, and the canary's probe,
typed through the same paste, acks through a real Bash call.

The CLI's first-run screens (onboarding, the trust dialog for the working directory) are the
operator's once per machine; here its config says they were done, as an operator's would. The
`--add-dir` directory's dialog comes at every start (its default answer exits): README's modal
answers it, as Loom's watchdog does any configured dialog."""

from __future__ import annotations

import json
import os

import pytest
from conftest import REPO
from fake_anthropic import FakeAnthropic, claude_bin
from harness import AgentHarness, wait_for
from test_canary import runs
from test_claude_code_loom import fake  # noqa: F401  (fixture)
from test_hooks_witness import hook_rows, prompted
from test_supervise import FAST, Daemon

from loomtui.hooks import turn_rules

pytestmark = pytest.mark.e2e

LONG = 180
FLAGS = "--settings {hook_settings} --add-dir {state_dir}/acks --allowedTools 'Bash(touch:*)'"
# README's: the idle footer (2.1.332 shows the permission mode's, older versions "? for shortcuts"),
# and the dialogs a start can show: the working directory's trust (once per machine), and the
# --add-dir directory's (every session: "Your answer holds for this session"; its default is "No, exit").
READY = r"\? for shortcuts|shift\+tab to cycle"
MODALS = [{"match": "Yes, I trust this folder", "keys": ["Enter"]},
          {"match": "Adding a new directory", "keys": ["Down", "Enter"]}]


class InteractiveClaude(AgentHarness):
    def __init__(self, root, fake: FakeAnthropic, sections=None, flags: str = FLAGS):
        claude = claude_bin()
        home = root / "claude-home"
        env = {**fake.env(home), "PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO)}
        agent = {
            "fresh_command": f"{claude} {flags} --session-id {{session_id}}",
            "resume_command": f"{claude} {flags} --resume {{session_id}}",
            "process_match": r"\.bin/claude\b|claude-code",
            "poller_match": "",
            "boot_grace": "60s",
            "ready_match": READY,
            "env": env,
        }
        sections = dict(sections or {})
        sections["agent"] = {**agent, **sections.get("agent", {})}
        super().__init__(root, sections=sections, modals=MODALS)
        # What an operator's first run leaves: onboarding done, this working directory trusted.
        # An API key in the environment is used in an interactive session once it is approved (by
        # its last 20 characters), as `/config`'s "Use custom API key" records it.
        key = env["ANTHROPIC_API_KEY"]
        state = {"hasCompletedOnboarding": True, "theme": "dark", "numStartups": 3,
                 "customApiKeyResponses": {"approved": [key[-20:]], "rejected": []},
                 "projects": {str(self.workdir): {"hasTrustDialogAccepted": True, "allowedTools": []}}}
        for where in (home / ".claude" / ".claude.json", home / ".claude.json"):
            where.parent.mkdir(parents=True, exist_ok=True)
            where.write_text(json.dumps(state))

    def start(self) -> str:
        result = self.loom("recycle", "--fresh", "--reason", "test start")
        assert result.returncode == 0, result.stdout + result.stderr
        return self.pinned()

    def idle(self) -> bool:
        return "shift+tab to cycle" in self.screen()


@pytest.fixture
def interactive(tmp_path, fake):  # noqa: F811
    harness = InteractiveClaude(tmp_path / "c", fake, sections={
        **FAST, "canary": {"interval": "30m", "ack_timeout": "60s", "misses_to_recycle": 2}})
    yield harness
    harness.cleanup()


def test_the_interactive_cli_s_hooks_witness_a_long_pasted_line_and_the_canary_acks(interactive):
    harness = interactive
    session = harness.start()
    daemon = Daemon(harness)
    try:
        # The --add-dir dialog at the start, answered by the watchdog's modal; then the prompt.
        wait_for(lambda: harness.events("modal_dismissed"), LONG, what="the --add-dir dialog answered")
        wait_for(harness.idle, LONG, what="the CLI's prompt")
        [started] = wait_for(lambda: hook_rows(harness, "SessionStart"), LONG, what="SessionStart recorded")
        assert (started["session_id"], started["source"]) == (session, "startup")
        # The daemon's own probe witnessing the relaunch goes in once the CLI is ready, as the test's
        # line would. A CI run under load typed both at once: the CLI took the probe's Enter as a
        # newline and the two as one prompt (the witness then found the line missing, rightly). Here
        # the line waits for that probe's ack, so each is a prompt of its own.
        wait_for(lambda: [r for r in runs(harness) if r["result"] == "ok"], LONG, what="the relaunch witnessed")
        long_line = "please read this and answer in one word: " + " ".join(f"w{i:04d}" for i in range(390))
        assert len(long_line) > 2000
        result = harness.loom("inject", long_line)
        assert result.returncode == 0, result.stdout + result.stderr
        [taken] = wait_for(lambda: prompted(harness, long_line), LONG, what="the long line's UserPromptSubmit")
        # Whole: the digest of the line as typed is among the prompt's (prompted); the CLI may add
        # to it (2.1.332 sends a few dozen characters more than were pasted).
        assert json.loads(taken["detail"])["length"] >= len(long_line)
        wait_for(lambda: [r for r in hook_rows(harness, "Stop") if r["id"] > taken["id"]], LONG,
                 what="its turn's Stop")
        # The probe goes in once the CLI is back at its prompt. A CI run's probe, pasted the moment the
        # Stop was recorded, went unanswered under load (the pane was not kept: it is shown now if one
        # fails). The daemon's dispatch witness hastens the next probe after such a loss; a one-shot
        # `loom canary` has one try.
        wait_for(lambda: harness.idle() and "esc to interrupt" not in harness.screen(), LONG,
                 what="the CLI's prompt after the turn")
        probe = harness.loom("canary", "--json")
        assert probe.returncode == 0, (probe.stdout + probe.stderr + "\n--- pane:\n" + harness.screen()
                                       + f"\n--- dispatch_missing: {harness.events('dispatch_missing')}")
        assert json.loads(probe.stdout)["result"] == "ok", probe.stdout
        assert any(r["result"] == "ok" for r in runs(harness))
        assert not harness.events("dispatch_missing"), harness.events("dispatch_missing")
    finally:
        assert daemon.stop() == 0


def test_a_background_tasks_end_is_a_turn_with_a_prompt_and_a_stop_to_the_hooks(tmp_path, fake):  # noqa: F811
    """The interactive CLI (2.1.332) tells the model of a background task's end in a turn of its own,
    as print mode does (tests/e2e/test_claude_code_cli.py), and its hooks say so as of any turn: a
    UserPromptSubmit (the notice is its prompt) and a Stop. To Loom's hooks it is a turn like one
    the operator typed, busy while it runs (so the simulator's hooked world needs no turn of the
    CLI's own: its operator's turns are the same marks; docs/SIM.md)."""
    harness = InteractiveClaude(tmp_path / "c", fake, flags=FLAGS + " 'Bash(sleep:*)'", sections={
        **FAST, "canary": {"interval": "30m", "ack_timeout": "60s", "misses_to_recycle": 2}})
    harness.start()
    daemon = Daemon(harness)
    try:
        wait_for(harness.idle, LONG, what="the CLI's prompt")
        wait_for(lambda: [r for r in runs(harness) if r["result"] == "ok"], LONG, what="the relaunch witnessed")
        fake.notice_slow = 3600  # the CLI's own turn lasts until the test lowers it
        line = "in the background: sleep 3"
        result = harness.loom("inject", line)
        assert result.returncode == 0, result.stdout + result.stderr
        [taken] = wait_for(lambda: prompted(harness, line), LONG, what="the line's UserPromptSubmit")
        [stop] = wait_for(lambda: [r for r in hook_rows(harness, "Stop") if r["id"] > taken["id"]][:1], LONG,
                          what="the line's Stop")
        [notice] = wait_for(lambda: [r for r in hook_rows(harness, "UserPromptSubmit") if r["id"] > stop["id"]][:1],
                            LONG, what="the own turn's UserPromptSubmit")
        assert json.loads(notice["detail"])["length"] > 0 and not prompted(harness, line)[1:]

        def turn() -> str:
            status = harness.loom("status", "--json")  # a status that failed under load is looked at again
            return json.loads(status.stdout)["agent"]["turn"]["state"] if status.returncode == 0 else ""

        assert wait_for(lambda: turn() == turn_rules.TURN_BUSY, LONG, what="the own turn busy to Loom")
        fake.notice_slow = 0
        wait_for(lambda: [r for r in hook_rows(harness, "Stop") if r["id"] > notice["id"]], LONG,
                 what="the own turn's Stop")
        assert wait_for(lambda: turn() == turn_rules.NO_TURN, LONG, what="idle after it")
    finally:
        fake.notice_slow = 0
        try:
            assert daemon.stop() == 0
        finally:
            harness.cleanup()
