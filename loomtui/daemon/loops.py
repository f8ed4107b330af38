"""The loops `loom supervise` runs, built from the config: every agent's own, and the host's."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import select
import struct
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from loomtui import clock
from loomtui.agent import drivers, launches, proctree
from loomtui.agent.ports import AgentDriver
from loomtui.agent.tmux import TmuxError
from loomtui.agent.watchdog import Watchdog
from loomtui.canary.loop import CanaryLoop
from loomtui.context import Context
from loomtui.daemon.supervise import Doorbell, Service, TickLoop, loop_name
from loomtui.hooks import settings as hook_settings

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


class Bells:
    """Several doorbells rung as one (a signal meant for more than one loop)."""

    def __init__(self, *bells: object) -> None:
        self.bells = bells

    def ring(self) -> None:
        for bell in self.bells:
            bell.ring()  # type: ignore[attr-defined]


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


def _wait(fds: list[object], halt: threading.Event, limit: float) -> list[object]:
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
    every `interval` the full watchdog tick."""
    watchdog = Watchdog(ctx)
    interval = ctx.config.watchdog.interval
    last_full: list[float] = []

    def step() -> object:
        now = clock.monotonic()
        if not last_full or now - last_full[0] >= interval:
            last_full[:] = [now]
            report = watchdog.tick()
        else:
            report = watchdog.fast_tick()
        for line in report.results if report else ():
            log.info("%s: %s", loop_name("watchdog", ctx.agent), line)
        return report

    return step


def canary_tick(bell: object | None = None) -> Callable[[Context, threading.Event], Callable[[], object]]:
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
                later = threading.Timer(soon, bell.ring)  # type: ignore[attr-defined]
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


IN_CLOSE_WRITE, IN_MOVED_TO = 0x8, 0x80
IN_Q_OVERFLOW, IN_IGNORED = 0x4000, 0x8000
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)


def inotify_watch(directory: Path) -> int | None:
    """A non-blocking inotify descriptor told of every file written (closed after writing) or moved
    into `directory`; None where there is no inotify (not Linux) or it cannot be had."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        init1, add_watch = libc.inotify_init1, libc.inotify_add_watch
    except (OSError, AttributeError):
        return None
    add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    fd = init1(os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0:
        return None
    if add_watch(fd, os.fsencode(directory), IN_CLOSE_WRITE | IN_MOVED_TO) < 0:
        os.close(fd)
        return None
    return fd


def inotify_names(data: bytes) -> tuple[set[str], bool, bool]:
    """(names of the files in these events, whether events were lost, whether the watch ended)."""
    names: set[str] = set()
    lost = ended = False
    offset = 0
    while offset + _EVENT.size <= len(data):
        _, mask, _, length = _EVENT.unpack_from(data, offset)
        name = data[offset + _EVENT.size:offset + _EVENT.size + length].split(b"\0", 1)[0]
        offset += _EVENT.size + length
        lost |= bool(mask & IN_Q_OVERFLOW)
        ended |= bool(mask & IN_IGNORED)
        if name:
            names.add(os.fsdecode(name))
    return names, lost, ended


def signal_watch(bells: dict[str, object]) -> Callable[[Context, threading.Event], Callable[[], object]]:
    """A tick that watches the signals DIRECTORY until the daemon stops (a watched file is lost
    to an atomic rename) and rings the loop each signal file is meant for.

    On Linux the kernel's inotify says when, and the thread sleeps in between (watchfiles wakes
    every `step` to look, 20 times a second at 50 ms: most of an idle daemon's CPU); elsewhere,
    watchfiles."""

    def make(ctx: Context, halt: threading.Event) -> Callable[[], object]:
        directory = launches.signals_dir(ctx.agent_dir)  # each agent's own: its tmux hook writes there

        def ring(names: Iterable[str]) -> None:
            for name in names:
                bell = bells.get(name)
                if bell is not None:
                    bell.ring()  # type: ignore[attr-defined]

        def by_inotify(fd: int) -> None:
            # The watch is in place: what happened before it was never seen, so every loop looks now.
            ring(bells)
            while not halt.is_set():
                if not select.select([fd], [], [], HALT_CHECK)[0]:
                    continue
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                names, lost, ended = inotify_names(data)
                ring(bells if lost else names)
                if ended:
                    return  # the directory went: the next step makes it and watches again

        def step() -> object:
            directory.mkdir(mode=0o700, exist_ok=True)
            fd = inotify_watch(directory)
            if fd is not None:
                try:
                    by_inotify(fd)
                finally:
                    os.close(fd)
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


def hooks_watch(canary: object, typed: Waker) -> Callable[[Context, threading.Event], Callable[[], object]]:
    """The agent's hook events recorded as they arrive (inotify on its events directory), and the
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
                canary.ring()  # type: ignore[attr-defined]
            return wait

        def step() -> object:
            settings.write(ctx.agent_dir)  # its directories, as the next launch will find them
            fd = inotify_watch(directory)
            try:
                while not halt.is_set():
                    wait = look()
                    ready = _wait([typed] + ([fd] if fd is not None else []), halt,
                                  wait if fd is not None else min(wait, HOOKS_POLL))
                    if typed in ready:
                        typed.drain()
                    if fd is not None and fd in ready:
                        try:
                            _, _, ended = inotify_names(os.read(fd, 65536))
                        except BlockingIOError:
                            continue
                        if ended:
                            return None  # the directory went: the next step makes it and watches again
            finally:
                if fd is not None:
                    os.close(fd)
            return None

        return step

    return make


def exit_watch(bell: Doorbell, wake: Waker | None = None) -> Callable[[Context, threading.Event], Callable[[], object]]:
    """The kernel's own word that the pane's process exited (a Linux pidfd turns readable).

    tmux's pane-died hook is not enough alone: tmux 3.3a skips it whenever it loses the exit
    status (about half of the kill -9s here). A pidfd needs no polling; the pane process to watch
    is the one the store recorded at launch (pid and start time, so a reused pid is never watched).
    The record is read again when `wake` rings (a relaunch) and every EXIT_WATCH_RECHECK.
    """

    def make(ctx: Context, halt: threading.Event) -> Callable[[], object]:
        watched: dict[str, object] = {"key": None, "fd": None}
        driver = drivers.of(ctx)
        relaunched = wake or Waker()

        def forget() -> None:
            fd = watched["fd"]
            if isinstance(fd, int):
                os.close(fd)
            watched["fd"] = None

        def step() -> object:
            while not halt.is_set():
                recorded = launches.recorded_processes(ctx) or {}
                key = (recorded.get("pane_pid"), recorded.get("pane_started"))
                if key != watched["key"]:
                    forget()
                    watched["key"] = key
                    watched["fd"] = _open_pidfd(*key)
                    if watched["fd"] is None and key[0]:
                        bell.ring()  # recorded but not running as recorded: have the watchdog look
                        return None  # nothing to watch until a relaunch records another process
                fd = watched["fd"]
                ready = _wait([relaunched, fd] if isinstance(fd, int) else [relaunched], halt, EXIT_WATCH_RECHECK)
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


def agent_loops(ctx: Context) -> list[TickLoop]:
    """One agent's loops (`ctx` is that agent's): its doorbells, its signals dir, its pane's pidfd.
    Nothing in them is shared with another agent's, so one agent's trouble stays its own."""
    w, agent = ctx.config.watchdog, ctx.agent
    died, relaunched, recheck, typed = Doorbell(), Doorbell(), Waker(), Waker()

    def loop(base: str, period: float, make, wake: Doorbell | None = None) -> TickLoop:
        return TickLoop(loop_name(base, agent), period, make, wake=wake, agent=agent, loop=base)

    signals = {launches.PANE_DIED: died, launches.RELAUNCHED: Bells(relaunched, recheck)}
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
    return out


async def _sender(ctx: Context, stop: asyncio.Event) -> None:
    from loomtui.telegram.sender import run_sender

    await run_sender(ctx, stop)


async def _commands(ctx: Context, stop: asyncio.Event) -> None:
    """The bot's one poller: the operator's commands and, with telegram.bridge on, the messages
    it relays to the agent (run_commands reads both switches)."""
    from loomtui.telegram.commands import OperatorActions, run_commands

    await run_commands(ctx, OperatorActions(ctx), stop)


async def _bridge_replies(ctx: Context, stop: asyncio.Event) -> None:
    from loomtui.telegram.bridge import run_bridge

    await run_bridge(ctx, stop)


def services(ctx: Context) -> list[Service]:
    """Telegram runs only when a chat is configured (the bridge needs one); Loom never polls a
    token the agent holds. The poller runs once, with commands or the bridge on: Loom is the
    bot's only poller, so the bridge's messages arrive through it even with commands off. The
    bridge's reply loop is a service of its own, so one that fails is restarted without the other."""
    cfg = ctx.config.telegram
    if not cfg.chat_id:
        return []
    out = [Service("telegram_sender", _sender)]
    if cfg.commands or cfg.bridge:
        out.append(Service("telegram_commands", _commands))
    if cfg.bridge:
        out.append(Service("telegram_bridge", _bridge_replies))
    return out
