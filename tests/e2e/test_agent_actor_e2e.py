"""The operator hears of what the agent did, over the real daemon and the loopback fake Bot API:
the agent's refused hold, and the ledger's head with the ceiling's escalation."""

from __future__ import annotations

import re
import sys

import pytest
from fakebot import FakeBot
from harness import wait_for
from test_supervise import FAST, Daemon
from test_supervise_telegram import CHAT, ENV, TOKEN, telegram

pytestmark = pytest.mark.e2e


@pytest.fixture
def fake():
    bot = FakeBot(TOKEN).start()
    yield bot
    bot.stop()


def test_the_agents_refused_hold_reaches_the_operator(make_harness, fake):
    harness = make_harness(sections={**FAST, "canary": {"interval": "1h"}, "telegram": telegram(fake)})
    session = harness.start()
    daemon = Daemon(harness, env=ENV)
    result = harness.loom("hold", "--reason", "let me be", env={"LOOM_SESSION_ID": session})
    assert result.returncode == 1 and "hold refused" in result.stderr
    told = wait_for(lambda: [t for t in fake.texts(CHAT) if "refused a hold" in t], 60, what="the refusal told")
    assert session in told[0] and "let me be" in told[0]
    assert harness.loom("status", "--json").returncode == 0 and harness.events("hold_placed") == []
    assert [e["detail"]["actor"] for e in harness.events("refused")] == ["agent"]
    assert daemon.stop() == 0


def test_the_escalation_carries_the_ledger_head_and_it_verifies(make_harness, fake):
    dying = f"{sys.executable} -c 'import sys; sys.exit(3)' {{session_id}}"
    harness = make_harness(sections={**FAST, "agent": {"fresh_command": dying, "resume_command": dying},
                                     "telegram": telegram(fake)})
    harness.loom("recycle", "--fresh")
    daemon = Daemon(harness, env=ENV)
    texts = wait_for(lambda: [t for t in fake.texts(CHAT) if "stopped relaunching" in t], 120, what="the escalation")
    head = re.search(r" ledger (\d+:[0-9a-f]{64})$", texts[0])
    assert head is not None, texts[0]
    assert daemon.stop() == 0
    verified = harness.loom("ledger", "verify", "--head", head[1])
    assert verified.returncode == 0 and "leads to the kept head" in verified.stdout
