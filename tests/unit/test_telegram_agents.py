"""Telegram commands with several agents: which agent a command names, what an unknown or missing
name answers, today's syntax with one agent, and the real actions run on the named agent only."""

from __future__ import annotations

import asyncio
import time

import pytest
import telegram

from loomtui.agent import holds
from loomtui.context import Context
from loomtui.report import status as status_mod
from loomtui.store import ledger, outbox
from loomtui.telegram import rules
from loomtui.telegram.clock import Clock
from loomtui.telegram.commands import AGENTS_HELP, HELP, OperatorActions, Poller, format_agents

CHAT = 5151
BOT = telegram.Bot("123456:agents-unit-test-token")


class Recorder:
    """The Actions seam, recording which agent each call was for."""

    def __init__(self, agents: tuple[str, ...]) -> None:
        self.agents = agents
        self.calls: list[tuple] = []

    def status(self, agent):
        self.calls.append(("status", agent))
        return "status"

    def canary(self, agent):
        self.calls.append(("canary", agent))
        return "canary"

    def recycle(self, agent, mode):
        self.calls.append(("recycle", agent, mode))
        return "recycle"

    def queue(self):
        self.calls.append(("queue",))
        return "queue"

    def hold(self, agent, reason, duration):
        self.calls.append(("hold", agent, reason, duration))
        return "hold"

    def release(self, agent):
        self.calls.append(("release", agent))
        return "release"

    def relay(self, text, ref):
        self.calls.append(("relay", text))
        return ""

    def close(self):
        pass


def write_config(tmp_path, body: str):
    path = tmp_path / "loom.toml"
    path.write_text(f'state_dir = "{tmp_path / "state"}"\n[telegram]\nchat_id = {CHAT}\ncommands = true\n' + body)
    return path


TWO = """
[[agents]]
name = "alpha"
tmux_socket = "loomtest-tg-agents"
[[agents]]
name = "beta"
tmux_socket = "loomtest-tg-agents"
"""


@pytest.fixture
def two(tmp_path):
    ctx = Context.load(str(write_config(tmp_path, TWO)), None, environ={})
    yield ctx
    ctx.close()


@pytest.fixture
def one(tmp_path):
    ctx = Context.load(str(write_config(tmp_path, '[agent]\ntmux_socket = "loomtest-tg-one"\n')), None, environ={})
    yield ctx
    ctx.close()


def update(uid: int, text: str) -> telegram.Update:
    message = {"message_id": uid * 10, "date": int(time.time()), "text": text,
               "chat": {"id": CHAT, "type": "private"}, "from": {"id": CHAT, "is_bot": False, "first_name": "x"}}
    return telegram.Update.de_json({"update_id": uid, "message": message}, BOT)


def forwarded(uid: int, text: str) -> telegram.Update:
    """`text` forwarded into the operator's chat by the operator: someone else's words, passed on."""
    message = {"message_id": uid * 10, "date": int(time.time()), "text": text,
               "chat": {"id": CHAT, "type": "private"}, "from": {"id": CHAT, "is_bot": False, "first_name": "x"},
               "forward_origin": {"type": "user", "date": int(time.time()) - 60,
                                  "sender_user": {"id": 777, "is_bot": False, "first_name": "someone"}}}
    return telegram.Update.de_json({"update_id": uid, "message": message}, BOT)


def test_a_canary_waiting_for_its_ack_does_not_hold_up_the_operator_s_next_command(one):
    # The poller answered one update after another: a /canary that found the agent deaf held a
    # /recycle or /hold sent next until its probe timed out (canary.ack_timeout, 3 minutes).
    import threading

    class SlowProbe(Recorder):
        def __init__(self) -> None:
            super().__init__(("main",))
            self.acked = threading.Event()

        def canary(self, agent):
            self.acked.wait(30)
            return super().canary(agent)

    rec = SlowProbe()
    poller = Poller(one.store, one.config.telegram, BOT, rec, Clock(), username="loom_bot")

    async def run() -> list[str]:
        await poller.handle(update(6001, "/canary"))
        await asyncio.wait_for(poller.handle(update(6002, "/recycle fresh")), 10)  # not behind the probe
        answered = [m.text for m in reversed(outbox.recent(one.store, 10))]
        rec.acked.set()
        await poller.drain()
        return answered

    answered = asyncio.run(run())
    assert answered == ["recycle"]
    assert [m.text for m in reversed(outbox.recent(one.store, 10))] == ["recycle", "canary"]
    assert rec.calls == [("recycle", "main", "fresh"), ("canary", "main")]


def test_a_forwarded_command_is_never_run(one):
    rec = Recorder(("main",))
    poller = Poller(one.store, one.config.telegram, BOT, rec, Clock(), username="loom_bot")
    asyncio.run(poller.handle(forwarded(5001, "/recycle fresh")))
    asyncio.run(poller.handle(forwarded(5002, "/hold 30m stop everything")))
    assert rec.calls == []
    replies = [m.text for m in outbox.recent(one.store, 10)]
    assert len(replies) == 2 and all(r.startswith(HELP[:20]) for r in replies)


def say(ctx: Context, actions, *texts: str) -> list[str]:
    """Each text through a real poller on the real store; the replies it put in the outbox."""
    poller = Poller(ctx.store, ctx.config.telegram, BOT, actions, Clock(), username="loom_bot")
    before = {m.id for m in outbox.recent(ctx.store, 1000)}
    async def run() -> None:
        for i, text in enumerate(texts, start=1):
            await poller.handle(update(1000 + len(before) + i, text))
            await poller.drain()  # a /canary is answered while the polling goes on: its reply in order here

    asyncio.run(run())
    return [m.text for m in reversed(outbox.recent(ctx.store, 1000)) if m.id not in before]


def test_pick_agent_takes_a_known_first_word_and_lets_one_agent_go_unnamed():
    assert rules.pick_agent(["beta", "fresh"], ("alpha", "beta")) == ("beta", ["fresh"])
    assert rules.pick_agent(["Beta"], ("alpha", "beta")) == ("beta", [])
    assert rules.pick_agent(["fresh"], ("alpha", "beta")) == (None, ["fresh"])
    assert rules.pick_agent([], ("alpha", "beta")) == (None, [])
    assert rules.pick_agent(["fresh"], ("main",)) == ("main", ["fresh"])
    assert rules.pick_agent(["main", "fresh"], ("main",)) == ("main", ["fresh"])
    assert rules.names_an_unknown_agent(["gamma"], 0) and not rules.names_an_unknown_agent([], 0)
    assert rules.names_an_unknown_agent(["gamma", "fresh"], 1) and not rules.names_an_unknown_agent(["fresh"], 1)


def test_with_two_agents_each_command_acts_on_the_agent_it_names(two):
    rec = Recorder(("alpha", "beta"))
    replies = say(two, rec, "/canary beta", "/recycle beta fresh", "/recycle@loom_bot alpha resume", "/status",
                  "/status beta", "/hold beta 30m deploying it", "/release alpha", "/queue")
    assert rec.calls == [("canary", "beta"), ("recycle", "beta", "fresh"), ("recycle", "alpha", "resume"),
                         ("status", None), ("status", "beta"), ("hold", "beta", "deploying it", 1800.0),
                         ("release", "alpha"), ("queue",)]
    assert replies == ["canary", "recycle", "recycle", "status", "status", "hold", "release", "queue"]


def test_with_two_agents_a_missing_or_unknown_name_answers_with_the_names(two):
    rec = Recorder(("alpha", "beta"))
    replies = say(two, rec, "/canary", "/canary gamma", "/recycle fresh", "/recycle gamma fresh",
                  "/recycle beta sideways", "/hold 30m deploying", "/release", "/status gamma", "/help")
    assert rec.calls == []
    assert replies[:8] == [
        "/canary needs an agent: /canary NAME (agents: alpha, beta)",
        "/canary: no agent by that name (agents: alpha, beta)",
        "/recycle needs an agent: /recycle NAME resume|fresh (agents: alpha, beta)",
        "/recycle: no agent by that name (agents: alpha, beta)",
        "usage: /recycle NAME resume|fresh",
        "/hold needs an agent: /hold NAME [30m] REASON (agents: alpha, beta)",
        "/release needs an agent: /release NAME (agents: alpha, beta)",
        "/status: no agent by that name (agents: alpha, beta)",
    ]
    assert replies[8] == AGENTS_HELP
    assert not [r for r in replies if "gamma" in r]  # the operator's word is not echoed back


def test_one_agent_keeps_todays_syntax_and_may_be_named(one):
    rec = Recorder(("main",))
    replies = say(one, rec, "/canary", "/recycle fresh", "/recycle main resume", "/status", "/status main",
                  "/hold 30m deploying", "/release", "/canary gamma", "/recycle gamma fresh", "/recycle", "/x")
    assert rec.calls == [("canary", "main"), ("recycle", "main", "fresh"), ("recycle", "main", "resume"),
                         ("status", None), ("status", "main"), ("hold", "main", "deploying", 1800.0),
                         ("release", "main")]
    assert replies[7:] == ["/canary: no agent by that name (agents: main)",
                           "/recycle: no agent by that name (agents: main)",
                           "usage: /recycle resume|fresh", "/x is not a Loom command. " + HELP]


def test_the_real_actions_hold_and_release_only_the_named_agent(two):
    actions = OperatorActions(two)
    try:
        replies = say(two, actions, "/hold beta 30m deploying", "/release alpha")
        beta = actions.of("beta")
        now = time.time()
        assert holds.current(beta, now) is not None and holds.current(beta, now).reason == "deploying"
        assert holds.current(actions.of("alpha"), now) is None
        assert replies[0].startswith("beta: ") and replies[1].startswith("alpha: ")
        placed = [e for e in ledger.tail(two.store, 50) if e.kind == "hold_placed"]
        assert [(e.agent, e.source) for e in placed] == [("beta", "telegram")]
    finally:
        actions.close()


def test_status_of_several_agents_is_a_line_each_then_the_host(two):
    beta = two.for_agent("beta")
    try:
        holds.place(beta, by="operator", reason="swap\x1b[31m model", until=None, source="cli", now=time.time())
        ledger.append(beta.store, "relaunch", source="cli", cause="operator_fresh", detail={"mode": "fresh"})
    finally:
        beta.close()
    text = format_agents(status_mod.gather_all(two, events=0, look=False))
    lines = text.splitlines()
    assert lines[0] == "Loom status: 2 agents"
    assert lines[1] == "alpha: not looked at; no canary yet; not held"
    assert lines[2].startswith("beta: not looked at; no canary yet; held by the operator: swap␛[31m model")
    assert "\x1b" not in text
    assert [line.split(":")[0] for line in lines[3:]] == ["queue", "supervisor", "ledger", "outbox",
                                                          "/status NAME for one agent in full"]


def test_the_queue_says_whose_each_item_is_when_there_are_several(two):
    with two.store.write() as db:
        db.execute("INSERT INTO queue_items(job, kind, signature, sample, log, first_seen, last_seen, count, state, "
                   "nudges, agent) VALUES ('nightly', 'line', 's', 'x', '/l', 1, 1, 2, 'open', 0, 'beta')")
    actions = OperatorActions(two)
    try:
        assert actions.queue() == "queue: 1 open\n#1 nightly (beta) [open] x2"
    finally:
        actions.close()
