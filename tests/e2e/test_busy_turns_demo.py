"""Issue 26, busy or deaf, end to end: the demo agent in a real tmux pane with its hooks, under the
real daemon and a canary fast enough to recycle a busy agent (ack_timeout 5 s, two misses). A long
turn that keeps using tools (`/busy 60`) misses its probes and is not recycled: the misses are
excused by the turn, and the probes queued behind it ack late once it ends. A permission prompt
(`/permission`) is told to the operator once, no probe is typed into it, and it is not recycled."""

from __future__ import annotations

import json
import time

import pytest
from harness import wait_for
from test_canary import runs
from test_hooks_witness import HOOKED, hook_rows, inject, prompted
from test_supervise import FAST, Daemon, relaunches
from test_witnessed_recovery import witnessed_start

from loomtui.store import outbox
from loomtui.store.db import Store

pytestmark = pytest.mark.e2e

LONG = 120  # a wait's deadline
# The long turn: 60 s of a tool every 2 s. Two misses (enough to recycle it, had they counted)
# come within 35 s of its start at these canary settings; the rest is a busy machine's margin.
TURN = 60
FAST_CANARY = {"interval": "10s", "ack_timeout": "5s", "misses_to_recycle": 2}


def messages(harness) -> list[str]:
    with Store.in_dir(harness.state_dir) as store:
        return [m.text for m in outbox.pending(store)]


@pytest.mark.incident("confident_false_detector")
def test_a_long_busy_turn_misses_its_probes_and_is_not_recycled(make_harness):
    harness = make_harness(sections={**FAST, "agent": HOOKED, "canary": FAST_CANARY})
    harness.start()
    daemon = Daemon(harness)
    witnessed_start(harness)
    inject(harness, f"/busy {TURN}")
    [began] = wait_for(lambda: prompted(harness, f"/busy {TURN}"), LONG, what="the long turn's UserPromptSubmit")
    stopped = wait_for(lambda: [r for r in hook_rows(harness, "Stop") if r["id"] > began["id"]], 3 * LONG,
                       what="the long turn's Stop")[0]
    assert stopped["ts"] - began["ts"] >= TURN
    during = [r for r in runs(harness) if began["ts"] < r["sent_at"] < stopped["ts"]]
    # Enough misses to recycle it, had they counted; the tools it used kept it busy.
    assert len([r for r in during if r["result"] == "miss"]) >= 2, during
    assert len(hook_rows(harness, "PostToolUse")) >= TURN // 4
    # The probes queued behind the turn ran once it ended: their acks came late, and a probe after acks.
    wait_for(lambda: harness.events("canary_late_ack"), LONG, what="a late ack of a probe typed into the turn")
    wait_for(lambda: [r for r in runs(harness) if r["sent_at"] > stopped["ts"] and r["result"] == "ok"], LONG,
             what="an acked probe after the turn")
    assert not relaunches(harness, "canary_failed")
    assert daemon.stop() == 0


@pytest.mark.incident("confident_false_detector")
def test_a_permission_prompt_is_told_once_gets_no_probe_and_is_not_recycled(make_harness):
    harness = make_harness(sections={**FAST, "agent": HOOKED, "canary": FAST_CANARY})
    harness.start()
    daemon = Daemon(harness)
    witnessed_start(harness)
    inject(harness, "/permission")
    [asked] = wait_for(lambda: [r for r in hook_rows(harness, "Notification") if r["source"] == "permission_prompt"],
                       LONG, what="the permission prompt's Notification")
    assert json.loads(asked["detail"]) == {"message": "Claude needs your permission to use Bash"}
    told = wait_for(lambda: [t for t in messages(harness) if "waits for your permission" in t], LONG,
                    what="the operator told")
    assert told == ["Loom: the agent waits for your permission: Claude needs your permission to use Bash"]
    shown = harness.loom("status")
    assert "turn            waiting for permission: Claude needs your permission to use Bash;" in shown.stdout
    turn = json.loads(harness.loom("status", "--json").stdout)["agent"]["turn"]
    assert turn["state"] == "waiting for permission" and turn["waiting"] == "Claude needs your permission to use Bash"
    # Three canary intervals pass with the dialog open: no probe is typed into it (its Enter could
    # answer the dialog), and nothing is recycled.
    wait_for(lambda: [e for e in harness.events("agent_notification") if e["ts"] >= asked["ts"]], LONG,
             what="the notification in the ledger")
    start = canary_ticks(daemon)
    opened = time.time()
    wait_for(lambda: canary_ticks(daemon) >= start + 3 and time.time() - opened >= 30, LONG,
             what="three canary intervals, and three looks, with the prompt open")
    assert not [r for r in runs(harness) if r["sent_at"] > asked["ts"] + 1], runs(harness)
    assert not relaunches(harness, "canary_failed")
    # The operator answers; the tool runs, and the canary carries on: the next probe acks.
    inject(harness, "1")
    wait_for(lambda: [r for r in hook_rows(harness, "PostToolUse") if r["id"] > asked["id"]], LONG,
             what="the tool run once allowed")
    wait_for(lambda: [r for r in runs(harness) if r["sent_at"] > asked["ts"] and r["result"] == "ok"], LONG,
             what="an acked probe after the prompt closed")
    assert len([t for t in messages(harness) if "waits for your permission" in t]) == 1
    assert not relaunches(harness, "canary_failed")
    assert daemon.stop() == 0


def canary_ticks(daemon: Daemon) -> int:
    """The canary loop's ticks so far, from the daemon's heartbeat."""
    beat = daemon.heartbeat()
    loops = beat["detail"]["loops"] if beat else {}
    return sum(v.get("ticks", 0) for k, v in loops.items() if k.startswith("canary"))
