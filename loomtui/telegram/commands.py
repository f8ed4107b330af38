"""Command mode: long-polls the bot for operator commands and answers them through the outbox.

Only for setups where the agent does not hold the bot itself: two pollers on one token make
Telegram answer 409 Conflict to one of them, and the loser goes deaf (DESIGN failure 6). A 409
is therefore recorded, shown by `loom status`, told to the operator, and backed off from.

Each update's offset is committed before its command runs: a crash mid-command loses that
command (the operator can send it again) instead of re-running a recycle on every restart.

Who commands: only `telegram.chat_id` (or the supergroup Telegram's own service message says that
group became), and in it only `telegram.allowed_users` (by default the
private chat's own user; a group must list them), and only commands addressed to no bot or to
this one (`/status@OUR_BOT`, the name getMe gives). Anything else from that chat is recorded as
`telegram_refused` (user id and reason, never the text) and does nothing.

With `telegram.bridge` this loop is also the bridge's poller, and so the bot's only one: any
other text from the operator's chat goes to the agent through the one injection path (the same
offset rule: a crash mid-relay loses that message, never types it twice), and bridge.py sends
the answer back. Commands work beside it. The bridge talks to the first agent of the config only.

With several agents, `/status` has a line for each, and the commands that act on one agent take
its name first (`/canary beta`, `/recycle beta fresh`, `/hold beta 30m REASON`, `/release beta`);
with one agent the name may be left out, as before. Each runs with that agent's own Context.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import telegram
from telegram.error import Conflict, RetryAfter, TelegramError

from loomtui import redact
from loomtui.actors import Actor
from loomtui.agent.hold_rules import parse_request
from loomtui.timing import Instant, backoff
from loomtui.config import TelegramConfig
from loomtui.context import Context
from loomtui.errors import LoomError, StoreUnavailable
from loomtui.store import health, ledger, outbox
from loomtui.store import telegram_state as state
from loomtui.store.db import Store
from loomtui.telegram import rules
from loomtui.telegram.bot import describe, make_bot, retry_after_seconds
from loomtui.telegram.clock import SYSTEM, Clock, command_age
from loomtui.telegram.token import load_token
from loomtui.text import printable

if TYPE_CHECKING:
    from loomtui.report.status import Status

log = logging.getLogger("loomtui.telegram.commands")

HELP = "Loom commands: /status, /canary, /recycle resume|fresh, /queue, /hold [30m] REASON, /release"
AGENTS_HELP = ("Loom commands: /status [NAME], /canary NAME, /recycle NAME resume|fresh, /queue, "
               "/hold NAME [30m] REASON, /release NAME")
BRIDGE_HELP = "; any other text goes to the agent, and its answer comes back here"
AGENTS_BRIDGE_HELP = "; any other text goes to agent {first}, and its answer comes back here"
COMMANDS = ("status", "canary", "recycle", "queue", "hold", "release")
WAITING = ("canary",)  # answered while the polling goes on: it waits for the agent
MODES = ("resume", "fresh")
USAGE = {"canary": "", "recycle": "resume|fresh", "hold": "[30m] REASON", "release": ""}
MAX_COMMAND_AGE = 600.0  # a /recycle typed before an outage is not acted on when the outage ends
IGNORED_EVERY = 3600.0  # a stranger's chat in the ledger at most once an hour (its messages counted between)
# A reply the store would not take (held busy past its timeout) is queued again, this many times in all:
# the command it answers has run, and its offset is saved, so it is never read again to answer.
REPLY_ATTEMPTS = 6
# The operator hears of a 409 Conflict once in this long, however often it comes and goes (two
# pollers on one token take turns: each success cleared it, and each 409 after was told again).
CONFLICT_RETELL = 6 * 3600.0
CONFLICT_MESSAGE = (
    "Loom: another process is polling this bot's token (Telegram answers 409 Conflict), so Loom "
    "receives no commands and that other poller may miss messages. Loom keeps backing off; stop the "
    "other poller, or set telegram.commands = false if the agent owns this bot."
)

T = TypeVar("T")
# The user id of the sender whose command is being answered: set by Poller.handle, read by
# OperatorActions for the actor it records (asyncio.to_thread carries it into the worker thread).
SENDER: contextvars.ContextVar[int | None] = contextvars.ContextVar("loom_telegram_sender", default=None)


class Actions(Protocol):
    agents: tuple[str, ...]  # the agents' names, in the config's order

    def status(self, agent: str | None) -> str: ...
    def canary(self, agent: str) -> str: ...
    def recycle(self, agent: str, mode: str) -> str: ...
    def queue(self) -> str: ...
    def hold(self, agent: str, reason: str, duration: float | None) -> str: ...
    def release(self, agent: str) -> str: ...
    def relay(self, text: str, ref: str) -> str: ...
    def interrupt(self) -> None: ...  # the poller stops: a probe still waiting for its ack ends now
    def close(self) -> None: ...


class OperatorActions:
    """What the command mode may do: the operator's actions, through the one actions module, each
    with the Context of the agent it names (`ctx.for_agent`); the bridge's relay goes to the first."""

    def __init__(self, ctx: Context, source: str = "telegram") -> None:
        self.ctx = ctx
        self.source = source
        self.agents = tuple(ctx.config.agent_names)
        self._contexts: dict[str, Context] = {}
        self._lock = threading.Lock()  # actions run on worker threads, several at once
        self._stopping = threading.Event()  # set by interrupt(): a /canary's wait for its ack ends

    def of(self, agent: str) -> Context:
        """The agent's Context, made once (KeyError for a name the config does not have)."""
        with self._lock:
            if agent not in self._contexts:
                self._contexts[agent] = self.ctx if agent == self.ctx.agent else self.ctx.for_agent(agent)
            return self._contexts[agent]

    def interrupt(self) -> None:
        self._stopping.set()

    def close(self) -> None:
        with self._lock:
            for ctx in self._contexts.values():
                if ctx is not self.ctx:
                    ctx.close()
            self._contexts.clear()

    def actor(self) -> Actor:
        """Who asked: Telegram and the sender's user id."""
        return Actor(self.source, user=SENDER.get())

    def _named(self, agent: str, reply: str) -> str:
        # An action's outcome may quote a hold's reason: one line, shown as the chat may show it.
        return printable(reply if len(self.agents) == 1 else f"{agent}: {reply}")

    def status(self, agent: str | None = None) -> str:
        from loomtui.report import status as status_mod

        if agent is None and len(self.agents) > 1:
            return format_agents(status_mod.gather_all(self.ctx, events=0))
        named = agent if len(self.agents) > 1 else None
        return format_status(status_mod.gather(self.of(agent or self.agents[0]), events=0), agent=named)

    def canary(self, agent: str) -> str:
        from loomtui import actions

        probe = actions.canary_now(self.of(agent), source=self.source, stop=self._stopping)
        return self._named(agent, "canary " + probe.describe())

    def recycle(self, agent: str, mode: str) -> str:
        from loomtui import actions

        result = actions.recycle(self.of(agent), mode, source=self.source, reason="asked over Telegram",
                                 actor=self.actor())
        return self._named(agent, result.describe())

    def queue(self) -> str:
        from loomtui.sentinel import queue as sentinel_queue

        return queue_summary(sentinel_queue.open_items(self.ctx.store), with_agent=len(self.agents) > 1)

    def hold(self, agent: str, reason: str, duration: float | None) -> str:
        from loomtui import actions

        change = actions.hold(self.of(agent), reason, duration, source=self.source, actor=self.actor())
        return self._named(agent, change.describe())

    def release(self, agent: str) -> str:
        from loomtui import actions

        return self._named(agent, actions.release(self.of(agent), source=self.source, actor=self.actor()).describe())

    def relay(self, text: str, ref: str) -> str:
        """The operator's words to the first agent (the bridge's, see bridge.py): "" once its pump
        has them, else why not."""
        from loomtui import actions

        # The ledger gets inject's length and digest and this ref; the text goes to the agent only.
        result = actions.inject(self.of(self.agents[0]), text, source=self.source, detail={"ref": ref}, ref=ref,
                                actor=self.actor())
        return "" if result.ok else f"not passed to the agent: {result.error}"


def queue_summary(items: list[Any], limit: int = 10, *, with_agent: bool = False) -> str:
    if not items:
        return "queue: nothing open"
    lines = [f"queue: {len(items)} open"]
    for item in items[:limit]:
        whose = f" ({item.agent})" if with_agent else ""
        lines.append(printable(f"#{item.id} {item.job}{whose} [{item.state}] x{item.count}"))
    if len(items) > limit:
        lines.append(f"… and {len(items) - limit} more")
    return "\n".join(lines)


def format_status(status: Status, agent: str | None = None) -> str:
    """One agent's status in full (with the host's lines); `agent` names it in the title."""
    from loomtui.durations import format_duration

    sup, last, look = status.supervisor, status.canary_settled, status.agent
    describe_agent = look.describe() if look else "not looked at"
    if status.hold:
        from loomtui.agent import hold_rules

        hold = status.hold
        describe_agent = f"HELD: {printable(hold_rules.describe(hold, status.moment))} (/release" + \
            (" or /recycle)" if hold.by == "ceiling" else ")") + f"; {describe_agent}"
    lines = [
        "Loom status" + (f" of agent {agent}" if agent else ""),
        f"agent: {describe_agent}",
        f"pinned session: {status.pinned_session or '(none)'}",
        f"canary: {last.describe() if last else 'no probe yet'}",
        f"queue: {status.queue.get('open', 0)} open, {status.queue.get('claimed', 0)} claimed",
        f"supervisor: {'no heartbeat' if sup is None else 'heartbeat ' + format_duration(sup.age) + ' ago'}",
        f"ledger: {status.ledger_events} events",
        f"outbox: {status.outbox['pending']} pending, {status.outbox['failed']} failed",
    ]
    if status.conflict:
        lines.append(f"telegram: {printable(status.conflict['note'])}")
    return "\n".join(lines)


def agent_line(status: Status) -> str:
    """One agent in one short line: its name, state, last canary and hold."""
    from loomtui.agent import hold_rules
    from loomtui.durations import format_duration

    last = status.canary_settled
    canary = f"canary {last.result} {format_duration(max(last.age, 0))} ago" if last else "no canary yet"
    if status.hold:
        hold = printable(hold_rules.describe(status.hold, status.moment))[:120]
    else:
        hold = "not held"
    return f"{status.name}: {status.state}; {canary}; {hold}"


def format_agents(statuses: list[Status]) -> str:
    """Every agent at a glance, a line each, then what the host shares (from the first's status)."""
    from loomtui.durations import format_duration

    host = statuses[0]
    sup = host.supervisor
    queue = {k: sum(s.queue.get(k, 0) for s in statuses) for k in ("open", "claimed")}
    lines = [f"Loom status: {len(statuses)} agents", *(agent_line(s) for s in statuses),
             f"queue: {queue['open']} open, {queue['claimed']} claimed",
             f"supervisor: {'no heartbeat' if sup is None else 'heartbeat ' + format_duration(sup.age) + ' ago'}",
             f"ledger: {host.ledger_events} events",
             f"outbox: {host.outbox['pending']} pending, {host.outbox['failed']} failed"]
    if host.conflict:
        lines.append(f"telegram: {printable(host.conflict['note'])}")
    lines.append("/status NAME for one agent in full")
    return "\n".join(lines)


async def run_commands(ctx: Context, actions: Actions, stop: asyncio.Event, *, clock: Clock = SYSTEM,
                       bot: telegram.Bot | None = None,
                       step: Callable[[], contextlib.AbstractContextManager[object]] = contextlib.nullcontext) -> None:
    """Poll and answer operator commands (and relay the operator's messages, with the bridge on)
    until `stop` is set; only waits for `stop` when neither is on. Each poll runs inside `step()`
    (a command's answer goes on beside the polling, outside it): the daemon's heartbeat says how
    long it has run."""
    cfg = ctx.config.telegram
    if not (cfg.commands or cfg.bridge):
        await stop.wait()
        return
    token = load_token(cfg)
    bot = bot or make_bot(token, cfg)
    poller = Poller(ctx.store, cfg, bot, actions, clock)
    try:
        while not stop.is_set():
            with step():
                wait = await poller.step(stop)
            if wait > 0 and await clock.sleep(wait, stop):
                break
    finally:
        actions.interrupt()  # a /canary still waiting for its ack answers now, as it stands
        await poller.drain()
        actions.close()
        with contextlib.suppress(Exception):
            await bot.shutdown()


class Poller:
    def __init__(self, store: Store, cfg: TelegramConfig, bot: telegram.Bot, actions: Actions, clock: Clock,
                 *, username: str | None = None):
        """`username`: the bot's own, when known without asking (tests); else getMe's, at the first step."""
        self.store, self.cfg, self.bot, self.actions, self.clock = store, cfg, bot, actions, clock
        self.failures = 0
        self.username = username
        self.senders = cfg.senders
        self.started = clock.now()  # a later step of the wall clock is measured from here
        # A stranger's chat, or a refused sender in the operator's: (its last record, monotonic; unrecorded since).
        self._ignored: dict[object, tuple[float, int]] = {}
        self._background: set[asyncio.Task[None]] = set()  # commands answered while the polling goes on

    async def step(self, stop: asyncio.Event) -> float:
        try:
            await self.bot.initialize()
            # getMe's answer, which initialize() fetched: a `/cmd@name` for any other name is not ours.
            self.username = self.bot.username
            updates = await _unless_stopped(
                self.bot.get_updates(offset=state.offset(self.store), timeout=max(1, int(self.cfg.long_poll)),
                                     allowed_updates=["message"]),
                stop,
            )
        except Conflict:
            self.failures += 1
            self._record_conflict()
            return self._backoff()
        except RetryAfter as exc:  # flood control: Telegram says how long (the backoff did not ask)
            self.failures += 1
            wait = max(retry_after_seconds(exc), self._backoff())
            log.warning("telegram: getUpdates refused (flood control); retry in %.1fs", wait)
            return wait
        except TelegramError as exc:
            self.failures += 1
            log.warning("telegram: getUpdates failed (%s); retry in %.1fs", describe(exc), self._backoff())
            return self._backoff()
        if updates is None:
            return 0.0
        heard = self.clock.now()  # Telegram answered: what is sent from now on comes in the next batch
        self.failures = 0
        self._clear_conflict()
        for update in updates:
            await self.handle(update)
        self.listened = heard
        return 0.0

    # When the last getUpdates before this batch returned (None: none yet in this process), and
    # the clocks when this poller first looked (a wall-clock step is measured from there).
    listened: Instant | None = None

    def age_of(self, msg: telegram.Message) -> float:
        """The command's age, bounded by the monotonic time since Loom last heard from Telegram."""
        return command_age(msg.date.timestamp(), self.started, self.listened, self.clock.now())

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
            # One message in each CONFLICT_RETELL from the last one told (a fixed bucket told two
            # conflicts minutes apart on either side of its edge); a clock behind the last telling
            # (stepped back) tells again rather than keep quiet until it catches up.
            told = state.conflict_told_in(db)
            if told is None or not 0 <= now - told < CONFLICT_RETELL:
                outbox.enqueue(db, CONFLICT_MESSAGE, dedupe_key=f"telegram_conflict:{now!r}", now=now)
                state.set_conflict_told_in(db, now)

    def _clear_conflict(self) -> None:
        if state.conflict(self.store) is None:
            return
        with self.store.write() as db:
            if state.clear_conflict_in(db):
                ledger.append_in(db, "telegram_conflict_cleared", source="telegram", ts=self.clock.time())

    def _tell_ignored(self, chat_id: object) -> int | None:
        """Whether a stranger's message goes in the ledger: the first from a chat (or, in the
        operator's, from a sender refused for one reason), then one an hour (a stranger who knows the
        bot's name added an event per message: the ledger grew without bound). It does with the
        number from there that went unrecorded since its last (0: none); None when this one is only
        counted."""
        now = self.clock.monotonic()
        key = chat_id if chat_id is not None else 0
        last, skipped = self._ignored.get(key, (None, 0))
        if last is not None and now - last < IGNORED_EVERY:
            self._ignored[key] = (last, skipped + 1)
            return None
        self._ignored[key] = (now, 0)
        return skipped

    def migration(self, msg: telegram.Message) -> int | None:
        """The supergroup the operator's group became, if this is Telegram's service message that
        says so: `migrate_to_chat_id` in the configured group, or `migrate_from_chat_id` naming it
        in the new one. Telegram's word over the bot's own connection: nobody else can write it."""
        if msg.chat.id == self.cfg.chat_id and msg.migrate_to_chat_id:
            return int(msg.migrate_to_chat_id)
        if msg.migrate_from_chat_id and msg.migrate_from_chat_id == self.cfg.chat_id:
            return int(msg.chat.id)
        return None

    def operator_chats(self) -> tuple[int, ...]:
        """The configured chat, and the supergroup it became (telegram_state.migrated_to)."""
        moved = state.migrated_to(self.store, self.cfg.chat_id)
        return (self.cfg.chat_id,) if moved is None else (self.cfg.chat_id, moved)

    async def handle(self, update: telegram.Update) -> None:
        msg = update.message
        chat_id = msg.chat.id if msg else None
        moved = self.migration(msg) if msg is not None else None
        if moved is not None:
            # The group became a supergroup: its commands come from the new id from now on (the
            # sender learns it from Telegram's error). Recorded once, and the operator told where
            # to fix the config.
            with self.store.write() as db:
                state.set_offset_in(db, update.update_id + 1)
                if state.migrated_to_in(db, self.cfg.chat_id) != moved:
                    state.set_migrated_in(db, self.cfg.chat_id, moved)
                    ledger.append_in(db, "telegram_chat_migrated", source="telegram",
                                     detail={"from": self.cfg.chat_id, "to": moved, "update_id": update.update_id})
                    outbox.enqueue(db, f"Loom: this group became a supergroup ({moved}): Loom takes its commands "
                                       f"here; set telegram.chat_id = {moved} in the config.", chat_id=moved,
                                   dedupe_key=f"telegram_migrated:{self.cfg.chat_id}:{moved}")
            return
        if msg is None or chat_id not in self.operator_chats():
            told = self._tell_ignored(chat_id) if msg is not None else None
            with self.store.write() as db:
                state.set_offset_in(db, update.update_id + 1)
                if told is not None:
                    # The chat id says who tried; their text is theirs and stays out of the ledger.
                    ledger.append_in(db, "telegram_ignored", source="telegram",
                                     detail={"chat_id": chat_id, "update_id": update.update_id,
                                             **({"ignored_since": told} if told else {})})
            return
        # A command is typed, not forwarded: a forwarded `/recycle fresh` (someone else's words, passed
        # on) is plain text, relayed with the bridge on and never run.
        parsed = None if msg.forward_origin is not None else rules.parse_command(msg.text)
        if parsed is None and not self.cfg.bridge and chat_id < 0:
            # A group's chatter is not addressed to Loom: no help reply to each line, nothing recorded.
            with self.store.write() as db:
                state.set_offset_in(db, update.update_id + 1)
            return
        if self.refused(update, msg):
            return
        SENDER.set(msg.from_user.id if msg.from_user is not None else None)  # the actor of what it runs
        if parsed is None and self.cfg.bridge:
            await self.relay(update, msg)
            return
        name = parsed[0] if parsed and parsed[0] in COMMANDS else "help"
        unknown = parsed[0] if parsed and name == "help" and parsed[0] not in ("help", "start") else ""
        with self.store.write() as db:
            state.set_offset_in(db, update.update_id + 1)
            ledger.append_in(db, "telegram_command", source="telegram",
                             detail={"command": name, "update_id": update.update_id})
        age = self.age_of(msg)
        reply = self._reply(name, parsed[1] if parsed else [], age, chat_id,
                            f"telegram_reply:{chat_id}:{msg.message_id}:{update.update_id}", unknown)
        if name in WAITING:
            # It waits for the agent (a probe's ack: up to canary.ack_timeout); the operator's next
            # command, /recycle or /hold after a /canary that finds the agent deaf, must not wait for it.
            task = asyncio.create_task(reply)
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        else:
            await reply

    async def _reply(self, name: str, args: list[str], age: float, chat_id: int, dedupe_key: str,
                     unknown: str = "") -> None:
        reply = await self.answer(name, args, age)
        if unknown:
            # With the bridge on, the help alone read as if the line had gone to the agent.
            reply = (f"/{unknown} is not a Loom command" + ("; it was not passed to the agent (send it "
                     "without the leading /)" if self.cfg.bridge else "") + ". " + reply)
        await self._queue_reply(reply, chat_id, dedupe_key)

    async def _queue_reply(self, text: str, chat_id: int, dedupe_key: str) -> None:
        """A reply into the outbox, asked again while the store is busy: raised, the error restarted
        the poller past the command's saved offset, and the operator never learnt whether the
        /recycle or /hold ran (a /canary's, in a task of its own, was not even logged). Its dedupe
        key keeps a retry from queueing it twice."""
        for attempt in range(1, REPLY_ATTEMPTS + 1):
            try:
                outbox.enqueue(self.store, redact.scrub(text), chat_id=chat_id, dedupe_key=dedupe_key)
                return
            except StoreUnavailable as exc:
                if health.classify(exc) == health.DAMAGED:
                    raise
                if attempt == REPLY_ATTEMPTS:
                    log.error("telegram: a reply to chat %d could not be queued (%s): dropped", chat_id,
                              type(exc).__name__)
                    return
                log.warning("telegram: a reply waits for the store (%s): trying again", exc)
                await asyncio.sleep(backoff(attempt, 1.0, 10.0))

    async def drain(self) -> None:
        """Wait for the commands still being answered (their replies in the outbox)."""
        while self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    def refused(self, update: telegram.Update, msg: telegram.Message) -> bool:
        """Whether this message is one Loom does not act on for who sent it or whom it addresses;
        if so it is recorded (who and why, never its text) and its offset committed."""
        sender = msg.from_user.id if msg.from_user is not None else None
        why = rules.refusal(sender, self.senders, msg.text, self.username)
        if why is None:
            return False
        # One event an hour per sender and reason, as a stranger's chat: a member of the operator's
        # group the bridge does not take added an event (and a log line) per message.
        told = self._tell_ignored(("refused", msg.chat.id, sender, why))
        if told is not None:
            log.info("telegram: update %d in the operator's chat refused (%s, user %s)", update.update_id, why, sender)
        with self.store.write() as db:
            state.set_offset_in(db, update.update_id + 1)
            if told is not None:
                ledger.append_in(db, "telegram_refused", source="telegram",
                                 detail={"chat_id": msg.chat.id, "user_id": sender, "update_id": update.update_id,
                                         "reason": why, **({"refused_since": told} if told else {})})
        return True

    async def relay(self, update: telegram.Update, msg: telegram.Message) -> None:
        with self.store.write() as db:
            state.set_offset_in(db, update.update_id + 1)
        age = self.age_of(msg)
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
            await self._queue_reply(reply, msg.chat.id,
                                    f"telegram_reply:{msg.chat.id}:{msg.message_id}:{update.update_id}")

    def help(self) -> str:
        names = self.actions.agents
        if len(names) == 1:
            return HELP + (BRIDGE_HELP if self.cfg.bridge else "")
        return AGENTS_HELP + (AGENTS_BRIDGE_HELP.format(first=names[0]) if self.cfg.bridge else "")

    def call_for(self, name: str, args: list[str]) -> Callable[[], str] | str:
        """What `/name args` runs, or the answer that says why nothing runs."""
        names = self.actions.agents
        if name == "queue":
            return self.actions.queue
        if name == "status":
            if not args:
                return lambda: self.actions.status(None)
            agent, rest = rules.pick_agent(args, names)
            if agent is None or rest:
                return rules.which_agent(name, names, unknown=True)
            return lambda: self.actions.status(agent)
        agent, rest = rules.pick_agent(args, names)
        usage = USAGE[name]
        arity = 1 if name == "recycle" else None if name == "hold" else 0
        if agent is None:
            unknown = arity is not None and rules.names_an_unknown_agent(rest, arity)
            return rules.which_agent(name, names, usage, unknown=unknown)
        if name == "recycle":
            if len(rest) == 1 and rest[0] in MODES:
                return lambda: self.actions.recycle(agent, rest[0])
            if len(rest) == 2 and rest[1] in MODES:
                return rules.which_agent(name, names, unknown=True)
            return f"usage: /recycle {'' if len(names) == 1 else 'NAME '}resume|fresh"
        if name == "hold":
            held = parse_request(rest)
            if held is None:
                return (f"usage: /hold {'' if len(names) == 1 else 'NAME '}[30m] REASON "
                        "(a reason is required; the duration is optional)")
            return lambda: self.actions.hold(agent, *held)
        if rest:
            return rules.which_agent(name, names, unknown=True)
        return (lambda: self.actions.canary(agent)) if name == "canary" else (lambda: self.actions.release(agent))

    async def answer(self, name: str, args: list[str], age: float) -> str:
        if name == "help":
            return self.help()
        if age > MAX_COMMAND_AGE and name in ("canary", "recycle", "hold", "release"):
            return f"/{name} not run: it was sent {int(age)}s ago, while Loom was not listening; send it again"
        call = self.call_for(name, args)
        if isinstance(call, str):
            return call
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
