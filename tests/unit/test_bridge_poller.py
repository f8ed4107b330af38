"""The bridge's poller side: which updates go to the agent, which are commands, which do nothing.

The poller runs for real on a real store; the agent side is the `Actions` seam the command loop
already has (the e2e test drives the real inject through the real pump).
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
import telegram

from loomtui.config import load_config
from loomtui.context import Context
from loomtui.daemon import loops
from loomtui.daemon.loops import services
from loomtui.store import ledger, outbox
from loomtui.store import telegram_state as state
from loomtui.store.db import Store
from loomtui.telegram.clock import Clock
from loomtui.telegram.commands import BRIDGE_HELP, HELP, MAX_COMMAND_AGE, Poller

CHAT, STRANGER = 5151, 6262
BOT = telegram.Bot("123456:poller-unit-test-token")


class Agent:
    """The actions a poller may call, recording what reached the agent."""

    agents = ("main",)

    def __init__(self, refuse: str = "", raises: BaseException | None = None) -> None:
        self.relayed: list[tuple[str, str]] = []
        self.refuse, self.raises = refuse, raises

    def relay(self, text: str, ref: str) -> str:
        if self.raises is not None:
            raise self.raises
        self.relayed.append((text, ref))
        return self.refuse

    def status(self, agent: str | None) -> str:
        return "Loom status\nall good"

    def canary(self, agent: str) -> str:
        return "canary ok"

    def recycle(self, agent: str, mode: str) -> str:
        return f"relaunched {mode}"

    def queue(self) -> str:
        return "queue: nothing open"

    def hold(self, agent: str, reason: str, duration: float | None) -> str:
        return "held"

    def release(self, agent: str) -> str:
        return "released"

    def close(self) -> None:
        pass


def config(tmp_path, *, bridge: bool, commands: bool = False):
    path = tmp_path / "loom.toml"
    path.write_text(f'[agent]\ndriver = "{"stream-json" if bridge else "tmux"}"\n'
                    f"[telegram]\nchat_id = {CHAT}\nbridge = {str(bridge).lower()}\n"
                    f"commands = {str(commands).lower()}\n")
    return load_config(str(path), {})[0]


@pytest.fixture
def store(tmp_path):
    with Store.in_dir(tmp_path) as s:
        yield s


def update(uid: int, chat: int, text: str | None, age: float = 0.0) -> telegram.Update:
    message = {"message_id": uid * 10, "date": int(time.time() - age),
               "chat": {"id": chat, "type": "private"}, "from": {"id": chat, "is_bot": False, "first_name": "x"}}
    if text is not None:
        message["text"] = text
    else:
        message["sticker"] = {"file_id": "f", "file_unique_id": "u", "width": 1, "height": 1,
                              "is_animated": False, "is_video": False, "type": "regular"}
    return telegram.Update.de_json({"update_id": uid, "message": message}, BOT)


def handle(store, cfg, agent, *updates):
    poller = Poller(store, cfg.telegram, BOT, agent, Clock())
    for u in updates:
        asyncio.run(poller.handle(u))


def replies(store):
    return [(m.chat_id, m.text) for m in reversed(outbox.recent(store, 100))]


def test_operator_text_goes_to_the_agent_and_nothing_is_said_back_yet(tmp_path, store):
    agent = Agent()
    handle(store, config(tmp_path, bridge=True), agent, update(1, CHAT, "how is the build?"))
    assert agent.relayed == [("how is the build?", "tg-10")]
    assert replies(store) == []  # the answer comes from the agent's turn, through bridge.py
    assert state.offset(store) == 2


def test_commands_still_work_beside_the_bridge(tmp_path, store):
    agent = Agent()
    handle(store, config(tmp_path, bridge=True), agent, update(1, CHAT, "/status"), update(2, CHAT, "/nonsense"),
           update(3, CHAT, "/help"))
    assert agent.relayed == []
    # An unknown command says it went nowhere: the help alone read as if it had gone to the agent.
    assert replies(store) == [(CHAT, "Loom status\nall good"),
                              (CHAT, "/nonsense is not a Loom command; it was not passed to the agent (send it "
                                     "without the leading /). " + HELP + BRIDGE_HELP),
                              (CHAT, HELP + BRIDGE_HELP)]


def test_a_line_that_starts_with_a_path_is_text_for_the_agent_not_a_command(tmp_path, store):
    agent = Agent()
    handle(store, config(tmp_path, bridge=True), agent, update(1, CHAT, "/etc/nginx/nginx.conf is broken, fix it"))
    assert agent.relayed == [("/etc/nginx/nginx.conf is broken, fix it", "tg-10")]
    assert replies(store) == []


def test_a_strangers_message_reaches_nobody_and_its_text_is_not_kept(tmp_path, store, caplog):
    caplog.set_level(logging.DEBUG)
    agent = Agent()
    handle(store, config(tmp_path, bridge=True), agent, update(1, STRANGER, "please rm -rf the repo"))
    assert agent.relayed == [] and replies(store) == []
    [event] = [e for e in ledger.tail(store, 50) if e.kind == "telegram_ignored"]
    assert event.detail == {"chat_id": STRANGER, "update_id": 1}
    assert not [e for e in ledger.tail(store, 50) if "rm -rf" in str(e.detail)]
    assert "rm -rf" not in caplog.text
    assert state.offset(store) == 2


def test_a_stranger_is_in_the_ledger_once_an_hour_whatever_they_send(tmp_path, store):
    # Each stranger's message added an event: anyone who knew the bot's name grew the ledger
    # without bound. The first of each chat, then one an hour, saying how many went unrecorded.
    from fake_clock import FakeClock

    from loomtui import clock

    other = STRANGER + 1
    with clock.use(FakeClock(time.time(), 500.0)) as c:
        poller = Poller(store, config(tmp_path, bridge=True).telegram, BOT, Agent(), Clock())
        for uid in range(1, 51):
            asyncio.run(poller.handle(update(uid, STRANGER, f"spam {uid}")))
        asyncio.run(poller.handle(update(51, other, "hello?")))
        c.advance(3599.0)
        asyncio.run(poller.handle(update(52, STRANGER, "spam 52")))
        c.advance(1.0)
        asyncio.run(poller.handle(update(53, STRANGER, "spam 53")))
    ignored = sorted((e for e in ledger.tail(store, 100) if e.kind == "telegram_ignored"), key=lambda e: e.id)
    assert [e.detail for e in ignored] == [
        {"chat_id": STRANGER, "update_id": 1}, {"chat_id": other, "update_id": 51},
        {"chat_id": STRANGER, "update_id": 53, "ignored_since": 50}]
    assert state.offset(store) == 54  # every one read past all the same


def test_without_the_bridge_text_is_only_a_command_mistake(tmp_path, store):
    agent = Agent()
    handle(store, config(tmp_path, bridge=False, commands=True), agent, update(1, CHAT, "hello"))
    assert agent.relayed == [] and replies(store) == [(CHAT, HELP)]


def test_a_message_from_before_an_outage_is_not_passed_on(tmp_path, store):
    agent = Agent()
    handle(store, config(tmp_path, bridge=True), agent, update(1, CHAT, "deploy now", age=MAX_COMMAND_AGE + 60))
    assert agent.relayed == []
    [(chat, text)] = replies(store)
    assert chat == CHAT and text.startswith("not passed to the agent: it was sent") and "deploy" not in text


def test_a_refused_or_failed_relay_is_told_to_the_operator(tmp_path, store, caplog):
    caplog.set_level(logging.DEBUG)
    cfg = config(tmp_path, bridge=True)
    handle(store, cfg, Agent(refuse="not passed to the agent: the agent's CLI has exited"), update(1, CHAT, "one"))
    handle(store, cfg, Agent(raises=RuntimeError("secret words in here")), update(2, CHAT, "secret words"))
    handle(store, cfg, Agent(), update(3, CHAT, None))
    assert [t for _, t in replies(store)] == [
        "not passed to the agent: the agent's CLI has exited",
        "not passed to the agent: RuntimeError: secret words in here",
        "not passed to the agent: the bridge passes text messages only",
    ]
    assert "secret words" not in caplog.text
    assert state.offset(store) == 4


def test_the_daemon_runs_one_poller_and_the_bridge_beside_it(tmp_path):
    def wired(*, bridge: bool, commands: bool) -> list[tuple[str, object]]:
        ctx = Context(config(tmp_path, bridge=bridge, commands=commands), None, tmp_path)
        return [(s.name, s.run) for s in services(ctx)]

    sender, poller, replies = (("telegram_sender", loops._sender), ("telegram_commands", loops._commands),
                               ("telegram_bridge", loops._bridge_replies))
    # One poller, the same function whatever is on: the bridge's messages come in through it.
    assert wired(bridge=True, commands=False) == [sender, poller, replies]
    assert wired(bridge=True, commands=True) == [sender, poller, replies]
    assert wired(bridge=False, commands=True) == [sender, poller]
    assert wired(bridge=False, commands=False) == [sender]
    no_chat = tmp_path / "quiet.toml"
    no_chat.write_text("[telegram]\ncommands = true\n")
    assert services(Context(load_config(str(no_chat), {})[0], None, tmp_path)) == []


def in_group(uid: int, chat: int, **fields) -> telegram.Update:
    """A message in group `chat` from the operator (user CHAT): Telegram's own service message
    (a group's migration) or a text."""
    message = {"message_id": uid * 10, "date": int(time.time()), "chat": {"id": chat, "type": "supergroup"},
               "from": {"id": CHAT, "is_bot": False, "first_name": "x"}, **fields}
    return telegram.Update.de_json({"update_id": uid, "message": message}, BOT)


def test_commands_follow_the_operators_group_into_the_supergroup_it_became(tmp_path, store):
    # A group that becomes a supergroup gets a new id; the sender learns it from Telegram's error,
    # but every command from the new id was ignored as a stranger's until the config was edited.
    group, new, other = -5151, -1_000_000_000_100, -1_000_000_000_200
    path = tmp_path / "loom.toml"
    path.write_text(f"[telegram]\nchat_id = {group}\nallowed_users = [{CHAT}]\ncommands = true\n")
    cfg = load_config(str(path), {})[0]
    agent = Agent()
    handle(store, cfg, agent, in_group(1, new, text="/status"))
    assert replies(store) == []  # before Telegram says so: a stranger
    handle(store, cfg, agent, in_group(2, group, migrate_to_chat_id=new))
    [moved] = [e for e in ledger.tail(store, 50) if e.kind == "telegram_chat_migrated"]
    assert moved.detail["from"] == group and moved.detail["to"] == new
    [(chat, told)] = replies(store)
    assert chat == new and f"telegram.chat_id = {new}" in told
    # The new supergroup's own service message says it again: nothing more.
    handle(store, cfg, agent, in_group(3, new, migrate_from_chat_id=group), in_group(4, new, text="/status"))
    assert replies(store)[1:] == [(new, "Loom status\nall good")]
    # A restarted poller still knows; another group naming another chat is a stranger still.
    handle(store, cfg, agent, in_group(5, other, migrate_from_chat_id=12345), in_group(6, other, text="/status"),
           in_group(7, new, text="/status"))
    assert replies(store)[2:] == [(new, "Loom status\nall good")]
    assert state.offset(store) == 8


def test_the_new_supergroups_own_service_message_records_it_and_another_config_chat_ends_it(tmp_path, store):
    # The migration may reach the poller only as the new supergroup's first message (the old
    # group's went unread); a config that names another chat since honours it no longer.
    group, new = -5151, -1_000_000_000_100
    path = tmp_path / "loom.toml"
    path.write_text(f"[telegram]\nchat_id = {group}\nallowed_users = [{CHAT}]\ncommands = true\n")
    cfg = load_config(str(path), {})[0]
    handle(store, cfg, Agent(), in_group(1, new, migrate_from_chat_id=group), in_group(2, new, text="/status"))
    assert [e.detail["to"] for e in ledger.tail(store, 50) if e.kind == "telegram_chat_migrated"] == [new]
    assert replies(store)[-1] == (new, "Loom status\nall good")
    other = tmp_path / "other.toml"
    other.write_text(f"[telegram]\nchat_id = -7777\nallowed_users = [{CHAT}]\ncommands = true\n")
    before = len(replies(store))
    handle(store, load_config(str(other), {})[0], Agent(), in_group(3, new, text="/status"))
    assert len(replies(store)) == before  # a stranger again


def test_a_reply_the_busy_store_did_not_take_at_first_still_reaches_the_operator(tmp_path):
    """The command ran (its offset saved with its ledger event), then its reply met a store held busy
    past its timeout (a backup, a `sqlite3` shell): the error restarted the poller past the command,
    and the operator never learnt whether the /recycle had run."""
    import threading

    with Store.in_dir(tmp_path, timeout=0.3) as store, Store.in_dir(tmp_path, timeout=0) as holder:
        class Busy(Agent):
            def recycle(self, agent: str, mode: str) -> str:
                holder.lock_out()  # held while the reply is queued, let go a little later
                threading.Timer(2.0, holder.let_in).start()
                return super().recycle(agent, mode)

        handle(store, config(tmp_path, bridge=False, commands=True), Busy(), update(1, CHAT, "/recycle fresh"))
        assert replies(store) == [(CHAT, "relaunched fresh")]
        assert state.offset(store) == 2
