"""The outbox sender: delivers pending rows to Telegram, oldest first, one at a time.

Only the oldest pending row is ever tried, so the operator reads messages in the order they
were written, and a later message never overtakes one that is waiting out an outage. A row
leaves `pending` only in the transaction that records Telegram's message id and the ledger
event, so a crash at any point leaves it to be sent again, never dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
import logging
import re
from dataclasses import dataclass
from typing import Any

import telegram
from telegram.error import BadRequest, ChatMigrated, Forbidden, RetryAfter, TelegramError

from loomtui.timing import backoff
from loomtui.config import TelegramConfig
from loomtui.context import Context
from loomtui.states import EventKind
from loomtui.errors import StoreUnavailable
from loomtui.store import health, outbox
from loomtui.store.db import Store
from loomtui.store.locks import FileLock
from loomtui.telegram import rules
from loomtui.telegram.bot import describe, make_bot, retry_after_seconds
from loomtui.telegram.clock import SYSTEM, Clock
from loomtui.telegram.token import load_token

LOCK_NAME = "telegram-sender.lock"  # two senders on one store would both send the head row
BAD_REQUEST_ATTEMPTS = 3  # Telegram understood and refused this very message; retrying forever is a wedge
# A 400 that is about the chat, not the message (a wrong telegram.chat_id, a group deleted, the bot
# muted in the group or writing restricted there): every message to that chat gets it, and giving
# each up burned every alert sent while it was wrong.
CHAT_GONE = re.compile(r"chat not found|group chat was deactivated|chat_id is empty|not enough rights"
                       r"|have no rights|chat_restricted|chat_write_forbidden", re.IGNORECASE)

log = logging.getLogger("loomtui.telegram.sender")
RECORD_RETRY = 1.0  # seconds before a delivery the busy store did not take is recorded again
PASS_BUDGET = 30.0  # seconds one `loom tick notify` may spend pacing its messages
# Telegram's flood waits are kept up to this long (a longer one is retried then, and Telegram says
# what is left). A row's stored wait further ahead than its flood wait (its last error says how long,
# in Loom's own words) or than any backoff was stored before the wall clock was stepped back.
MAX_FLOOD_WAIT = 6 * 3600.0
FLOOD_ERROR = "flood wait {seconds:g}s: {error}"
FLOOD = re.compile(r"flood wait (\d+(?:\.\d+)?)s: ")
NO_PREVIEW = telegram.LinkPreviewOptions(is_disabled=True)


@dataclass
class _Delivery:
    """A row Telegram took whose record the store has not: what to record, and how often it failed."""

    created: float  # the row's own: a row of that id in a store made anew is another message
    record: dict[str, Any]
    failures: int = 0


# By store: the sender's loop restarts after an error (a new Sender, in this process); a delivery it
# could not record was sent again at every restart, once a minute while the store refused writes.
_UNRECORDED: dict[str, dict[int, _Delivery]] = {}


async def run_sender(ctx: Context, stop: asyncio.Event, *, clock: Clock = SYSTEM, bot: telegram.Bot | None = None,
                     step: Callable[[], contextlib.AbstractContextManager[object]] = contextlib.nullcontext) -> None:
    """Deliver the outbox until `stop` is set. Raises LoomError on a missing token or a second sender.
    Each step (one message tried) runs inside `step()`: the daemon's heartbeat says how long it has run."""
    cfg = ctx.config.telegram
    if not cfg.chat_id:
        log.info("telegram.chat_id is 0: Telegram is off; outbox messages stay pending")
        await stop.wait()
        return
    async with _sending(ctx, bot, clock) as sender:
        while not stop.is_set():
            with step():
                wait = await sender.step()
            if wait > 0 and await clock.sleep(wait, stop):
                break
        for row_id in sender.unrecorded:
            # Stopping: once more, or the next start sends it again (the process's memory goes with it).
            with contextlib.suppress(StoreUnavailable):
                sender.record(row_id)


@contextlib.asynccontextmanager
async def _sending(ctx: Context, bot: telegram.Bot | None, clock: Clock) -> AsyncIterator[Sender]:
    """The one sender of this store (its lock, taken without waiting: LockHeld if another sends),
    with a bot that is shut down however the sending ends."""
    cfg = ctx.config.telegram
    token = load_token(cfg)
    lock = FileLock(ctx.state_dir, LOCK_NAME)
    try:
        # Inside the try: a bot that cannot be made must not keep the lock (and its fd) from the
        # next attempt, which runs in this same process.
        lock.acquire(timeout=0)
        bot = bot or make_bot(token, cfg)
        yield Sender(ctx.store, cfg, bot, clock)
    finally:
        lock.release()
        if bot is not None:
            with contextlib.suppress(Exception):
                await bot.shutdown()


async def send_due(ctx: Context, *, clock: Clock = SYSTEM, bot: telegram.Bot | None = None,
                   limit: int = 100) -> tuple[int, int]:
    """One pass of the sender (`loom tick notify`): deliver what is due now, then return
    (sent, still pending). It waits only as long as Telegram's per-chat pace asks between two
    messages (a second; stopping there sent one message a tick, and a burst of alerts took as many
    ticks), for PASS_BUDGET at most; a row whose retry must wait longer is left for the next tick.
    Raises LockHeld while the daemon's sender (or another tick) is delivering."""
    cfg = ctx.config.telegram

    def counts() -> tuple[int, int]:
        summary = outbox.summary(ctx.store)
        return summary[outbox.SENT], summary[outbox.PENDING]

    if not cfg.chat_id:
        return 0, counts()[1]
    before = counts()[0]
    async with _sending(ctx, bot, clock) as sender:
        began, never = clock.monotonic(), asyncio.Event()
        for _ in range(limit):
            if outbox.head(ctx.store) is None:
                break
            wait = await sender.step()
            if wait > rules.MIN_GAP or clock.monotonic() - began + wait > PASS_BUDGET:
                break
            if wait > 0:
                await clock.sleep(wait, never)
        if sender.unrecorded:
            # A tick ends here: the next would send the row again. Its failure says so instead.
            raise StoreUnavailable(f"outbox {list(sender.unrecorded)} sent, but the store was too busy to "
                                   "record it: it may be sent again")
    after, left = counts()
    return after - before, left


class Sender:
    def __init__(self, store: Store, cfg: TelegramConfig, bot: telegram.Bot, clock: Clock) -> None:
        self.store, self.cfg, self.bot, self.clock = store, cfg, bot, clock
        self._hold: tuple[int, float] | None = None  # (row id, monotonic time before which not to retry)
        self._last_sent: dict[int, float] = {}  # chat id → monotonic time of our last message there
        # Rows Telegram took whose delivery the store did not (busy past its timeout, full, read-only):
        # recorded at a later step, never sent again, by this sender or the next in this process.
        self._unrecorded = _UNRECORDED.setdefault(str(store.path), {})
        # A group Telegram upgraded to a supergroup answers every send with the new id: sent there
        # (for this process's life; the operator is told to set telegram.chat_id to it).
        self._moved: dict[int, int] = {}

    @property
    def unrecorded(self) -> tuple[int, ...]:
        """The rows Telegram took whose delivery is not in the store yet, by id."""
        return tuple(sorted(self._unrecorded))

    async def step(self) -> float:
        """Try the head row once if it is due; the seconds to wait before the next step."""
        row = outbox.head(self.store)
        if row is None:
            return self.cfg.poll_interval
        if row.id in self._unrecorded:
            if self._unrecorded[row.id].created == row.created:
                return self._record(row.id)
            del self._unrecorded[row.id]
        chat = row.chat_id or self.cfg.chat_id
        chat = self._moved.get(chat, chat)
        wait = max(self._retry_wait(row), self._rate_wait(chat))
        if wait > 0:
            return wait
        text, truncated = rules.truncate(row.text)
        self.store.make_durable()  # a message may carry a ledger head: what it names is on disk first
        try:
            await self.bot.initialize()  # getMe once; retried here so a start during an outage is fine
            # No parse_mode: message text (job names, log lines) is never markup. No link preview:
            # Telegram's servers would fetch every URL a log line or the agent's answer carries.
            sent = await self.bot.send_message(chat_id=chat, text=text, link_preview_options=NO_PREVIEW)
        except RetryAfter as exc:
            return self._retry_after(row, exc)
        except ChatMigrated as exc:
            # PTB's own error for that 400 (a TelegramError, not a BadRequest). Retried as a network
            # error, the row stayed at the outbox's head for good and every message behind it waited.
            self._moved[chat] = int(exc.new_chat_id)
            log.warning("telegram: chat %d is now the supergroup %d: sending there; set telegram.chat_id = %d",
                        chat, self._moved[chat], self._moved[chat])
            return 0.0
        except BadRequest as exc:
            if CHAT_GONE.search(str(exc)):
                # The chat, not the message: the operator's own waits on the fix (as every message
                # does), a reply to another chat is given up (as a Forbidden one).
                return self._failed(row, exc, permanent=chat != self._chat(), rejected=False)
            return self._failed(row, exc, permanent=row.rejections + 1 >= BAD_REQUEST_ATTEMPTS, rejected=True)
        except Forbidden as exc:
            # A reply to a chat the bot can no longer write to (removed from that group) is given
            # up: retried, it held every later alert behind it. The operator's own chat is retried,
            # as every message waits on the operator's fix there anyway.
            return self._failed(row, exc, permanent=chat != self._chat())
        except TelegramError as exc:  # network, timeout, 5xx, InvalidToken
            return self._failed(row, exc, permanent=False)
        self._last_sent[chat] = self.clock.monotonic()
        self._hold = None
        self._unrecorded[row.id] = _Delivery(row.created, {
            "message_id": sent.message_id, "chat_id": chat, "length": len(text), "truncated": truncated,
            "now": self.clock.time()})
        return self._record(row.id)

    def _chat(self) -> int:
        """The operator's chat, where a group became a supergroup the new one."""
        return self._moved.get(self.cfg.chat_id, self.cfg.chat_id)

    def record(self, row_id: int) -> None:
        """The delivery of a row Telegram took, into the store; raises what the store raised."""
        outbox.mark_sent(self.store, row_id, **self._unrecorded[row_id].record)
        del self._unrecorded[row_id]

    def _record(self, row_id: int) -> float:
        """The delivery of a row Telegram took, into the store; a store that will not take it (busy,
        full, read-only) is asked again at a later step, longer apart each time it refuses. Only a
        damaged store's error is raised: the daemon stops on it."""
        try:
            self.record(row_id)
        except StoreUnavailable as exc:
            if health.classify(exc) == health.DAMAGED:
                raise
            delivery = self._unrecorded[row_id]
            delivery.failures += 1
            log.warning("telegram: outbox %d was sent; the store did not take its record, which waits: %s",
                        row_id, exc)
            if health.classify(exc) == health.TRANSIENT:
                return RECORD_RETRY
            return backoff(delivery.failures, RECORD_RETRY, self.cfg.backoff_max)
        return 0.0

    def _retry_wait(self, row: outbox.Message) -> float:
        if self._hold and self._hold[0] == row.id:
            return self._hold[1] - self.clock.monotonic()
        # A wait stored by an earlier process is wall time. One further ahead than its kind could
        # be (a backoff, or Telegram's flood wait as kept) was stored before the clock was stepped
        # back: due now. Capping each sleep alone held the row, and every message behind it, until
        # the wall clock caught up (a restarted sender, every `loom tick notify`). A flood wait longer
        # than a backoff was due at once too, until 2026-12-08: every restart asked Telegram again.
        # Read once: from here this sender waits on the monotonic clock.
        wait = row.next_attempt - self.clock.time()
        flood = FLOOD.match(row.last_error or "")
        if wait > max(self.cfg.backoff_max, float(flood.group(1)) if flood else 0.0):
            wait = 0.0
        if wait > 0:
            self._hold = (row.id, self.clock.monotonic() + wait)
        return wait

    def _rate_wait(self, chat: int) -> float:
        if chat in self._last_sent:
            return rules.rate_wait(self._last_sent[chat], self.clock.monotonic())
        return rules.rate_wait(outbox.last_sent_at(self.store, chat), self.clock.time())

    def _retry_after(self, row: outbox.Message, exc: RetryAfter) -> float:
        delay = min(retry_after_seconds(exc), MAX_FLOOD_WAIT)
        self._hold = (row.id, self.clock.monotonic() + delay)
        log.warning("telegram: flood control on outbox %d; retrying in %.1fs as Telegram asks", row.id, delay)
        outbox.defer(self.store, row.id, until=self.clock.time() + delay,
                     error=FLOOD_ERROR.format(seconds=delay, error=describe(exc)),
                     event="telegram_retry_after", event_detail={"retry_after": delay})
        return delay

    def _failed(self, row: outbox.Message, exc: TelegramError, *, permanent: bool, rejected: bool = False) -> float:
        delay = backoff(row.attempts + 1, self.cfg.backoff_base, self.cfg.backoff_max)
        error = describe(exc)
        self._hold = (row.id, self.clock.monotonic() + delay)
        event: EventKind | None
        if permanent:
            event = "telegram_failed"
            log.error("telegram: outbox %d refused by Telegram, giving it up: %s", row.id, error)
        else:
            # One event per row, not per retry: an hour-long outage is one line in the ledger.
            event = "telegram_error" if row.attempts == 0 else None
            log.warning("telegram: outbox %d not delivered (%s); retry in %.1fs", row.id, error, delay)
        outbox.defer(self.store, row.id, until=self.clock.time() + delay, error=error, fail=permanent,
                     rejected=rejected, event=event,
                     event_detail={"error": type(exc).__name__, "attempts": row.attempts + 1})
        return 0.0 if permanent else delay
