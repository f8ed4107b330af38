"""The daemon's Telegram channel: escalations reach the operator, operator commands act for real."""

from __future__ import annotations

import re
import sys

import pytest
from fakebot import FakeBot
from harness import wait_for
from test_supervise import FAST, Daemon

from loomtui.sentinel import queue

pytestmark = pytest.mark.e2e

TOKEN = "424242:supervise-e2e-token-abcdefghijklmnop"
CHAT, STRANGER = 5151, 6262
ENV = {"LOOM_E2E_TOKEN": TOKEN, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


@pytest.fixture
def fake():
    bot = FakeBot(TOKEN).start()
    yield bot
    bot.stop()


def telegram(fake, commands=False):
    return {"token_env": "LOOM_E2E_TOKEN", "chat_id": CHAT, "api_base": fake.api_base, "commands": commands,
            "poll_interval": "100ms", "backoff_base": "100ms", "backoff_max": "500ms", "long_poll": "1s"}


def test_the_ceilings_escalation_reaches_the_operator(make_harness, fake):
    dying = f"{sys.executable} -c 'import sys; sys.exit(3)' {{session_id}}"
    harness = make_harness(sections={**FAST, "agent": {"fresh_command": dying, "resume_command": dying},
                                     "telegram": telegram(fake)})
    harness.loom("recycle", "--fresh")
    daemon = Daemon(harness, env=ENV)
    texts = wait_for(lambda: fake.texts(CHAT), 120, what="the escalation delivered")
    assert len(texts) == 1 and "stopped relaunching" in texts[0]
    daemon.settle()
    assert len(fake.texts(CHAT)) == 1
    # It carries the ledger's head, which the operator can later prove the chain still leads to.
    head = re.search(r" ledger (\d+:[0-9a-f]{64})$", texts[0])
    assert head is not None, texts[0]
    assert daemon.stop() == 0
    assert TOKEN not in daemon.output() and TOKEN not in harness.loom("ledger", "tail", "-n", "500").stdout
    verified = harness.loom("ledger", "verify", "--head", head[1])
    assert verified.returncode == 0 and "leads to the kept head" in verified.stdout


def test_operator_commands_run_the_real_actions(make_harness, fake):
    harness = make_harness(sections={**FAST, "canary": {"interval": "1h", "ack_timeout": "10s"},
                                     "telegram": telegram(fake, commands=True)})
    session = harness.start()
    daemon = Daemon(harness, env=ENV)
    fake.add_update(STRANGER, "/recycle fresh")
    fake.add_update(CHAT, "/canary")
    reply = wait_for(lambda: [t for t in fake.texts(CHAT) if t.startswith("canary")], 60, what="the canary reply")[0]
    assert reply.startswith("canary ok: acked in")
    assert harness.pinned() == session  # the stranger's /recycle did nothing
    assert harness.events("telegram_ignored")
    fake.add_update(CHAT, "/recycle fresh")
    wait_for(lambda: [t for t in fake.texts(CHAT) if t.startswith("relaunched fresh")], 60, what="the recycle reply")
    assert harness.pinned() != session
    assert [e["source"] for e in harness.events("relaunch")][-1] == "telegram"
    assert daemon.stop() == 0


def test_queue_answers_with_the_open_items(make_harness, fake, tmp_path):
    harness = make_harness(sections={**FAST, "canary": {"interval": "1h"}, "telegram": telegram(fake, commands=True)},
                           jobs=[{"name": "nightly", "log": str(tmp_path / "nightly.log")}])
    harness.start()
    failed = harness.loom("run-job", "nightly", "--", sys.executable, "-c", "raise SystemExit(3)")
    assert failed.returncode == 3, failed.stderr
    scan = harness.loom("sentinel", "scan", "--no-nudge")
    assert scan.returncode == 0, scan.stderr
    ctx = harness.ctx()
    [item] = queue.open_items(ctx.store)
    assert (item.job, item.kind, item.signature) == ("nightly", "exit", "exit code 3")
    daemon = Daemon(harness, env=ENV)
    fake.add_update(CHAT, "/queue")
    reply = wait_for(lambda: [t for t in fake.texts(CHAT) if t.startswith("queue")], 60, what="the /queue reply")
    assert reply == [f"queue: 1 open\n#{item.id} nightly [open] x1"]
    assert daemon.stop() == 0


def test_recycle_resume_relaunches_the_pinned_session_and_replies(make_harness, fake):
    harness = make_harness(sections={**FAST, "canary": {"interval": "1h", "ack_timeout": "60s"},
                                     "telegram": telegram(fake, commands=True)})
    session = harness.start()
    old_agent = harness.agent_pid()
    daemon = Daemon(harness, env=ENV)
    fake.add_update(CHAT, "/recycle resume")
    reply = wait_for(lambda: [t for t in fake.texts(CHAT) if t.startswith("relaunch")], 60, what="the recycle reply")
    assert reply == [f"relaunched resume: session {session}; unwitnessed until a canary acks (loom supervise probes it as soon as the agent is ready)"]
    event = harness.events("relaunch")[-1]
    assert (event["cause"], event["source"]) == ("operator_resume", "telegram")
    assert event["detail"]["mode"] == "resume" and event["detail"]["new_session"] == session
    assert harness.pinned() == session
    wait_for(lambda: harness.agent_pid() not in (None, old_agent), 60, what="the resumed agent")
    wait_for(lambda: "resumed:" in harness.screen(), 60, what="the resumed conversation on screen")
    # Heard again: a probe typed into the resumed agent is acked.
    fake.add_update(CHAT, "/canary")
    ack = wait_for(lambda: [t for t in fake.texts(CHAT) if t.startswith("canary")], 120, what="the canary reply")
    assert ack[0].startswith("canary ok: acked in"), ack
    assert [e["cause"] for e in harness.events("relaunch")] == ["operator_fresh", "operator_resume"]
    assert daemon.stop() == 0


def test_hold_and_release_over_telegram(make_harness, fake):
    harness = make_harness(sections={**FAST, "canary": {"interval": "1h"}, "telegram": telegram(fake, commands=True)})
    harness.start()
    daemon = Daemon(harness, env=ENV)
    fake.add_update(CHAT, "/hold")
    usage = wait_for(lambda: [t for t in fake.texts(CHAT) if t.startswith("usage: /hold")], 60, what="the usage")
    assert usage
    fake.add_update(CHAT, "/hold 30m [b]rotating[/b] keys")  # markup-looking text stays text
    reply = wait_for(lambda: [t for t in fake.texts(CHAT) if t.startswith("held by")], 60, what="the /hold reply")
    assert reply[0].startswith("held by the operator: [b]rotating[/b] keys (30m left)")
    placed = harness.events("hold_placed")[-1]
    assert placed["source"] == "telegram" and placed["detail"]["reason"] == "[b]rotating[/b] keys"
    fake.add_update(CHAT, "/status")
    status = wait_for(lambda: [t for t in fake.texts(CHAT) if t.startswith("Loom status")], 60, what="/status")
    assert "HELD: held by the operator: [b]rotating[/b] keys" in status[0]
    fake.add_update(CHAT, "/release")
    wait_for(lambda: [t for t in fake.texts(CHAT) if t.startswith("released the operator's hold")], 60,
             what="the /release reply")
    assert harness.events("hold_cleared")[-1]["source"] == "telegram"
    assert daemon.stop() == 0
