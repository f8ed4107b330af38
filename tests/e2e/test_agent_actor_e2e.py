"""The operator hears of what the agent did, over the real daemon and the loopback fake Bot API:
the agent's refused hold. (The ledger's head with the ceiling's escalation: test_supervise_telegram.)"""

from __future__ import annotations

import pytest
from harness import wait_for
from test_supervise import FAST, Daemon
from test_supervise_telegram import CHAT, ENV, fake, telegram  # noqa: F401  (fake: the fixture)

pytestmark = pytest.mark.e2e


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
