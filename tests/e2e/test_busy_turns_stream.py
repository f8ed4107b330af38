"""Issue 26, busy or deaf, with the stream-json pump as the source of turns: the demo agent in print
mode behind the real `loom pump`, its commands WITHOUT `{hook_settings}`, under the real daemon and a
canary fast enough to recycle a busy agent (ack_timeout 5 s, two misses). A long turn that keeps
calling tools (`/busy 60`) misses its probes (queued by the pump behind it) and is not recycled:
the misses are recorded and excused by the pump's turn, and the probes ack late once it ends. A
wedged one (`/wedge`: its turn opens, then nothing) is excused only until its turn has said nothing
for `canary.turn_quiet`, then recycled."""

from __future__ import annotations

import pytest
from harness import wait_for
from test_canary import runs
from test_stream_driver import make_stream, verified  # noqa: F401  (make_stream: the fixture)
from test_supervise import FAST, Daemon, relaunches
from test_witnessed_recovery import witnessed_start

from loomtui import clock
from loomtui.canary.rules import MISS
from loomtui.canary.runs import recent_runs
from loomtui.hooks import turns

pytestmark = pytest.mark.e2e

LONG = 120  # a wait's deadline
# The long turn: 60 s of a tool every 2 s. Two misses (enough to recycle it, had they counted)
# come within 35 s of its start at these canary settings; the rest is a busy machine's margin.
TURN = 60
QUIET = 20.0
FAST_CANARY = {"interval": "10s", "ack_timeout": "5s", "misses_to_recycle": 2}


def written(harness, text: str):
    """The pump's `in` record of the line `text` (the moment it was written to the CLI)."""
    return [r for r in harness.records("in") if r.data.get("text") == text]


def results_after(harness, ts: float):
    return [r for r in harness.records("out") if r.event.get("type") == "result" and r.ts > ts]


def excused(harness) -> dict[float, str]:
    """What the canary's own reading says of each miss now (turns.excused over the real store and
    the real transcript), by the time it was sent: "busy", or "" where the miss counts."""
    ctx = harness.ctx()
    return {r.sent_at: r.excused for r in turns.excused(ctx, recent_runs(ctx), clock.now()) if r.result == MISS}


def hookless(harness) -> None:
    config = harness.config_path.read_text()
    assert 'driver = "stream-json"' in config and "hook_settings" not in config


@pytest.mark.incident("confident_false_detector")
def test_a_long_busy_turn_without_hooks_misses_its_probes_and_is_not_recycled(make_stream):  # noqa: F811
    harness = make_stream(sections={**FAST, "canary": FAST_CANARY})
    hookless(harness)
    harness.start()
    daemon = Daemon(harness)
    witnessed_start(harness)
    assert harness.loom("inject", f"/busy {TURN}").returncode == 0
    [began] = wait_for(lambda: written(harness, f"/busy {TURN}"), LONG, what="the long turn written to the CLI")
    # While it runs: enough misses to recycle it, had they counted; each one excused.
    def missed_inside():
        return [r for r in runs(harness) if r["sent_at"] > began.ts and r["result"] == "miss"]

    during = wait_for(lambda: missed_inside() if len(missed_inside()) >= 2 else [], 3 * LONG,
                      what="two misses inside the long turn")
    seen = excused(harness)
    shown = harness.loom("status").stdout
    if not results_after(harness, began.ts):  # the turn still ran as the canary's reading and status saw it
        assert {seen.get(r["sent_at"]) for r in during} == {"busy"}, seen
        [turn] = [line for line in shown.splitlines() if line.startswith("turn ")]
        assert turn.split()[1] == "busy" and turn.endswith("last tool Bash; told by the pump (no hooks)"), shown
    assert not relaunches(harness, "canary_failed")
    [ended] = wait_for(lambda: results_after(harness, began.ts)[:1], 3 * LONG, what="the long turn's result")
    assert ended.ts - began.ts >= TURN
    tools = [r for r in harness.records("out") if began.ts < r.ts <= ended.ts and r.event.get("type") == "assistant"
             and any(b.get("type") == "tool_use" for b in r.event["message"]["content"])]
    assert len(tools) >= TURN // 4
    # The probes queued behind the turn reached the CLI once it ended: late acks, then an acked probe.
    wait_for(lambda: harness.events("canary_late_ack"), LONG, what="a late ack of a probe queued behind the turn")
    wait_for(lambda: [r for r in runs(harness) if r["sent_at"] > ended.ts and r["result"] == "ok"], LONG,
             what="an acked probe after the turn")
    assert not relaunches(harness, "canary_failed")
    assert daemon.stop() == 0
    verified(harness)


@pytest.mark.incident("silent_deafness")
def test_a_wedged_turn_without_hooks_is_excused_only_until_it_goes_quiet_then_recycled(make_stream):  # noqa: F811
    harness = make_stream(sections={**FAST, "canary": {**FAST_CANARY, "turn_quiet": f"{QUIET:g}s"}})
    hookless(harness)
    session = harness.start()
    daemon = Daemon(harness)
    witnessed_start(harness)
    assert harness.loom("inject", "/wedge").returncode == 0
    [began] = wait_for(lambda: written(harness, "/wedge"), LONG, what="the wedge written to the CLI")
    # The CLI answered the line (its init) and then nothing: a turn, open and silent.
    [last] = wait_for(lambda: [r for r in harness.records("out") if r.ts > began.ts][-1:], LONG,
                      what="the wedged turn's first event")
    event = wait_for(lambda: relaunches(harness, "canary_failed"), 3 * LONG, what="a canary_failed recycle")[0]
    assert event["detail"]["mode"] == "resume" and event["detail"]["new_session"] == session
    # Not before the turn had said nothing for turn_quiet: its misses were excused until then.
    assert event["ts"] >= last.ts + QUIET
    misses = [r for r in runs(harness) if r["result"] == "miss" and began.ts < r["sent_at"] < event["ts"]]
    assert len(misses) >= 2
    wait_for(lambda: any(r["result"] == "ok" and r["sent_at"] > event["ts"] for r in runs(harness)), LONG,
             what="the resumed agent acking")
    daemon.settle(3)
    assert len(relaunches(harness, "canary_failed")) == 1
    assert daemon.stop() == 0
    verified(harness)
