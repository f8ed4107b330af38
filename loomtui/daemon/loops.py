"""The loops `loom supervise` runs, built from the config."""

from __future__ import annotations

import asyncio
import logging
import os
import select
import threading
import time
from collections.abc import Callable
from pathlib import Path

from loomtui.agent import launches, proctree
from loomtui.agent.driver import TmuxDriver, make_driver
from loomtui.agent.tmux import TmuxError
from loomtui.agent.watchdog import Watchdog
from loomtui.canary.loop import CanaryLoop
from loomtui.context import Context
from loomtui.daemon.supervise import Doorbell, Service, TickLoop

log = logging.getLogger("loom.loops")


def watchdog_tick(ctx: Context, halt: threading.Event) -> Callable[[], object]:
    """Every `exit_check` (or at once when tmux's pane-died hook rings) a cheap dead-pane look;
    every `interval` the full watchdog tick."""
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


def signal_watch(bells: dict[str, Doorbell]) -> Callable[[Context, threading.Event], Callable[[], object]]:
    """A tick that watches the signals DIRECTORY until the daemon stops (a watched file is lost
    to an atomic rename) and rings the loop each signal file is meant for."""

    def make(ctx: Context, halt: threading.Event) -> Callable[[], object]:
        directory = launches.signals_dir(ctx.state_dir)

        def step() -> object:
            import watchfiles  # the daemon's alone: no other `loom` command pays for it

            directory.mkdir(mode=0o700, exist_ok=True)
            watching = False
            for changes in watchfiles.watch(directory, stop_event=halt, debounce=10, step=50, rust_timeout=1000,
                                            yield_on_timeout=True, raise_interrupt=False):
                if not watching:
                    # The first yield comes once the watch is in place: what happened before it
                    # was never seen, so every loop takes one look now.
                    watching = True
                    for bell in bells.values():
                        bell.ring()
                for name in {Path(path).name for _, path in changes}:
                    bell = bells.get(name)
                    if bell is not None:
                        bell.ring()
            return None

        return step

    return make


def exit_watch(bell: Doorbell) -> Callable[[Context, threading.Event], Callable[[], object]]:
    """The kernel's own word that the pane's process exited (a Linux pidfd turns readable).

    tmux's pane-died hook is not enough alone: tmux 3.3a skips it whenever it loses the exit
    status (about half of the kill -9s here). A pidfd needs no polling; the pane process to watch
    is the one the store recorded at launch (pid and start time, so a reused pid is never watched).
    """

    def make(ctx: Context, halt: threading.Event) -> Callable[[], object]:
        watched: dict[str, object] = {"key": None, "fd": None}
        driver = make_driver(ctx.config, ctx.state_dir)

        def forget() -> None:
            fd = watched["fd"]
            if isinstance(fd, int):
                os.close(fd)
            watched["fd"] = None

        def step() -> object:
            recorded = launches.recorded_processes(ctx) or {}
            key = (recorded.get("pane_pid"), recorded.get("pane_started"))
            if key != watched["key"]:
                forget()
                watched["key"] = key
                watched["fd"] = _open_pidfd(*key)
                if watched["fd"] is None and key[0]:
                    bell.ring()  # recorded but not running as recorded: have the watchdog look
            fd = watched["fd"]
            if not isinstance(fd, int):
                halt.wait(1.0)
                return None
            if select.select([fd], [], [], 1.0)[0]:
                forget()  # until a relaunch records another process
                _until_tmux_sees_it(driver, halt)
                bell.ring()
            return None

        return step

    return make


def _until_tmux_sees_it(driver: TmuxDriver, halt: threading.Event, limit: float = 1.0) -> None:
    """The process is gone; tmux marks its pane dead when it reads the pty's end, a moment later.
    Ringing before that would send the watchdog to look at a pane that still seems alive."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and not halt.is_set():
        try:
            info = driver.pane_info()
        except TmuxError:
            return
        if info is None or info.dead:
            return
        halt.wait(0.01)


def _open_pidfd(pid: object, started: object) -> int | None:
    if not hasattr(os, "pidfd_open") or not isinstance(pid, int) or not isinstance(started, (int, float)):
        return None  # not Linux: the hook and the exit poll remain
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    # Opened, then checked: the fd now pins this pid, so a match means it is the recorded process.
    if not proctree.alive_as(pid, started):
        os.close(fd)
        return None
    return fd


def tick_loops(ctx: Context) -> list[TickLoop]:
    w, c = ctx.config.watchdog, ctx.config.canary
    died, relaunched = Doorbell(), Doorbell()
    return [
        # The exit poll stays as the safety net for a hook that never fired.
        TickLoop("watchdog", min(w.exit_check, w.interval), watchdog_tick, wake=died),
        TickLoop("canary", min(1.0, c.ack_timeout / 4), canary_tick, wake=relaunched),
        TickLoop("sentinel", ctx.config.sentinel.interval, sentinel_tick),
        TickLoop("signals", 1.0, signal_watch({launches.PANE_DIED: died, launches.RELAUNCHED: relaunched})),
        TickLoop("exit_watch", 1.0, exit_watch(died)),
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
