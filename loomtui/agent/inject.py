"""The one function that types into the agent's pane; callers reach it through the actions module.

Under inject.lock: check the pane, hand the line to the driver (the tmux driver pastes it through
a named buffer and presses Enter separately; the stream-json driver gives it to the pump, which
writes it between turns or queues it), release. Control characters are stripped and newlines
become spaces, so a message is always exactly one line. Each injection is a ledger event with its
source, length and digest, never its text (operator messages are private), and with the pump,
whether it was delivered or queued.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loomtui.agent import drivers, launches
from loomtui.agent.ports import NOT_LIVE, AgentDriver
from loomtui.agent.stream_driver import origin_of
from loomtui.agent.tmux import TmuxError
from loomtui.context import Context
from loomtui.errors import AgentNotReading, LockHeld, LoomError, StoreError
from loomtui.hooks import settings as hook_settings
from loomtui.hooks.events import typed_digest
from loomtui.pump.facts import Delivery
from loomtui.states import EventKind
from loomtui.store import ledger, locks
from loomtui.text import digest, sanitize

MAX_LENGTH = 100_000
SLASH_COMMAND = re.compile(r"/[A-Za-z0-9_:-]+(?:\s|$)")  # a command's name, then a space or the end

log = logging.getLogger("loom.inject")


@dataclass(frozen=True)
class InjectResult:
    ok: bool
    length: int
    digest: str
    error: str = ""
    event_id: int = 0
    refused: str = ""   # why Loom did not try at all (a hold): not a failure of the pane
    delivery: str = ""  # with the pump: delivered (reached the CLI) or queued (behind a running turn)
    position: int | None = None
    not_reading: bool = False  # refused because the agent's CLI no longer reads its input (AgentNotReading)
    unrecorded: str = ""  # typed, but the store would not take its ledger event (why): never to be typed again


def inject(
    ctx: Context,
    text: str,
    *,
    source: str,
    kind: EventKind = "inject",
    detail: dict[str, Any] | None = None,
    lock_timeout: float = 30.0,
    driver: AgentDriver | None = None,
    origin: str | None = None,
    ref: str = "",
) -> InjectResult:
    """`origin` is whose line it is for the pump (operator, telegram, canary, sentinel; by default
    told from `kind` and `source`); `ref` is the asker's own id. The tmux driver ignores both."""
    clean = sanitize(text)
    if not clean.strip():
        raise LoomError("nothing to inject: the text is empty once control characters are removed")
    if len(clean) > MAX_LENGTH:
        raise LoomError(f"text too long to inject: {len(clean)} characters (limit {MAX_LENGTH})")
    info = {"length": len(clean), "digest": digest(clean), **(detail or {})}
    witnessed_by = typed_digest(clean)  # what the dispatch witness matches the CLI's prompt with
    if witnessed_by != info["digest"]:
        info["said"] = witnessed_by
    if SLASH_COMMAND.match(clean.lstrip()):
        # A slash command (/compact, /clear, /model) is the CLI's own: it submits no prompt, and the
        # dispatch witness would report every one missing. Only that it is one is kept, not which. A
        # line that starts with a path (/etc/hosts is wrong) is text, and owed its prompt.
        info["slash"] = True
    driver = driver or drivers.of(ctx)
    # The agent as it is now: if a relaunch replaces it while we wait for inject.lock, the text
    # is not typed into the new one (it was meant for this one, and that one may be booting).
    expect = driver.pane_pid()
    if expect is None:
        expect = NOT_LIVE
    who = origin or origin_of(kind, source)
    typed = _typed(ctx, lambda: driver.type_line(clean, expect, origin=who, ref=ref), kind, source, info, lock_timeout)
    if not typed.error and hook_settings.wanted(ctx.config.agent):
        launches.ring(ctx.agent_dir, launches.TYPED)  # the hooks loop starts this line's dispatch timeout
    delivery = typed.delivery
    return InjectResult(not typed.error, len(clean), info["digest"], typed.error, typed.event_id,
                        delivery=delivery.state if delivery else "", position=delivery.position if delivery else None,
                        not_reading=typed.not_reading, unrecorded=typed.unrecorded)


@dataclass(frozen=True)
class _Typed:
    error: str                  # "" once the driver took the line or the keys
    event_id: int               # its ledger event; 0 when the store would not take it
    delivery: Delivery | None
    not_reading: bool           # the agent's CLI no longer reads its input
    unrecorded: str = ""        # typed, its ledger event refused by the store: why


def _typed(ctx: Context, typing: Callable[[], Delivery | None], kind: EventKind, source: str, detail: dict[str, Any],
           lock_timeout: float) -> _Typed:
    """Run `typing` under inject.lock and record it, ok or not. A line typed stays typed when the
    store then refuses its record (locked past its busy timeout): raised, it would read as a line
    never sent, and the caller's retry (the sentinel's next pass, an operator) would type it twice."""
    error = ""
    delivery = None
    not_reading = False
    try:
        with locks.hold(ctx.agent_dir, locks.INJECT, timeout=lock_timeout):
            delivery = typing()
    except (TmuxError, LockHeld) as exc:
        error = str(exc)
        not_reading = isinstance(exc, AgentNotReading)
    try:
        event = ledger.append(
            ctx.store, kind, source=source, cause=None if not error else "inject_failed",
            detail={**detail, "ok": not error, **({"error": error} if error else {}),
                    **(delivery.as_detail() if delivery else {})},
        )
    except StoreError as exc:
        if error:
            raise  # nothing was typed: the store's fault is the one to report
        log.warning("%s typed, but the ledger could not record it: %s", kind, exc)
        return _Typed(error, 0, delivery, not_reading, unrecorded=str(exc))
    return _Typed(error, event.id, delivery, not_reading)


def press(
    ctx: Context,
    keys: list[str],
    *,
    source: str,
    kind: EventKind = "keys",
    detail: dict[str, Any] | None = None,
    lock_timeout: float = 30.0,
    driver: AgentDriver | None = None,
) -> InjectResult:
    """Named keys (e.g. Enter to dismiss a dialog) through the same lock and ledger as text."""
    driver = driver or drivers.of(ctx)
    expect = driver.pane_pid()
    if expect is None:
        expect = NOT_LIVE
    typed = _typed(ctx, lambda: driver.send_keys(keys, expect), kind, source, {"keys": keys, **(detail or {})},
                   lock_timeout)
    return InjectResult(not typed.error, 0, "", typed.error, typed.event_id, unrecorded=typed.unrecorded)
