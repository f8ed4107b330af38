"""Command mode: long-polls the bot for operator commands and answers them through the outbox.

Only for setups where the agent does not hold the bot itself: two pollers on one token make
Telegram answer 409 Conflict to one of them, and the loser goes deaf (DESIGN failure 6). A 409
is therefore recorded, shown by `loom status`, told to the operator, and backed off from.

Each update's offset is committed before its command runs: a crash mid-command loses that
command (the operator can send it again) instead of re-running a recycle on every restart.

With `telegram.bridge` this loop is also the bridge's poller, and so the bot's only one: any
other text from the operator's chat goes to the agent through the one injection path (the same
offset rule: a crash mid-relay loses that message, never types it twice), and bridge.py sends
the answer back. Commands work beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import telegram
from telegram.error import Conflict, TelegramError

from loomtui import redact
from loomtui.agent.hold_rules import parse_request
from loomtui.agent.policy import backoff
from loomtui.config import TelegramConfig
from loomtui.context import Context
from loomtui.errors import LoomError
from loomtui.store import ledger, outbox
from loomtui.store import telegram_state as state
from loomtui.store.db import Store
from loomtui.telegram import rules
from loomtui.telegram.bot import describe, make_bot
from loomtui.telegram.clock import SYSTEM, Clock
from loomtui.telegram.token import load_token

if TYPE_CHECKING:
    from loomtui.report.status import Status

log = logging.getLogger("loomtui.telegram.commands")

HELP = "Loom commands: /status, /canary, /recycle resume|fresh, /queue, /hold [30m] REASON, /release"
BRIDGE_HELP = "; any other text goes to the agent, and its answer comes back here"
COMMANDS = ("status", "canary", "recycle", "queue", "hold", "release")
MAX_COMMAND_AGE = 600.0  # a /recycle typed before an outage is not acted on when the outage ends
CONFLICT_MESSAGE = (
    "Loom: another process is polling this bot's token (Telegram answers 409 Conflict), so Loom "
    "receives no commands and that other poller may miss messages. Loom keeps backing off; stop the "
    "other poller, or set telegram.commands = false if the agent owns this bot."
)

T = TypeVar("T")


class Actions(Protocol):
    def status(self) -> str: ...
    def canary(self) -> str: ...
    def recycle(self, mode: str) -> str: ...
    def queue(self) -> str: ...
    def hold(self, reason: str, duration: float | None) -> str: ...
    def release(self) -> str: ...
    def relay(self, text: str, ref: str) -> str: ...


class OperatorActions:
    """What the command mode may do: the operator's actions, through the one actions module."""

    def __init__(self, ctx: Context, source: str = "telegram") -> None:
        self.ctx = ctx
        self.source = source

    def status(self) -> str:
        from loomtui.report import status as status_mod

        return format_status(status_mod.gather(self.ctx, events=0))

    def canary(self) -> str:
        from loomtui import actions

        return "canary " + actions.canary_now(self.ctx, source=self.source).describe()

    def recycle(self, mode: str) -> str:
        from loomtui import actions

        return actions.recycle(self.ctx, mode, source=self.source, reason="asked over Telegram").describe()

    def queue(self) -> str:
        from loomtui.sentinel import queue as sentinel_queue

        return queue_summary(sentinel_queue.open_items(self.ctx.store))

    def hold(self, reason: str, duration: float | None) -> str:
        from loomtui import actions

        return actions.hold(self.ctx, reason, duration, source=self.source).describe()

    def release(self) -> str:
        from loomtui import actions

        return actions.release(self.ctx, source=self.source).describe()

    def relay(self, text: str, ref: str) -> str:
        """The operator's words to the agent: "" once the pump has them, else why not."""
        from loomtui import actions

        # The ledger gets inject's length and digest and this ref; the text goes to the agent only.
        result = actions.inject(self.ctx, text, source=self.source, detail={"ref": ref}, ref=ref)
        return "" if result.ok else f"not passed to the agent: {result.error}"


def queue_summary(items: list[Any], limit: int = 10) -> str:
    if not items:
        return "queue: nothing open"
    lines = [f"queue: {len(items)} open"]
    for item in items[:limit]:
        lines.append(f"#{item.id} {item.job} [{item.state}] x{item.count}")
    if len(items) > limit:
        lines.append(f"… and {len(items) - limit} more")
    return "\n".join(lines)


def format_status(status: Status) -> str:
    from loomtui.durations import format_duration

    sup, last, look = status.supervisor, status.canary_settled, status.agent
    agent = look.describe() if look else "not looked at"
    if status.hold:
        from loomtui.agent import hold_rules

        hold = hold_rules.Hold.from_record(status.hold)
        agent = f"HELD: {hold_rules.describe(hold, status.taken)} (/release" + \
            (" or /recycle)" if hold.by == "ceiling" else ")") + f"; {agent}"
    lines = [
        "Loom status",
        f"agent: {agent}",
        f"pinned session: {status.pinned_session or '(none)'}",
        f"canary: {last.describe() if last else 'no probe yet'}",
        f"queue: {status.queue.get('open', 0)} open, {status.queue.get('claimed', 0)} claimed",
        f"supervisor: {'no heartbeat' if sup is None else 'heartbeat ' + format_duration(sup.age) + ' ago'}",
        f"ledger: {status.ledger_events} events",
        f"outbox: {status.outbox['pending']} pending, {status.outbox['failed']} failed",
    ]
    if status.conflict:
        lines.append(f"telegram: {status.conflict['note']}")
    return "\n".join(lines)


async def run_commands(ctx: Context, actions: Actions, stop: asyncio.Event, *, clock: Clock = SYSTEM,
                       bot: telegram.Bot | None = None) -> None:
    """Poll and answer operator commands (and relay the operator's messages, with the bridge on)
    until `stop` is set; only waits for `stop` when neither is on."""
    cfg = ctx.config.telegram
    if not (cfg.commands or cfg.bridge):
        await stop.wait()
        return
    token = load_token(cfg)
    bot = bot or make_bot(token, cfg)
    poller = Poller(ctx.store, cfg, bot, actions, clock)
    try:
        while not stop.is_set():
            wait = await poller.step(stop)
            if wait > 0 and await clock.sleep(wait, stop):
                break
    finally:
        with contextlib.suppress(Exception):
            await bot.shutdown()


class Poller:
    def __init__(self, store: Store, cfg: TelegramConfig, bot: telegram.Bot, actions: Actions, clock: Clock):
        self.store, self.cfg, self.bot, self.actions, self.clock = store, cfg, bot, actions, clock
        self.failures = 0

    async def step(self, stop: asyncio.Event) -> float:
        try:
            await self.bot.initialize()
            updates = await _unless_stopped(
                self.bot.get_updates(offset=state.offset(self.store), timeout=max(1, int(self.cfg.long_poll)),
                                     allowed_updates=["message"]),
                stop,
            )
        except Conflict:
            self.failures += 1
            self._record_conflict()
            return self._backoff()
        except TelegramError as exc:
            self.failures += 1
            log.warning("telegram: getUpdates failed (%s); retry in %.1fs", describe(exc), self._backoff())
            return self._backoff()
        if updates is None:
            return 0.0
        self.failures = 0
        self._clear_conflict()
        for update in updates:
            await self.handle(update)
        return 0.0

    def _backoff(self) -> float:
        return backoff(self.failures, self.cfg.backoff_base, self.cfg.backoff_max)

    def _record_conflict(self) -> None:
        log.warning("telegram: 409 Conflict: %s", state.CONFLICT_NOTE)
        if state.conflict(self.store) is not None:
            return
        now = self.clock.time()
        with self.store.write() as db:
            state.set_conflict_in(db, now, os.getpid())
            ledger.append_in(db, "telegram_conflict", source="telegram", detail={"note": state.CONFLICT_NOTE}, ts=now)
            outbox.enqueue(db, CONFLICT_MESSAGE, dedupe_key=f"telegram_conflict:{now:.3f}", now=now)

    def _clear_conflict(self) -> None:
        if state.conflict(self.store) is None:
            return
        with self.store.write() as db:
            if state.clear_conflict_in(db):
                ledger.append_in(db, "telegram_conflict_cleared", source="telegram", ts=self.clock.time())

    async def handle(self, update: telegram.Update) -> None:
        msg = update.message
        chat_id = msg.chat.id if msg else None
        if msg is None or chat_id != self.cfg.chat_id:
            with self.store.write() as db:
                state.set_offset_in(db, update.update_id + 1)
                if msg is not None:
                    # The chat id says who tried; their text is theirs and stays out of the ledger.
                    ledger.append_in(db, "telegram_ignored", source="telegram",
                                     detail={"chat_id": chat_id, "update_id": update.update_id})
            return
        parsed = rules.parse_command(msg.text)
        if parsed is None and self.cfg.bridge:
            await self.relay(update, msg)
            return
        name = parsed[0] if parsed and parsed[0] in COMMANDS else "help"
        with self.store.write() as db:
            state.set_offset_in(db, update.update_id + 1)
            ledger.append_in(db, "telegram_command", source="telegram",
                             detail={"command": name, "update_id": update.update_id})
        age = self.clock.time() - msg.date.timestamp()
        reply = await self.answer(name, parsed[1] if parsed else [], age)
        outbox.enqueue(self.store, redact.scrub(reply), chat_id=chat_id,
                       dedupe_key=f"telegram_reply:{chat_id}:{msg.message_id}:{update.update_id}")

    async def relay(self, update: telegram.Update, msg: telegram.Message) -> None:
        with self.store.write() as db:
            state.set_offset_in(db, update.update_id + 1)
        age = self.clock.time() - msg.date.timestamp()
        if not msg.text:
            reply = "not passed to the agent: the bridge passes text messages only"
        elif age > MAX_COMMAND_AGE:
            reply = f"not passed to the agent: it was sent {int(age)}s ago, while Loom was not listening; send it again"
        else:
            try:
                reply = await asyncio.to_thread(self.actions.relay, msg.text, f"tg-{msg.message_id}")
            except LoomError as exc:
                reply = f"not passed to the agent: {exc}"
            except Exception as exc:
                # The type only: an exception's message might quote the operator's text.
                log.error("telegram: relaying update %d failed: %s", update.update_id, type(exc).__name__)
                reply = f"not passed to the agent: {describe(exc)}"
        if reply:
            outbox.enqueue(self.store, redact.scrub(reply), chat_id=msg.chat.id,
                           dedupe_key=f"telegram_reply:{msg.chat.id}:{msg.message_id}:{update.update_id}")

    async def answer(self, name: str, args: list[str], age: float) -> str:
        if name == "help":
            return HELP + (BRIDGE_HELP if self.cfg.bridge else "")
        if age > MAX_COMMAND_AGE and name in ("canary", "recycle", "hold", "release"):
            return f"/{name} not run: it was sent {int(age)}s ago, while Loom was not listening; send it again"
        if name == "recycle" and (len(args) != 1 or args[0] not in ("resume", "fresh")):
            return "usage: /recycle resume|fresh"
        held = parse_request(args) if name == "hold" else None
        if name == "hold" and held is None:
            return "usage: /hold [30m] REASON (a reason is required; the duration is optional)"
        call = {
            "status": self.actions.status,
            "canary": self.actions.canary,
            "queue": self.actions.queue,
            "recycle": lambda: self.actions.recycle(args[0]),
            "hold": lambda: self.actions.hold(*held),
            "release": self.actions.release,
        }[name]
        try:
            # Actions block (a canary waits for its ack); the loop must keep serving meanwhile.
            return str(await asyncio.to_thread(call))
        except LoomError as exc:
            return str(exc)
        except Exception as exc:
            log.exception("telegram: /%s failed", name)
            return f"/{name} failed: {describe(exc)}"


async def _unless_stopped(aw: Awaitable[T], stop: asyncio.Event) -> T | None:
    """The result of `aw`, or None if `stop` came first (a cancelled getUpdates confirms nothing)."""
    task = asyncio.ensure_future(aw)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        done, _ = await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    finally:
        stopper.cancel()
    if task in done:
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    return None
