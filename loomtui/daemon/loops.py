"""The loops `loom supervise` runs, built from the config: every agent's own, and the host's."""

from __future__ import annotations

import asyncio
import logging
import os
import select
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from loomtui import clock, platform
from loomtui.agent import drivers, launches, proctree
from loomtui.agent.ports import AgentDriver
from loomtui.agent.tmux import TmuxError
from loomtui.agent.watchdog import Watchdog
from loomtui.canary.loop import CanaryLoop
from loomtui.context import Context
from loomtui.daemon import oneshot
from loomtui.daemon.supervise import Doorbell, Service, StepMark, TickLoop, loop_name
from loomtui.hooks import settings as hook_settings
from loomtui.platform import DirectoryWatch, Waitable

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike

    from loomtui.agent.watchdog import WatchdogReport

log = logging.getLogger("loom.loops")

# How often a thread blocked on its own events (a pidfd, inotify) looks at the daemon's halt: a stop
# takes at most this long to reach it, and the look costs microseconds, not a tick.
HALT_CHECK = 1.0
# The exit watch reads the recorded pane process when a relaunch rings, and at least this often
# (a record made without a ring, e.g. the watchdog's after an upgrade).
EXIT_WATCH_RECHECK = 30.0
# The canary's look when nothing is due: a scheduled probe, a witness waiting for the agent to be
# ready and a pending probe each ask for their own earlier look (CanaryLoop.next_look).
CANARY_PERIOD = 10.0


class Bell(Protocol):
    """Anything a loop can be rung by: a Doorbell, a Waker, Bells."""

    def ring(self) -> None: ...


class Bells:
    """Several doorbells rung as one (a signal meant for more than one loop)."""

    def __init__(self, *bells: Bell) -> None:
        self.bells = bells

    def ring(self) -> None:
        for bell in self.bells:
            bell.ring()


class Waker:
    """A pipe a thread blocked in select() also waits on, so another thread can end the wait.
    Lives as long as the daemon's loops (a ring must never reach a reused descriptor)."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)

    def fileno(self) -> int:
        return self._r

    def ring(self) -> None:
        try:
            os.write(self._w, b"!")
        except BlockingIOError:
            pass  # already rung and not yet read: once is enough

    def drain(self) -> None:
        try:
            while os.read(self._r, 512):
                pass
        except BlockingIOError:
            pass


def _wait(fds: Sequence[FileDescriptorLike], halt: threading.Event, limit: float) -> list[FileDescriptorLike]:
    """What of `fds` turns readable within `limit` seconds; [] on the halt or at the limit."""
    deadline = time.monotonic() + limit
    while not halt.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return []
        ready = select.select(fds, [], [], min(HALT_CHECK, left))[0]
        if ready:
            return ready
    return []


def watchdog_tick(ctx: Context, halt: threading.Event) -> Callable[[], object]:
    """Every `exit_check` (or at once when tmux's pane-died hook rings) a cheap dead-pane look;
    every `interval` the full watchdog tick; none begins a relaunch once the daemon stops (`halt`)."""
    watchdog = Watchdog(ctx, stop=halt)
    interval = ctx.config.watchdog.interval
    last_full: list[float] = []

    def step() -> object:
        now = clock.monotonic()
        report: WatchdogReport | None
        if not last_full or now - last_full[0] >= interval:
            last_full[:] = [now]
            report = watchdog.tick()
        else:
            report = watchdog.fast_tick()
        for line in report.results if report else ():
            log.info("%s: %s", loop_name("watchdog", ctx.agent), line)
        return report

    return step


def canary_tick(bell: Bell | None = None) -> Callable[[Context, threading.Event], Callable[[], object]]:
    """The canary's tick. The loop looks every CANARY_PERIOD; a tick that has something to look at
    sooner (CanaryLoop.next_look) has `bell` rung then, so an idle daemon does not wake each second."""

    def make(ctx: Context, halt: threading.Event) -> Callable[[], object]:
        loop = CanaryLoop(ctx, halt)
        timer: list[threading.Timer] = []

        def step() -> object:
            for pending in timer:
                pending.cancel()  # this tick looks now; it asks for its own next look below
            timer.clear()
            line = loop.tick()
            if line:
                log.info("%s: %s", loop_name("canary", ctx.agent), line)
            soon = loop.next_look
            if bell is not None and soon is not None and soon < CANARY_PERIOD:
                later = threading.Timer(soon, bell.ring)
                later.daemon = True
                later.start()
                timer.append(later)
            return line

        return step

    return make


def sentinel_tick(ctx: Context, halt: threading.Event) -> Callable[[], object]:
    from loomtui.sentinel.tick import sentinel_tick as tick

    def step() -> object:
        report = tick(ctx)
        line = report.describe()
        if line:
            log.info("sentinel: %s", line)
        return report

    return step


def signal_watch(bells: dict[str, Bell]) -> Callable[[Context, threading.Event], Callable[[], object]]:
    """A tick that watches the signals DIRECTORY until the daemon stops (a watched file is lost
    to an atomic rename) and rings the loop each signal file is meant for.

    Where the platform has a directory watch (Linux's inotify) the kernel says when, and the thread
    sleeps in between (watchfiles wakes every `step` to look, 20 times a second at 50 ms: most of
    an idle daemon's CPU); elsewhere, watchfiles."""

    def make(ctx: Context, halt: threading.Event) -> Callable[[], object]:
        directory = launches.signals_dir(ctx.agent_dir)  # each agent's own: its tmux hook writes there

        def ring(names: Iterable[str]) -> None:
            for name in names:
                bell = bells.get(name)
                if bell is not None:
                    bell.ring()

        def by_kernel(watch: DirectoryWatch) -> None:
            # The watch is in place: what happened before it was never seen, so every loop looks now.
            ring(bells)
            while not halt.is_set():
                if not select.select([watch], [], [], HALT_CHECK)[0]:
                    continue
                names, lost, ended = watch.changes()
                ring(bells if lost else names)
                if ended:
                    return  # the directory went: the next step makes it and watches again

        def step() -> object:
            directory.mkdir(mode=0o700, exist_ok=True)
            watch = platform.current().directory_watch(directory)
            if watch is not None:
                try:
                    by_kernel(watch)
                finally:
                    watch.close()
                return None
            import watchfiles  # the daemon's alone: no other `loom` command pays for it

            watching = False
            for changes in watchfiles.watch(directory, stop_event=halt, debounce=10, step=50, rust_timeout=1000,
                                            yield_on_timeout=True, raise_interrupt=False):
                if not watching:
                    # The first yield comes once the watch is in place: what happened before it
                    # was never seen, so every loop takes one look now.
                    watching = True
                    ring(bells)
                ring({Path(path).name for _, path in changes})
            return None

        return step

    return make


# The hooks loop reads its events directory at least this often where inotify is not to be had,
# and looks at the ledger for typed lines at least this often (a line rings TYPED when typed).
HOOKS_POLL = 1.0
HOOKS_RECHECK = 30.0


def hooks_look(ctx: Context) -> Callable[[], tuple[int, float]]:
    """One look of the hooks loop (the simulator runs it too): the event files recorded, the old
    events forgotten once an hour, a resume judged by its SessionStart (hooks/resume.py), the
    dispatch witness; (lines missing now, seconds until the next look is owed: the next line's
    timeout, the resume's backoff, or HOOKS_RECHECK)."""
    from loomtui.hooks import ingest, resume, witness

    seen = witness.Witness(ctx)
    pruned_at = float("-inf")

    def look() -> tuple[int, float]:
        nonlocal pruned_at
        ingest.collect(ctx)
        if clock.monotonic() - pruned_at >= ingest.PRUNE_EVERY:
            ingest.prune(ctx)
            pruned_at = clock.monotonic()
        again = resume.look(ctx)  # a resume proven or failed by its SessionStart
        missing, due = seen.look()
        return missing, max(min(d for d in (due, again, HOOKS_RECHECK) if d is not None), 0.05)

    return look


def hooks_watch(canary: Bell, typed: Waker) -> Callable[[Context, threading.Event], Callable[[], object]]:
    """The agent's hook events recorded as they arrive (the platform's directory watch on its events
    directory, else a look every HOOKS_POLL), and the
    dispatch witness looked at when a line is typed (`typed` rings), at each event, and when the
    next line's timeout comes; a line missing rings the canary's bell. A resume is judged by its
    SessionStart at each look (hooks/resume.py)."""

    def make(ctx: Context, halt: threading.Event) -> Callable[[], object]:
        from loomtui.hooks import settings

        directory = settings.events_dir(ctx.agent_dir)
        hooks = hooks_look(ctx)

        def look() -> float:
            missing, wait = hooks()
            if missing:
                log.info("%s: %d typed line(s) not dispatched", loop_name("hooks", ctx.agent), missing)
                canary.ring()
            return wait

        def step() -> object:
            settings.write(ctx.agent_dir)  # its directories, as the next launch will find them
            watch = platform.current().directory_watch(directory)
            try:
                while not halt.is_set():
                    wait = look()
                    ready = _wait([typed] + ([watch] if watch is not None else []), halt,
                                  wait if watch is not None else min(wait, HOOKS_POLL))
                    if typed in ready:
                        typed.drain()
                    if watch is not None and watch in ready:
                        _, _, ended = watch.changes()
                        if ended:
                            return None  # the directory went: the next step makes it and watches again
            finally:
                if watch is not None:
                    watch.close()
            return None

        return step

    return make


def exit_watch(bell: Doorbell, wake: Waker | None = None) -> Callable[[Context, threading.Event], Callable[[], object]]:
    """The kernel's own word that the pane's process exited (the platform's exit watch: a Linux pidfd,
    a macOS kqueue, turns readable).

    tmux's pane-died hook is not enough alone: tmux 3.3a skips it whenever it loses the exit
    status (about half of the kill -9s here). A pidfd needs no polling; the pane process to watch
    is the one the store recorded at launch (pid and start time, so a reused pid is never watched).
    The record is read again when `wake` rings (a relaunch) and every EXIT_WATCH_RECHECK.
    """

    def make(ctx: Context, halt: threading.Event) -> Callable[[], object]:
        watched_key: list[tuple[object, object] | None] = [None]
        watched_fd: list[Waitable | None] = [None]
        driver = drivers.of(ctx)
        relaunched = wake or Waker()

        def forget() -> None:
            fd = watched_fd[0]
            if fd is not None:
                fd.close()
            watched_fd[0] = None

        def step() -> object:
            while not halt.is_set():
                recorded = launches.recorded_processes(ctx) or {}
                key = (recorded.get("pane_pid"), recorded.get("pane_started"))
                if key != watched_key[0]:
                    forget()
                    watched_key[0] = key
                    watched_fd[0] = _exit_watch(*key)
                    if watched_fd[0] is None and key[0]:
                        bell.ring()  # recorded but not running as recorded: have the watchdog look
                        return None  # nothing to watch until a relaunch records another process
                fd = watched_fd[0]
                ready = _wait([relaunched, fd] if fd is not None else [relaunched], halt, EXIT_WATCH_RECHECK)
                if fd in ready:
                    forget()  # until a relaunch records another process
                    _until_tmux_sees_it(driver, halt)
                    bell.ring()
                if relaunched in ready:
                    relaunched.drain()  # and the record is read again
            return None

        return step

    return make


def _until_tmux_sees_it(driver: AgentDriver, halt: threading.Event, limit: float = 1.0) -> None:
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


def _exit_watch(pid: object, started: object) -> Waitable | None:
    if not isinstance(pid, int) or not isinstance(started, (int, float)):
        return None
    watch = platform.current().exit_watch(pid)
    if watch is None:
        return None  # no such facility here (or gone already): the hook and the exit poll remain
    # Opened, then checked: a pidfd pins this pid (a kqueue filter is on this pid too), so a match
    # means it is the recorded process.
    if not proctree.alive_as(pid, started):
        watch.close()
        return None
    return watch


def agent_loops(ctx: Context) -> list[TickLoop]:
    """One agent's loops (`ctx` is that agent's): its doorbells, its signals dir, its pane's pidfd.
    Nothing in them is shared with another agent's, so one agent's trouble stays its own."""
    w, agent = ctx.config.watchdog, ctx.agent
    died, relaunched, recheck, typed = Doorbell(), Doorbell(), Waker(), Waker()

    def loop(base: str, period: float, make, wake: Doorbell | None = None) -> TickLoop:
        return TickLoop(loop_name(base, agent), period, make, wake=wake, agent=agent, loop=base)

    signals: dict[str, Bell] = {launches.PANE_DIED: died, launches.RELAUNCHED: Bells(relaunched, recheck)}
    hooked = hook_settings.wanted(ctx.config.agent)
    if hooked:
        signals[launches.TYPED] = typed
    loops = [
        # The exit poll stays as the safety net for a hook that never fired.
        loop("watchdog", min(w.exit_check, w.interval), watchdog_tick, wake=died),
        loop("canary", CANARY_PERIOD, canary_tick(relaunched), wake=relaunched),
        # Its steps run until the daemon stops; the period is only the pause before a restart.
        loop("signals", 5.0, signal_watch(signals)),
        loop("exit_watch", 5.0, exit_watch(died, recheck)),
    ]
    if hooked:  # no hooks configured: no witness, and nothing is ever missing
        loops.append(loop("hooks", 5.0, hooks_watch(relaunched, typed)))
    return loops


def tick_loops(ctx: Context) -> list[TickLoop]:
    """Every agent's loops, then the host's: the sentinel scans every job once, whichever agent it
    nudges; each replicated memory directory (and the ledger's own replica) has a loop of its own."""
    out = [spec for name in ctx.config.agent_names for spec in agent_loops(ctx.for_agent(name))]
    out.append(TickLoop("sentinel", ctx.config.sentinel.interval, sentinel_tick))
    from loomtui.daemon import replica_loop  # memory replicated with git (memory/replica.py)
    from loomtui.memory.replica import targets

    for target in targets(ctx.config, ctx.state_dir):
        out.append(TickLoop(target.name, replica_loop.period(target), replica_loop.replica_tick(target)))
    if ctx.config.telegram.chat_id:
        from loomtui.daemon.head_notice import PERIOD, head_tick  # the ledger's head, off the machine daily

        out.append(TickLoop("ledger_head", PERIOD, head_tick))
    if ctx.config.heartbeat:
        from loomtui.daemon.heartbeat_push import heartbeat_tick, period

        out.append(TickLoop("heartbeat_push", period(ctx), heartbeat_tick))
    return out


async def _sender(ctx: Context, stop: asyncio.Event, step: StepMark) -> None:
    from loomtui.telegram.sender import run_sender

    await run_sender(ctx, stop, step=step)


async def _commands(ctx: Context, stop: asyncio.Event, step: StepMark) -> None:
    """The bot's one poller: the operator's commands and, with telegram.bridge on, the messages
    it relays to the agent (run_commands reads both switches)."""
    from loomtui.telegram.commands import OperatorActions, run_commands

    await run_commands(ctx, OperatorActions(ctx), stop, step=step)


async def _bridge_replies(ctx: Context, stop: asyncio.Event, step: StepMark) -> None:
    from loomtui.telegram.bridge import run_bridge

    await run_bridge(ctx, stop, step=step)


def services(ctx: Context) -> list[Service]:
    """Telegram runs only when a chat is configured (the bridge needs one); Loom never polls a
    token the agent holds. The poller runs once, with commands or the bridge on: Loom is the
    bot's only poller, so the bridge's messages arrive through it even with commands off. The
    bridge's reply loop is a service of its own, so one that fails is restarted without the other."""
    cfg = ctx.config.telegram
    if not cfg.chat_id:
        return []
    sender, commands, bridge = oneshot.TELEGRAM_SERVICES
    out = [Service(sender, _sender)]
    if cfg.commands or cfg.bridge:
        out.append(Service(commands, _commands))
    if cfg.bridge:
        out.append(Service(bridge, _bridge_replies))
    return out
