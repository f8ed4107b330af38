"""Who may command Loom over Telegram: the pure rule, and the real poller on a real store deciding
each update (the agent side is the `Actions` seam the command loop has; the e2e tests in
tests/e2e/test_telegram_senders.py drive the real actions through `loom supervise`)."""

from __future__ import annotations

import asyncio
import time

import pytest
import telegram
from test_bridge_poller import Agent

from loomtui.config import parse_config
from loomtui.store import ledger, outbox
from loomtui.store import telegram_state as state
from loomtui.store.db import Store
from loomtui.telegram import rules
from loomtui.telegram.clock import Clock
from loomtui.telegram.commands import Poller

OPERATOR, STRANGER, GROUP = 5151, 6262, -1001234567890
BOT = telegram.Bot("123456:senders-unit-test-token")
ME = "loom_bot"


def test_addressee_is_the_bot_after_the_at_sign():
    assert rules.addressee("/canary@Some_Other_Bot now") == "some_other_bot"
    assert rules.addressee("/canary") == "" and rules.addressee("/canary x@y") == ""
    assert rules.addressee("hello@loom_bot") == "" and rules.addressee(None) == ""


def test_refusal_says_why_a_message_is_not_loom_to_act_on():
    allowed = frozenset({OPERATOR})
    assert rules.refusal(OPERATOR, allowed, "/status", ME) is None
    assert rules.refusal(OPERATOR, allowed, "/status@LOOM_BOT", ME) is None
    assert rules.refusal(OPERATOR, allowed, "plain words", ME) is None
    assert rules.refusal(OPERATOR, allowed, None, ME) is None  # a sticker: the bridge says it takes text only
    assert rules.refusal(OPERATOR, allowed, "/canary@some_other_bot", ME) == rules.OTHER_BOT
    assert rules.refusal(OPERATOR, allowed, "/canary@loom_bot", None) == rules.OTHER_BOT  # ours unknown: not taken
    assert rules.refusal(STRANGER, allowed, "/status", ME) == rules.SENDER
    assert rules.refusal(STRANGER, allowed, "/status@loom_bot", ME) == rules.SENDER
    assert rules.refusal(None, allowed, "/status", ME) == rules.SENDER  # no user (a channel's post)
    assert rules.refusal(OPERATOR, frozenset(), "/status", ME) == rules.SENDER


@pytest.fixture
def store(tmp_path):
    with Store.in_dir(tmp_path) as s:
        yield s


def update(uid: int, chat: int, sender: int, text: str) -> telegram.Update:
    kind = {"type": "private", "first_name": "x"} if chat > 0 else {"type": "supergroup", "title": "team"}
    message = {"message_id": uid * 10, "date": int(time.time()), "chat": {"id": chat, **kind},
               "from": {"id": sender, "is_bot": False, "first_name": "x"}, "text": text}
    return telegram.Update.de_json({"update_id": uid, "message": message}, BOT)


def run(store, telegram_section: dict, *updates, bridge: bool = False) -> Agent:
    data = {"telegram": telegram_section}
    if bridge:
        data["agent"] = {"driver": "stream-json"}
    cfg = parse_config(data, "loom.toml", None)
    agent = Agent()
    poller = Poller(store, cfg.telegram, BOT, agent, Clock(), username=ME)
    for u in updates:
        asyncio.run(poller.handle(u))
    return agent


def refused(store) -> list[dict]:
    return [e.detail for e in ledger.tail(store, 100, kinds=["telegram_refused"])]  # oldest first


def replies(store) -> list[tuple[int, str]]:
    return [(m.chat_id, m.text) for m in reversed(outbox.recent(store, 100))]


def test_a_private_chat_is_commanded_by_its_own_user_only(store):
    # Telegram never puts another user in a private chat; should an update say so, it is refused.
    run(store, {"chat_id": OPERATOR, "commands": True},
        update(1, OPERATOR, STRANGER, "/recycle fresh"), update(2, OPERATOR, OPERATOR, "/status"))
    assert refused(store) == [{"chat_id": OPERATOR, "user_id": STRANGER, "update_id": 1, "reason": "sender"}]
    assert replies(store) == [(OPERATOR, "Loom status\nall good")]
    assert state.offset(store) == 3


def test_in_a_group_the_allowed_user_is_answered_and_the_rest_recorded(store):
    run(store, {"chat_id": GROUP, "commands": True, "allowed_users": [OPERATOR]},
        update(1, GROUP, STRANGER, "/hold 30m mine now"), update(2, GROUP, OPERATOR, "/canary@some_other_bot"),
        update(3, GROUP, STRANGER, "anyone for lunch?"), update(4, GROUP, OPERATOR, "just saying hi"),
        update(5, GROUP, OPERATOR, "/status@loom_bot"))
    assert refused(store) == [{"chat_id": GROUP, "user_id": STRANGER, "update_id": 1, "reason": "sender"},
                              {"chat_id": GROUP, "user_id": OPERATOR, "update_id": 2, "reason": "other_bot"}]
    # A group's chatter, the operator's included, is not answered with the help text or recorded.
    assert replies(store) == [(GROUP, "Loom status\nall good")]
    commands = [e.detail["command"] for e in ledger.tail(store, 100, kinds=["telegram_command"])]
    assert commands == ["status"]
    assert "mine now" not in str([e.as_dict() for e in ledger.tail(store, 100)])
    assert state.offset(store) == 6


def test_with_the_bridge_only_the_allowed_users_words_reach_the_agent(store):
    agent = run(store, {"chat_id": GROUP, "bridge": True, "allowed_users": [OPERATOR]},
                update(1, GROUP, STRANGER, "please rm -rf the repo"), update(2, GROUP, OPERATOR, "is it green?"),
                update(3, GROUP, OPERATOR, "/recycle@other_bot fresh"), bridge=True)
    assert agent.relayed == [("is it green?", "tg-20")]
    assert [(d["user_id"], d["reason"]) for d in refused(store)] == [(STRANGER, "sender"), (OPERATOR, "other_bot")]
    assert replies(store) == []


def test_a_member_the_group_does_not_take_is_in_the_ledger_once_an_hour_whatever_they_send(store):
    """With the bridge on in a group, every line of a member not in `allowed_users` added a
    `telegram_refused` event (and a log line): one chatty member grew the ledger without bound, as a
    stranger's chat did before it was recorded once an hour."""
    from fake_clock import FakeClock

    from loomtui import clock

    cfg = parse_config({"telegram": {"chat_id": GROUP, "bridge": True, "allowed_users": [OPERATOR]},
                        "agent": {"driver": "stream-json"}}, "loom.toml", None)
    with clock.use(FakeClock(time.time(), 500.0)) as c:
        agent = Agent()
        poller = Poller(store, cfg.telegram, BOT, agent, Clock(), username=ME)
        for uid in range(1, 101):
            asyncio.run(poller.handle(update(uid, GROUP, STRANGER, f"lunch? {uid}")))
        asyncio.run(poller.handle(update(101, GROUP, OPERATOR, "/canary@other_bot")))  # another reason: its own
        c.advance(3600.0)
        asyncio.run(poller.handle(update(102, GROUP, STRANGER, "lunch? 102")))
        asyncio.run(poller.handle(update(103, GROUP, OPERATOR, "is it green?")))
    assert refused(store) == [
        {"chat_id": GROUP, "user_id": STRANGER, "update_id": 1, "reason": "sender"},
        {"chat_id": GROUP, "user_id": OPERATOR, "update_id": 101, "reason": "other_bot"},
        {"chat_id": GROUP, "user_id": STRANGER, "update_id": 102, "reason": "sender", "refused_since": 99}]
    assert agent.relayed == [("is it green?", "tg-1030")]
    assert state.offset(store) == 104  # every one read past all the same
