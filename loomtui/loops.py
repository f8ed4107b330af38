"""The loops `loom supervise` runs, built from the config."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from .context import Context
from .supervise import Service, TickLoop
from .watchdog import Watchdog

log = logging.getLogger("loom.loops")


def watchdog_tick(ctx: Context) -> Callable[[], object]:
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


def tick_loops(ctx: Context) -> list[TickLoop]:
    w = ctx.config.watchdog
    return [TickLoop("watchdog", min(w.exit_check, w.interval), watchdog_tick)]


def services(ctx: Context) -> list[Service]:
    return []
