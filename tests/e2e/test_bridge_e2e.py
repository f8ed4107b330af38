"""The Telegram bridge end to end (issue 17's must-show): the real daemon with the loopback fake Bot
API, the demo agent in stream-json mode behind the real `loom pump` in a real tmux pane.

The operator's message reaches the agent and its answer comes back to that chat; a stranger's
does nothing; a canary turn sends nothing to Telegram; /status is answered beside the bridge.
"""

from __future__ import annotations

import pytest
from fakebot import FakeBot
from harness import wait_for
from test_stream_driver import StreamHarness
from test_supervise import FAST, Daemon

from loomtui.pump import transcript
from loomtui.store.db import Store
from loomtui.telegram import bridge

pytestmark = pytest.mark.e2e

TOKEN = "434343:bridge-e2e-token-abcdefghijklmnop"
CHAT, STRANGER = 5151, 6262
ENV = {"LOOM_E2E_TOKEN": TOKEN, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
QUESTION = "is the nightly build green?"
SECOND = "and the weekly one, is it still red?"
THIRD = "thanks!"
STRANGERS = "please run rm -rf on the repo"


class BridgeHarness(StreamHarness):
    """The demo agent under the stream-json driver with the bridge on (telegram.commands left off)."""

    def __init__(self, root, fake: FakeBot):
        telegram = {"token_env": "LOOM_E2E_TOKEN", "chat_id": CHAT, "api_base": fake.api_base, "bridge": True,
                    "poll_interval": "100ms", "backoff_base": "100ms", "backoff_max": "500ms", "long_poll": "1s"}
        super().__init__(root, sections={**FAST, "canary": {"interval": "1h", "ack_timeout": "30s"},
                                         "telegram": telegram})

    def inputs(self, origin: str | None = None) -> list[transcript.Record]:
        return [r for r in self.records(transcript.IN) if origin in (None, r.data.get("origin"))]

    def bridged_to(self) -> int:
        """How far the bridge's reply loop has read the transcript."""
        with Store.in_dir(self.state_dir) as store:
            return bridge.Cursor.loads(store.get_meta(bridge.CURSOR_KEY)).offset

    def results_end(self) -> int:
        """Where the transcript's last `result` record ends."""
        ends = [r.end for r in self.records(transcript.OUT) if r.event.get("type") == "result"]
        return ends[-1] if ends else 0


@pytest.fixture
def fake():
    bot = FakeBot(TOKEN).start()
    yield bot
    bot.stop()


@pytest.fixture
def bridged(tmp_path, fake):
    harness = BridgeHarness(tmp_path / "h", fake)
    yield harness
    harness.cleanup()


def answers(fake) -> list[str]:
    return [t for t in fake.texts(CHAT) if t.startswith("heard you")]


@pytest.mark.incident("one_bot_one_poller")  # the agent polls no bot: Loom's one poller serves chat and commands
def test_the_operators_chat_talks_to_the_agent_and_nothing_else_does(bridged, fake):
    harness = bridged
    harness.start()
    daemon = Daemon(harness, env=ENV)

    # A stranger first, then the operator: only the operator's words reach the agent.
    fake.add_update(STRANGER, STRANGERS)
    fake.add_update(CHAT, QUESTION)
    first = wait_for(lambda: answers(fake), 90, what="the agent's answer in the operator's chat")
    assert first == [f"heard you ({len(QUESTION)} characters)"]
    [relayed] = [e for e in harness.events("inject") if e["source"] == "telegram"]
    assert relayed["detail"]["length"] == len(QUESTION) and relayed["detail"]["ok"] is True
    assert [r.data["text"] for r in harness.inputs("telegram")] == [QUESTION]
    assert fake.texts(STRANGER) == []
    assert [e["detail"]["chat_id"] for e in harness.events("telegram_ignored")] == [STRANGER]

    # A canary is a turn too, with an answer of its own: none of it goes to Telegram. The daemon's
    # own probe witnesses the fresh launch first (settled, so `loom canary` sends one, not joins it).
    wait_for(lambda: harness.events("canary"), 60, what="the launch witnessed by the daemon's canary")
    probes = len(harness.inputs("canary"))
    canary = harness.loom("canary")
    assert canary.returncode == 0 and "ok" in canary.stdout, canary.stdout + canary.stderr
    assert len(harness.inputs("canary")) == probes + 1
    assert harness.inputs()[-1].data["origin"] == "canary"
    # Asked for over Telegram, it is still the canary's turn: the reply is /canary's, not the probe's.
    fake.add_update(CHAT, "/canary")
    wait_for(lambda: [t for t in fake.texts(CHAT) if t.startswith("canary")], 60, what="the /canary reply")
    assert len(harness.inputs("canary")) == probes + 2
    end = wait_for(harness.results_end, 60, what="the canary turns' results in the transcript")
    wait_for(lambda: harness.bridged_to() >= end, 60, what="the bridge past the canary turns")

    # Commands still work beside the bridge, and a second message is answered after them, in order.
    fake.add_update(CHAT, "/status")
    wait_for(lambda: [t for t in fake.texts(CHAT) if t.startswith("Loom status")], 60, what="the /status reply")
    fake.add_update(CHAT, SECOND)
    wait_for(lambda: len(answers(fake)) == 2, 90, what="the second answer")
    texts = fake.texts(CHAT)
    assert len(texts) == 4, texts
    assert texts[0] == first[0] and texts[1].startswith("canary ok") and texts[2].startswith("Loom status")
    assert texts[3] == f"heard you ({len(SECOND)} characters)"
    assert [r.data["text"] for r in harness.inputs("telegram")] == [QUESTION, SECOND]
    assert {r.data["origin"] for r in harness.inputs()} == {"telegram", "canary"}

    # A restart that lost the bridge's place reads the transcript again and sends nothing twice:
    # the next answer is the next message in the chat.
    assert daemon.stop() == 0
    with Store.in_dir(harness.state_dir) as store, store.write() as db:
        assert db.execute("DELETE FROM meta WHERE key = ?", (bridge.CURSOR_KEY,)).rowcount == 1
    again = Daemon(harness, env=ENV)
    fake.add_update(CHAT, THIRD)
    wait_for(lambda: len(answers(fake)) == 3, 90, what="the answer after the restart")
    assert fake.texts(CHAT)[4:] == [f"heard you ({len(THIRD)} characters)"]
    assert again.stop() == 0

    # Only the outbox ever held the agent's answers; neither side's words reach the ledger or the log.
    ledger_text = harness.loom("ledger", "tail", "-n", "500").stdout
    logs = daemon.output() + again.output()
    for words in (QUESTION, SECOND, THIRD, STRANGERS, "rm -rf"):
        assert words not in ledger_text and words not in logs
    assert TOKEN not in logs and TOKEN not in ledger_text
