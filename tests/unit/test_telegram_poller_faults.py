"""The command poller's and the sender's steps against the loopback fake of the Bot API
(tests/fakebot.py): a second poller on the token (409 Conflict) coming and going, flood control on
getUpdates (429 with retry_after), a store too busy to record a delivery Telegram took."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from fakebot import FakeBot
from test_bridge_poller import Agent

from loomtui.config import parse_config
from loomtui.context import Context
from loomtui.store import ledger, outbox
from loomtui.store.db import Store
from loomtui.telegram.bot import make_bot
from loomtui.telegram.clock import Clock
from loomtui.telegram.commands import CONFLICT_MESSAGE, Poller

TOKEN = "123456:poller-faults-test-token"


@pytest.fixture
def fake():
    bot = FakeBot(TOKEN).start()
    yield bot
    bot.stop()


@pytest.fixture
def store(tmp_path):
    with Store.in_dir(tmp_path) as s:
        yield s


def steps(fake: FakeBot, store: Store, conflicts: list[bool], flood: list[int] = ()) -> list[float]:
    """One poller stepping once per entry of `conflicts` (the fake answering 409 or not): the waits
    it asked for."""
    cfg = parse_config({"telegram": {"chat_id": 42, "commands": True, "api_base": fake.api_base,
                                     "long_poll": "1s"}}, "loom.toml", None)
    fake.updates_flood = list(flood)

    async def run() -> list[float]:
        bot = make_bot(TOKEN, cfg.telegram)
        poller = Poller(store, cfg.telegram, bot, Agent(), Clock(), username="loom_bot")
        waits = []
        try:
            for conflict in conflicts:
                fake.conflict = conflict
                waits.append(await poller.step(asyncio.Event()))
        finally:
            await bot.shutdown()
        return waits

    return asyncio.run(run())


def test_a_second_poller_coming_and_going_is_told_to_the_operator_once(fake, store):
    """Two pollers on one token take turns: each success cleared the conflict, and each 409 after it
    queued the message again, a message per flap."""
    steps(fake, store, [True, False, True, False, True, False, True])
    assert len(ledger.tail(store, 100, kinds=["telegram_conflict"])) == 4  # each one is in the ledger
    assert [m.text for m in outbox.recent(store, 100)].count(CONFLICT_MESSAGE) == 1


def test_the_409_notice_is_told_once_in_six_hours_from_the_last_one_not_per_fixed_bucket(fake, store):
    """Conflicts a second either side of a multiple of six hours were two messages minutes apart."""
    from loomtui.telegram.commands import CONFLICT_RETELL

    class At(Clock):
        t = CONFLICT_RETELL * 300_000 - 1.0  # a second before a fixed bucket's edge

        def time(self) -> float:
            return self.t

    at = At()
    cfg = parse_config({"telegram": {"chat_id": 42, "commands": True, "api_base": fake.api_base,
                                     "long_poll": "1s"}}, "loom.toml", None)

    async def run() -> None:
        bot = make_bot(TOKEN, cfg.telegram)
        poller = Poller(store, cfg.telegram, bot, Agent(), at, username="loom_bot")
        try:
            for conflict, then in ((True, 2.0), (False, 0.0), (True, CONFLICT_RETELL), (False, 0.0), (True, 0.0)):
                fake.conflict = conflict
                await poller.step(asyncio.Event())
                at.t += then
        finally:
            await bot.shutdown()

    asyncio.run(run())
    assert len(ledger.tail(store, 100, kinds=["telegram_conflict"])) == 3
    # The first, and the one six hours after it: not the one two seconds later across the edge.
    assert [m.text for m in outbox.recent(store, 100)].count(CONFLICT_MESSAGE) == 2


def test_flood_control_on_get_updates_waits_as_long_as_telegram_says(fake, store):
    [waited, then] = steps(fake, store, [False, False], flood=[7])
    assert waited >= 7.0  # not the backoff's first second
    assert then == 0.0


def test_a_delivery_the_busy_store_did_not_take_is_recorded_later_never_sent_again(fake, tmp_path):
    """Telegram took the message, and the store, held by a backup past its busy timeout, did not take
    its record: the error restarted the sender's loop, and the row, still pending, went again."""
    from fake_clock import FakeClock

    from loomtui import clock
    from loomtui.telegram.sender import RECORD_RETRY, Sender

    cfg = parse_config({"telegram": {"chat_id": 42, "api_base": fake.api_base}}, "loom.toml", None)
    with clock.use(FakeClock()), Store.in_dir(tmp_path, waits_on_clock=True) as store, \
            Store.in_dir(tmp_path, timeout=0) as holder:
        outbox.enqueue(store, "the job broke")

        async def run() -> list[float]:
            bot = make_bot(TOKEN, cfg.telegram)
            sender = Sender(store, cfg.telegram, bot, Clock())
            try:
                holder.lock_out()
                first = await sender.step()
                holder.let_in()
                return [first, await sender.step(), await sender.step()]
            finally:
                await bot.shutdown()

        waits = asyncio.run(run())
        assert waits[0] == RECORD_RETRY and waits[1] == 0.0
        assert [m.text for m in fake.messages] == ["the job broke"]  # once
        [row] = outbox.recent(store, 10)
        assert row.state == "sent" and row.telegram_message_id is not None


def test_a_delivery_a_store_refusing_writes_did_not_take_is_not_sent_again_by_the_senders_restarts(fake, tmp_path):
    """A store that refuses writes for a while (full, or read-only: SQLite's own refusal here): the sender's
    error restarted its loop (a new Sender), which found the row still pending and sent it again,
    once a restart, for as long as the store refused its record."""
    from fake_clock import FakeClock

    from loomtui import clock
    from loomtui.telegram.sender import Sender

    cfg = parse_config({"telegram": {"chat_id": 42, "api_base": fake.api_base}}, "loom.toml", None)
    with clock.use(FakeClock()), Store.in_dir(tmp_path) as store:
        outbox.enqueue(store, "the job broke")
        store.conn.execute("PRAGMA query_only = ON")  # SQLite's own refusal of writes from here on

        async def run() -> list[float]:
            waits = []
            for _ in range(3):  # the loop's restarts: a new Sender each time, in this process
                bot = make_bot(TOKEN, cfg.telegram)
                try:
                    waits.append(await Sender(store, cfg.telegram, bot, Clock()).step())
                finally:
                    await bot.shutdown()
            store.conn.execute("PRAGMA query_only = OFF")  # writable again
            bot = make_bot(TOKEN, cfg.telegram)
            try:
                waits.append(await Sender(store, cfg.telegram, bot, Clock()).step())
            finally:
                await bot.shutdown()
            return waits

        waits = asyncio.run(run())
        assert [m.text for m in fake.messages] == ["the job broke"]  # once
        assert waits[0] > 0 and waits[1] > waits[0] and waits[-1] == 0.0  # asked again, longer apart
        [row] = outbox.recent(store, 10)
        assert row.state == "sent" and row.telegram_message_id == fake.messages[0].message_id


def test_a_tick_whose_delivery_went_unrecorded_fails_and_says_it(fake, tmp_path, monkeypatch):
    """`loom tick notify` ends with its pass: a delivery the busy store did not take would be sent
    again by the next tick, so the tick fails naming it rather than exiting 0."""
    from fake_clock import FakeClock

    from loomtui import clock
    from loomtui.errors import StoreUnavailable
    from loomtui.telegram.sender import send_due

    monkeypatch.setenv("LOOM_TEST_TOKEN", TOKEN)
    config = tmp_path / "config.toml"
    config.write_text(f'[telegram]\nchat_id = 42\napi_base = "{fake.api_base}"\ntoken_env = "LOOM_TEST_TOKEN"\n')
    loaded = Context.load(str(config), str(tmp_path / "state"), environ={})
    ctx = Context(loaded.config, loaded.config_path, loaded.state_dir, store_waits_on_clock=True)
    holder = Store.in_dir(ctx.state_dir, timeout=0)
    try:
        outbox.enqueue(ctx.store, "the job broke")
        holder.lock_out()
        with clock.use(FakeClock()), pytest.raises(StoreUnavailable, match=r"outbox \[1\] sent"):
            asyncio.run(send_due(ctx, bot=make_bot(TOKEN, ctx.config.telegram)))
        holder.let_in()
        assert [m.text for m in fake.messages] == ["the job broke"]
    finally:
        holder.close()
        ctx.close()
        loaded.close()


def test_a_loopback_bot_api_is_reached_directly_never_through_the_proxy(fake, monkeypatch):
    # The token is in every Bot API URL's path; over plain http (loopback alone may be) an
    # http_proxy of the environment, which httpx trusts, read it.
    from push_receiver import Receiver

    proxy = Receiver()
    try:
        for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
            monkeypatch.setenv(name, proxy.url)
        for name in ("no_proxy", "NO_PROXY"):
            monkeypatch.delenv(name, raising=False)
        cfg = parse_config({"telegram": {"chat_id": 42, "api_base": fake.api_base}}, "loom.toml", None)

        async def run() -> None:
            bot = make_bot(TOKEN, cfg.telegram)
            try:
                await bot.send_message(chat_id=42, text="through no proxy")
            finally:
                await bot.shutdown()

        asyncio.run(run())
        assert [m.text for m in fake.messages] == ["through no proxy"] and proxy.paths == []
    finally:
        proxy.close()


def test_what_a_message_names_is_on_disk_before_the_message_goes(fake, tmp_path):
    # With synchronous = NORMAL a commit is sure only at a checkpoint: after a power cut the events
    # a sent message named (its ledger head) could be lost and their ids reused, and the head the
    # operator holds would read as a rewritten history. The store's file alone, without its log,
    # holds them once the message has gone.
    import shutil
    import sqlite3

    from loomtui.store import ledger
    from loomtui.store.db import DB_NAME
    from loomtui.telegram.clock import Clock
    from loomtui.telegram.sender import Sender

    cfg = parse_config({"telegram": {"chat_id": 42, "api_base": fake.api_base}}, "loom.toml", None)
    with Store.in_dir(tmp_path) as store:
        for n in range(5):
            ledger.append(store, "inject", source="test", detail={"n": n})
        seq, digest = ledger.head(store)
        outbox.enqueue(store, f"Loom: escalated ledger {ledger.format_head(seq, digest)}")

        async def run() -> None:
            bot = make_bot(TOKEN, cfg.telegram)
            try:
                await Sender(store, cfg.telegram, bot, Clock()).step()
            finally:
                await bot.shutdown()

        asyncio.run(run())
        assert [m.text.split()[-1] for m in fake.messages] == [ledger.format_head(seq, digest)]
        alone = tmp_path / "alone"
        alone.mkdir()
        shutil.copy(tmp_path / DB_NAME, alone / DB_NAME)  # the file, not its write-ahead log
        with contextlib.closing(sqlite3.connect(alone / DB_NAME)) as db:
            assert db.execute("SELECT max(id) FROM ledger").fetchone()[0] == seq


def test_a_tick_delivers_a_burst_at_telegram_s_pace_not_one_message(fake, tmp_path, monkeypatch):
    """`loom tick notify` stopped at the per-chat pause after its first message: twenty alerts took
    twenty ticks. It waits that second out between messages, within its budget."""
    from loomtui.telegram.sender import send_due

    monkeypatch.setenv("LOOM_TEST_TOKEN", TOKEN)
    config = tmp_path / "config.toml"
    config.write_text(f'[telegram]\nchat_id = 42\napi_base = "{fake.api_base}"\ntoken_env = "LOOM_TEST_TOKEN"\n')
    ctx = Context.load(str(config), str(tmp_path / "state"), environ={})
    try:
        for n in range(3):
            outbox.enqueue(ctx.store, f"alert {n}")
        sent, left = asyncio.run(send_due(ctx, bot=make_bot(TOKEN, ctx.config.telegram)))
        assert (sent, left) == (3, 0)
        assert [m.text for m in fake.messages] == ["alert 0", "alert 1", "alert 2"]
        # No link preview: Telegram's servers would fetch the URLs a log line or an answer carries.
        import json

        options = [m.link_preview_options for m in fake.messages]
        assert all((json.loads(o) if isinstance(o, str) else o) == {"is_disabled": True} for o in options), options
    finally:
        ctx.close()


def test_a_retry_stored_before_the_clock_was_stepped_back_does_not_hold_the_outbox(fake, tmp_path, monkeypatch):
    """A row deferred, then the wall clock stepped back a day (an NTP fix of a clock that ran
    ahead): each pass capped its sleep at backoff_max and looked again, and the row, with every
    message behind it, waited the day out. A wait no backoff could have stored is due now."""
    from loomtui.telegram.sender import send_due

    monkeypatch.setenv("LOOM_TEST_TOKEN", TOKEN)
    config = tmp_path / "config.toml"
    config.write_text(f'[telegram]\nchat_id = 42\napi_base = "{fake.api_base}"\ntoken_env = "LOOM_TEST_TOKEN"\n')
    ctx = Context.load(str(config), str(tmp_path / "state"), environ={})
    try:
        first = outbox.enqueue(ctx.store, "the job broke")
        outbox.enqueue(ctx.store, "the backup failed")
        outbox.defer(ctx.store, first, until=time.time() + 86400 + 60, error="NetworkError: timed out")
        sent, left = asyncio.run(send_due(ctx, bot=make_bot(TOKEN, ctx.config.telegram)))
        assert (sent, left) == (2, 0)
        assert [m.text for m in fake.messages] == ["the job broke", "the backup failed"]
        # One within the backoff still waits its time.
        third = outbox.enqueue(ctx.store, "again")
        outbox.defer(ctx.store, third, until=time.time() + 60, error="NetworkError: timed out")
        assert asyncio.run(send_due(ctx, bot=make_bot(TOKEN, ctx.config.telegram))) == (0, 1)
    finally:
        ctx.close()


def test_a_flood_wait_longer_than_the_backoff_is_kept_by_the_next_sender(fake, tmp_path, monkeypatch):
    """Telegram's flood wait of an hour, stored by a sender that then stopped (a restart, one `loom
    tick notify`): the next sender kept to it only up to backoff_max (5 minutes) and asked Telegram
    again at once, at every restart. Kept now (up to MAX_FLOOD_WAIT); one further ahead than the
    wait its row says it was was stored before the clock was stepped back, and is due."""
    from loomtui.telegram import sender
    from loomtui.telegram.sender import send_due

    monkeypatch.setenv("LOOM_TEST_TOKEN", TOKEN)
    config = tmp_path / "config.toml"
    config.write_text(f'[telegram]\nchat_id = 42\napi_base = "{fake.api_base}"\ntoken_env = "LOOM_TEST_TOKEN"\n')
    ctx = Context.load(str(config), str(tmp_path / "state"), environ={})
    try:
        fake.flood = [3600]
        first = outbox.enqueue(ctx.store, "the job broke")
        assert asyncio.run(send_due(ctx, bot=make_bot(TOKEN, ctx.config.telegram))) == (0, 1)
        row = outbox.get(ctx.store, first)
        assert row.last_error.startswith("flood wait 3600s: ") and row.next_attempt > time.time() + 3500
        calls = len(fake.calls)
        for _ in range(2):  # two more senders, one after the other: neither asks Telegram
            assert asyncio.run(send_due(ctx, bot=make_bot(TOKEN, ctx.config.telegram))) == (0, 1)
        assert len(fake.calls) == calls and fake.messages == []
        # Stored before the wall clock was stepped back an hour: further ahead than its own flood
        # wait (and than any backoff), so due now.
        outbox.defer(ctx.store, first, until=time.time() + 3600 + 3600, error=row.last_error)
        assert asyncio.run(send_due(ctx, bot=make_bot(TOKEN, ctx.config.telegram))) == (1, 0)
        assert [m.text for m in fake.messages] == ["the job broke"]
        # Telegram's wait is kept up to MAX_FLOOD_WAIT.
        fake.flood = [10 * 86400]
        second = outbox.enqueue(ctx.store, "the backup failed")
        assert asyncio.run(send_due(ctx, bot=make_bot(TOKEN, ctx.config.telegram))) == (0, 1)
        assert outbox.get(ctx.store, second).next_attempt <= time.time() + sender.MAX_FLOOD_WAIT
    finally:
        ctx.close()


def test_loom_tick_notify_never_prints_the_token_an_error_page_echoes(tmp_path):
    """A Bot API behind a proxy whose error page echoes the request's path (Apache's 404 does):
    python-telegram-bot logs the page in full, `/bot<TOKEN>/sendMessage` with it. From cron, that
    went to stderr (mail) unscrubbed: `loom tick` logs through the daemon's scrubbed handlers."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from conftest import run_loom

    class Echoing(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = f"<html><body>Not Found: {self.path}</body></html>".encode()
            self.send_response(404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Echoing)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        config = tmp_path / "config.toml"
        config.write_text(f'state_dir = "{tmp_path / "state"}"\n[telegram]\nchat_id = 42\n'
                          f'api_base = "http://127.0.0.1:{server.server_address[1]}/bot"\n'
                          'token_env = "LOOM_TEST_TOKEN"\n')
        env = {"LOOM_CONFIG": str(config), "LOOM_TEST_TOKEN": TOKEN}
        queued = Context.load(str(config), None, environ={})
        outbox.enqueue(queued.store, "the job broke")
        queued.close()
        done = run_loom("tick", "notify", env=env)
        assert TOKEN not in done.stdout + done.stderr
        assert TOKEN.split(":")[1] not in done.stdout + done.stderr
    finally:
        server.shutdown()
        server.server_close()


def test_a_group_upgraded_to_a_supergroup_and_a_group_that_removed_the_bot_block_nothing(fake, store):
    """Telegram answers a send to an upgraded group with the supergroup's id: the message goes
    there. A reply to a group the bot was removed from is given up. Each was retried as a network
    error before, at the outbox's head for good, and every alert behind it waited."""
    from fake_clock import FakeClock

    from loomtui import clock
    from loomtui.telegram.sender import Sender

    fake.migrated[-100] = -1_000_000_000_100
    fake.kicked.add(-200)
    cfg = parse_config({"telegram": {"chat_id": -100, "api_base": fake.api_base}}, "loom.toml", None)
    outbox.enqueue(store, "a reply where the command came from", chat_id=-200)
    outbox.enqueue(store, "the job broke")
    outbox.enqueue(store, "the agent is back")

    async def run() -> None:
        bot = make_bot(TOKEN, cfg.telegram)
        sender = Sender(store, cfg.telegram, bot, Clock())
        try:
            for _ in range(12):
                if outbox.head(store) is None:
                    return
                await sender.step()
                clock.sleep(5)  # past the per-chat pause
        finally:
            await bot.shutdown()

    with clock.use(FakeClock()):
        asyncio.run(run())
    assert fake.texts(-1_000_000_000_100) == ["the job broke", "the agent is back"]
    states = {m.text: m.state for m in outbox.recent(store, 10)}
    assert states == {"a reply where the command came from": "failed", "the job broke": "sent",
                      "the agent is back": "sent"}


def deliver(fake: FakeBot, store: Store, chat_id: int, steps: int, between=None) -> None:
    """The sender stepped `steps` times on a virtual clock moved on by each wait it asks for;
    `between(i)` runs before step i."""
    from fake_clock import FakeClock

    from loomtui import clock
    from loomtui.telegram.sender import Sender

    cfg = parse_config({"telegram": {"chat_id": chat_id, "api_base": fake.api_base}}, "loom.toml", None)

    async def run() -> None:
        bot = make_bot(TOKEN, cfg.telegram)
        sender = Sender(store, cfg.telegram, bot, Clock())
        try:
            for i in range(steps):
                if between is not None:
                    between(i)
                wait = await sender.step()
                clock.sleep(max(wait, 1.1))
        finally:
            await bot.shutdown()

    with clock.use(FakeClock(time.time(), 5000.0)):
        asyncio.run(run())


def test_a_message_retried_through_an_outage_is_not_given_up_at_its_first_rejection(fake, store):
    """`attempts` counts every failure: three in an outage, then one 400 (a proxy's, say), and the
    message was given up; the README says three rejections."""
    outbox.enqueue(store, "the job broke")
    fake.go_down("502")

    def outage_then_one_rejection(i: int) -> None:
        if i == 3:
            fake.come_back()
            fake.rejects.append("Bad Request: can't parse entities")

    deliver(fake, store, 42, 6, outage_then_one_rejection)
    [row] = outbox.recent(store, 10)
    assert row.state == "sent" and fake.texts() == ["the job broke"]


def test_a_wrong_chat_id_holds_the_alerts_until_it_is_fixed_and_gives_none_up(fake, store):
    """400 "chat not found" is about the chat, not the message: each alert was given up in turn,
    every one sent while the setting was wrong burned."""
    for n in range(3):
        outbox.enqueue(store, f"alert {n}")
    fake.unknown_chats.add(42)
    pending: list[set[str]] = []

    def fixed_after_a_while(i: int) -> None:
        if i == 6:
            pending.append({m.state for m in outbox.recent(store, 10)})
            fake.unknown_chats.clear()  # the operator fixed telegram.chat_id (or started the bot)

    deliver(fake, store, 42, 14, fixed_after_a_while)
    assert pending == [{"pending"}]
    assert fake.texts(42) == ["alert 0", "alert 1", "alert 2"]


@pytest.mark.parametrize("refusal", [
    "Bad Request: not enough rights to send text messages to the chat",  # the bot muted in the group
    "Bad Request: have no rights to send a message",
    "Bad Request: CHAT_RESTRICTED",
    "Bad Request: CHAT_WRITE_FORBIDDEN"])
def test_a_chat_the_bot_may_not_write_to_holds_the_alerts_and_gives_none_up(fake, store, refusal):
    """Refusals about the chat, not the message: taken for the message's own, each alert was given
    up after three of them, the outbox emptied in seconds."""
    for n in range(3):
        outbox.enqueue(store, f"alert {n}")
    fake.rejects = [refusal] * 9

    deliver(fake, store, 42, 16, lambda i: None)
    assert outbox.summary(store)["failed"] == 0
    assert fake.texts(42) == ["alert 0", "alert 1", "alert 2"]
