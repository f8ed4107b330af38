"""The loops `loom supervise` runs, built from the config."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

from loomtui.agent.watchdog import Watchdog
from loomtui.canary.loop import CanaryLoop
from loomtui.context import Context
from loomtui.daemon.supervise import Service, TickLoop

log = logging.getLogger("loom.loops")


def watchdog_tick(ctx: Context, halt: threading.Event) -> Callable[[], object]:
    """Every `exit_check` a cheap dead-pane look; every `interval` the full watchdog tick."""
    watchdog = Watchdog(ctx)
    interval = ctx.config.watchdog.interval
    last_full: list[float] = []

    def step() -> object:
        now = time.monotonic()
        if not last_full or now - last_full[0] >= interval:
            last_full[:] = [now]
            report = watchdog.tick()
        else:
            report = watchdog.fast_tick()
        for line in report.results if report else ():
            log.info("watchdog: %s", line)
        return report

    return step


def canary_tick(ctx: Context, halt: threading.Event) -> Callable[[], object]:
    loop = CanaryLoop(ctx, halt)

    def step() -> object:
        line = loop.tick()
        if line:
            log.info("canary: %s", line)
        return line

    return step


def sentinel_tick(ctx: Context, halt: threading.Event) -> Callable[[], object]:
    from loomtui.sentinel.tick import sentinel_tick as tick

    def step() -> object:
        report = tick(ctx)
        line = report.describe()
        if line:
            log.info("sentinel: %s", line)
        return report

    return step


def tick_loops(ctx: Context) -> list[TickLoop]:
    w, c = ctx.config.watchdog, ctx.config.canary
    return [
        TickLoop("watchdog", min(w.exit_check, w.interval), watchdog_tick),
        TickLoop("canary", min(1.0, c.ack_timeout / 4), canary_tick),
        TickLoop("sentinel", ctx.config.sentinel.interval, sentinel_tick),
    ]


async def _sender(ctx: Context, stop: asyncio.Event) -> None:
    from loomtui.telegram.sender import run_sender

    await run_sender(ctx, stop)


async def _commands(ctx: Context, stop: asyncio.Event) -> None:
    from loomtui.telegram.commands import OperatorActions, run_commands

    await run_commands(ctx, OperatorActions(ctx), stop)


def services(ctx: Context) -> list[Service]:
    """Telegram runs only when a chat is configured; Loom never polls a token the agent holds."""
    out = []
    if ctx.config.telegram.chat_id:
        out.append(Service("telegram_sender", _sender))
        if ctx.config.telegram.commands:
            out.append(Service("telegram_commands", _commands))
    return out
