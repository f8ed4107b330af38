"""Issue 26, part 1, end to end: the demo agent in a real tmux pane, run with `--settings
{hook_settings}`, under the real daemon. Its hooks fire at Claude Code's moments; a line it takes
is witnessed dispatched, and a line typed after `/wedge` is reported `dispatch_missing` within
`agent.dispatch_timeout`, and the canary probes at once (the schedule is 30 minutes away)."""

from __future__ import annotations

import json
import sys

import pytest
from harness import wait_for
from test_canary import runs
from test_supervise import FAST, Daemon, relaunches
from test_witnessed_recovery import witnessed_start

from loomtui.hooks.events import typed_digest
from loomtui.store.db import Store

pytestmark = pytest.mark.e2e

LONG = 120
PY = sys.executable
HOOKED = {
    "fresh_command": f"{PY} -m loomtui.demo.agent --settings {{hook_settings}} --session-id {{session_id}}",
    "resume_command": f"{PY} -m loomtui.demo.agent --settings {{hook_settings}} --resume {{session_id}}",
    "dispatch_timeout": "3s",
}


def hook_rows(harness, event: str | None = None) -> list[dict]:
    with Store.in_dir(harness.state_dir) as store:
        rows = [dict(r) for r in store.query("SELECT * FROM hook_events ORDER BY id")]
    return [r for r in rows if event is None or r["event"] == event]


def prompted(harness, text: str) -> list[dict]:
    return [r for r in hook_rows(harness, "UserPromptSubmit")
            if typed_digest(text) in json.loads(r["detail"])["said"]]


def inject(harness, text: str) -> dict:
    result = harness.loom("inject", text)
    assert result.returncode == 0, result.stdout + result.stderr
    return harness.events("inject")[-1]


@pytest.mark.incident("silent_deafness")
def test_a_line_the_wedged_agent_never_takes_is_missing_and_probed_at_once(make_harness):
    harness = make_harness(sections={**FAST, "agent": HOOKED,
                                     "canary": {"interval": "30m", "ack_timeout": "6s", "misses_to_recycle": 2}})
    session = harness.start()
    daemon = Daemon(harness)
    witnessed_start(harness)
    # The hooks ran from the settings file Loom wrote: the session's start, with its id.
    [started] = wait_for(lambda: harness.events("session_started"), LONG, what="SessionStart recorded")
    assert started["source"] == "hooks" and started["detail"] == {
        "event": "SessionStart", "session_id": session, "source": "startup"}
    settings = harness.state_dir / "hooks" / "settings.json"
    assert (settings.stat().st_mode & 0o777) == 0o600 and "UserPromptSubmit" in json.loads(settings.read_text())["hooks"]

    heard = inject(harness, "hello hooks")
    wait_for(lambda: prompted(harness, "hello hooks"), LONG, what="the line's UserPromptSubmit")
    wait_for(lambda: [r for r in hook_rows(harness, "Stop") if r["id"] > prompted(harness, "hello hooks")[0]["id"]],
             LONG, what="its turn's Stop")
    inject(harness, "/wedge")
    wait_for(lambda: prompted(harness, "/wedge"), LONG, what="the /wedge line's UserPromptSubmit")
    last_probe = runs(harness)[-1]
    lost = inject(harness, "are you there")
    [missing] = wait_for(lambda: [e for e in harness.events("dispatch_missing") if e["detail"]["typed"] == lost["id"]],
                         LONG, what="the undispatched line reported")
    assert missing["source"] == "hooks" and missing["detail"]["kind"] == "inject"
    assert missing["detail"]["after"] == 3.0 and missing["ts"] >= lost["ts"] + 3.0
    # A probe at once, not in 30 minutes; it misses (the agent is wedged), and the misses recycle it.
    probe = wait_for(lambda: [r for r in runs(harness) if r["id"] > last_probe["id"]], LONG,
                     what="a canary probe after the missing dispatch")[0]
    assert probe["sent_at"] >= missing["ts"]
    relaunch = wait_for(lambda: relaunches(harness, "canary_failed"), LONG, what="the recycle")[0]
    assert relaunch["source"] == "canary"
    # The relaunched agent's hooks ran from the refreshed settings: its SessionStart says how it began.
    began = "resume" if relaunch["detail"]["mode"] == "resume" else "startup"
    wait_for(lambda: [e for e in harness.events("session_started") if e["id"] > relaunch["id"]
                      and e["detail"] == {"event": "SessionStart", "session_id": relaunch["detail"]["new_session"],
                                          "source": began}], LONG, what=f"the relaunched agent's SessionStart ({began})")
    assert not prompted(harness, "are you there")
    # Only what the wedged agent never took was missing: not the lines it took, nor the start's probe.
    typed_missing = {e["detail"]["typed"] for e in harness.events("dispatch_missing")}
    assert heard["id"] not in typed_missing and lost["id"] in typed_missing
    taken = {e["id"] for e in harness.events("canary_sent") if e["id"] < lost["id"]}
    assert not taken & typed_missing
    assert daemon.stop() == 0
