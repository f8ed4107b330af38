"""Issue 26, the harness's causes and the resume's proof, end to end: the demo agent in a real tmux
pane with `--settings {hook_settings}`, under the real daemon.

`/ratelimit 2`: the next two turns fail with a StopFailure `rate_limit`; the first holds the agent
(cause rate_limited), with no relaunch and exactly one message to the operator; the second says
nothing new; the third turn succeeds and its Stop ends the hold. After a kill, the resumed agent's
SessionStart (`resume`, the pinned id) is recorded as the proof; an agent that comes back from a
resume as another session (its resume command starts a new one) is started fresh."""

from __future__ import annotations

import json
import sys

import pytest
from harness import wait_for
from test_hooks_witness import HOOKED, hook_rows, inject, prompted
from test_supervise import FAST, Daemon, relaunches
from test_witnessed_recovery import kill_agent, witnessed_start

from loomtui.store.db import Store

pytestmark = pytest.mark.e2e

LONG = 120
PY = sys.executable
QUIET_CANARY = {"interval": "30m", "ack_timeout": "10s"}


def outbox(harness) -> list[str]:
    with Store.in_dir(harness.state_dir) as store:
        return [r["text"] for r in store.query("SELECT text FROM outbox ORDER BY id")]


def hold(harness) -> dict | None:
    shown = harness.loom("status", "--json")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    return json.loads(shown.stdout)["hold"]


def turn_ended(harness, text: str, event: str) -> dict:
    """The hook event that ended the turn of the line `text` (Stop or StopFailure)."""
    def ended():
        asked = prompted(harness, text)
        return asked and [r for r in hook_rows(harness, event) if r["id"] > asked[-1]["id"]]
    return wait_for(ended, LONG, what=f"{event} after {text!r}")[0]


def test_a_rate_limited_turn_holds_without_a_relaunch_tells_once_and_a_success_releases(make_harness):
    harness = make_harness(sections={**FAST, "agent": HOOKED, "canary": QUIET_CANARY})
    harness.start()
    daemon = Daemon(harness)
    witnessed_start(harness)
    started = relaunches(harness)
    before = len(outbox(harness))
    inject(harness, "/ratelimit 2")
    turn_ended(harness, "/ratelimit 2", "Stop")
    inject(harness, "first limited turn")
    failed = turn_ended(harness, "first limited turn", "StopFailure")
    assert failed["source"] == "rate_limit"
    held = wait_for(lambda: hold(harness), LONG, what="the harness's hold")
    assert (held["by"], held["cause"], held["actor"]) == ("harness", "rate_limited", "hooks")
    assert held["until"] == pytest.approx(held["ts"] + 1800)
    wait_for(lambda: "API Error: 429" in harness.screen(), LONG, what="the API error on screen")
    [told] = wait_for(lambda: outbox(harness)[before:], LONG, what="the operator told")
    assert "rate_limit" in told and "no relaunch" in told

    inject(harness, "second limited turn")  # still limited: held again, nothing new said
    turn_ended(harness, "second limited turn", "StopFailure")
    wait_for(lambda: len([e for e in harness.events("hold_placed") if e["cause"] == "rate_limited"]) == 2, LONG,
             what="the hold renewed")
    assert outbox(harness)[before:] == [told] and hold(harness)["cause"] == "rate_limited"

    inject(harness, "this one goes through")  # a turn that succeeds: its Stop ends the hold
    turn_ended(harness, "this one goes through", "Stop")
    [cleared] = wait_for(lambda: harness.events("hold_cleared"), LONG, what="the hold ended by the success")
    assert cleared["source"] == "hooks" and cleared["detail"]["how"] == "succeeded" and hold(harness) is None
    daemon.settle()
    assert relaunches(harness) == started  # never relaunched: a restart cannot fix a quota
    assert outbox(harness)[before:] == [told]
    assert daemon.stop() == 0


def test_a_resume_is_proven_by_the_pinned_session_s_start(make_harness):
    harness = make_harness(sections={**FAST, "agent": HOOKED, "canary": QUIET_CANARY})
    session = harness.start()
    daemon = Daemon(harness)
    witnessed_start(harness)
    kill_agent(harness)
    relaunch = wait_for(lambda: [e for e in relaunches(harness) if e["detail"]["mode"] == "resume"], LONG,
                        what="the resume after the kill")[0]
    [proof] = wait_for(lambda: harness.events("resume_proven"), LONG, what="the resume proven")
    assert proof["source"] == "hooks" and proof["detail"]["relaunch"] == relaunch["id"]
    assert proof["detail"]["started"] == {"source": "resume", "session_id": session}
    daemon.settle()
    assert not harness.events("resume_failed") and harness.pinned() == session
    assert len(relaunches(harness)) == 2  # the start and the resume
    assert daemon.stop() == 0


def test_a_resume_that_comes_back_as_another_session_is_started_fresh(make_harness):
    # The resume command starts a new conversation (another id, SessionStart `startup`): nothing
    # on the screen says the resume failed; only the harness's own report does.
    stranger = {**HOOKED, "resume_command": f"{PY} -m loomtui.demo.agent --settings {{hook_settings}} "
                                            "--session-id {session_id}-another"}
    harness = make_harness(sections={**FAST, "agent": stranger, "canary": QUIET_CANARY})
    session = harness.start()
    daemon = Daemon(harness)
    witnessed_start(harness)
    kill_agent(harness)
    [failed] = wait_for(lambda: harness.events("resume_failed"), LONG, what="the resume failed by its SessionStart")
    assert failed["source"] == "hooks" and failed["detail"]["session"] == session
    assert failed["detail"]["started"]["source"] == "startup"
    assert failed["detail"]["started"]["session_id"] != session
    fresh = wait_for(lambda: relaunches(harness, "resume_failed"), LONG, what="the fresh start")[0]
    assert fresh["source"] == "hooks" and fresh["detail"]["mode"] == "fresh" and fresh["id"] > failed["id"]
    assert harness.pinned() == fresh["detail"]["new_session"] != session
    # The fresh agent's own start, with the new pinned id: the fresh launch is not judged as a resume.
    wait_for(lambda: [r for r in hook_rows(harness, "SessionStart") if r["session_id"] == harness.pinned()
                      and r["source"] == "startup"], LONG, what="the fresh agent's SessionStart")
    daemon.settle()
    assert len(harness.events("resume_failed")) == 1 and not harness.events("resume_proven")
    assert daemon.stop() == 0
