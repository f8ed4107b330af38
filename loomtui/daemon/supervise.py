"""`loom supervise`: the daemon. An asyncio runtime running each loop as its own task.

One daemon runs every agent's loops: each agent's loops are its own (their own Context from
`ctx.for_agent`, their own thread each, their own tick locks in the agent's directory), so a tmux
call that hangs on one agent's server, a crash loop or a hold never delays another agent's ticks.
The host-wide loops (sentinel, Telegram, metrics) run once.

Start-up order matters (an earlier daemon swallowed a failed lock write and exited 0, so its
supervisor never restarted it): prove the state directory writable, then take
supervisor.lock, then work. A loop that raises is recorded and restarted with capped backoff;
it never takes the daemon down, unless what it met is a store that cannot be used any more
(damaged, emptied, replaced, removed, its log unlinked: store/health.py). Then, and when the
heartbeat's look finds the same, the daemon exits 74 (EX_IOERR) with `store PATH is unusable:
WHY`, so the service manager restarts it and the salvage at start runs; a busy or locked store
is never fatal. SIGTERM or SIGINT is a clean stop (exit 0; 74 with that line if the store turned
out unusable). A daemon that exits at all has failed, so the service manager restarts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any
from pathlib import Path

from loomtui import __version__
from loomtui.timing import backoff
from loomtui.context import Context
from loomtui.daemon import oneshot
from loomtui.errors import LockHeld, LoomError
from loomtui.store import counters, health, heartbeats, ledger, locks
from loomtui.store.db import DB_NAME

log = logging.getLogger("loom.supervise")

HEARTBEAT = "supervisor"
LOOP_RETRY = 2.0  # a loop's first wait after its tick failed, doubled each failure after
MAX_LOOP_BACKOFF = 60.0
# How long a loop still at work when the daemon's wait for its loops ran out (30 s) is given once
# cancelled: a tick, or a service inside a command (a relaunch from Telegram). Its store is closed, the
# stop recorded and supervisor.lock let go only once it is done, or once it is left behind after this
# grace (said in the log): 30 + 30 s, well inside systemd's 90 s stop timeout.
SERVICE_GRACE = 30.0
FATAL_HEARTBEAT_FAILURES = 3


@dataclass
class LoopStats:
    ticks: int = 0
    errors: int = 0
    restarts: int = 0
    last_duration: float = 0.0
    last_tick: float | None = None
    last_error: str = ""
    began: float | None = None  # time.monotonic() when the tick under way began; None between ticks

    def said(self, now: float) -> dict[str, Any]:
        """As the heartbeat and the metrics say it: `busy_for`, how long the tick under way has run
        at `now` (time.monotonic()), in place of its start, a reading no other process can use. A
        tick that never ends (a read of /proc stuck on a process in D state, say) leaves the loop
        dead while the heartbeat beats on: `loom check` and the push heartbeats say so by this."""
        out = asdict(self)
        began = out.pop("began")
        out["busy_for"] = None if began is None else round(max(0.0, now - began), 1)
        return out


class Doorbell:
    """Ends a tick loop's sleep at once; rung from any thread (a file watcher, another loop).

    A ring before the loop sleeps is kept, so the next sleep ends at once: an event is never lost
    between a tick and the sleep after it.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        self._early = False

    def bind(self) -> asyncio.Event:
        """The event the running asyncio loop waits on (called from inside that loop)."""
        with self._guard:
            self._loop, self._event = asyncio.get_running_loop(), asyncio.Event()
            if self._early:
                self._event.set()
            return self._event

    def ring(self) -> None:
        with self._guard:
            loop, event = self._loop, self._event
            if loop is None or event is None:
                self._early = True
                return
        try:
            loop.call_soon_threadsafe(event.set)
        except RuntimeError:
            pass  # the daemon's loop has closed: nobody is left to wake


@dataclass
class TickLoop:
    """A blocking tick run in a worker thread every `period` seconds; `make` builds a fresh tick.

    `make(ctx, halt)` gets a threading.Event set when the daemon stops, so a tick that waits
    (a canary probe waits up to its ack timeout) can give up instead of holding up SIGTERM.
    A `wake` doorbell ends the sleep between ticks early (tmux said the pane died).

    `agent` names the agent whose loop it is (its Context is `ctx.for_agent(agent)`, its tick lock
    in that agent's directory); None for a host-wide loop. `loop` is what it is a tick of (the
    `loom tick` loop its lock and counts share); `name` says which, for logs and heartbeats.
    """

    name: str
    period: float
    make: Callable[[Context, threading.Event], Callable[[], object]]
    wake: Doorbell | None = None
    agent: str | None = None
    loop: str = ""

    def __post_init__(self) -> None:
        if not self.loop:
            self.loop = self.name


loop_name = oneshot.loop_name


# What a service marks each of its steps with (`with step():` around a delivery, a poll, a look at the
# transcript): the heartbeat says how long the one under way has run (`busy_for`), as of a tick.
StepMark = Callable[[], contextlib.AbstractContextManager[object]]


@dataclass
class Service:
    """A long-running coroutine (e.g. the Telegram sender) that watches `stop` itself and marks its
    steps: `run(ctx, stop, step)`."""

    name: str
    run: Callable[[Context, asyncio.Event, StepMark], Awaitable[None]]


def marking(stats: LoopStats) -> StepMark:
    """A service's step mark: `began` set while a step is under way (set and read across threads: one
    attribute, written whole)."""

    @contextlib.contextmanager
    def step() -> Iterator[None]:
        stats.began = time.monotonic()
        try:
            yield
        finally:
            stats.began = None

    return step


@dataclass
class Runtime:
    ctx: Context
    loops: list[TickLoop]
    services: list[Service] = field(default_factory=list)
    stats: dict[str, LoopStats] = field(default_factory=dict)
    tally: counters.Tally = field(default_factory=counters.Tally)   # the loop KPIs, flushed with the heartbeat
    started: float = field(default_factory=time.time)
    fatal: str = ""
    exit_code: int = 1             # the exit status with `fatal`: EX_IOERR for an unusable store
    halt: threading.Event = field(default_factory=threading.Event)


def clone(ctx: Context, agent: str | None = None) -> Context:
    # One SQLite connection per loop: a slow query in one loop never blocks another's writes.
    return ctx.clone() if agent is None else ctx.for_agent(agent)


def _pause(stop: asyncio.Event, seconds: float) -> Awaitable[object]:
    # No shield: a shielded wait left its inner `stop.wait()` task pending at every timeout, one
    # more for each sleep of every loop (about 1 GB a month); a cancelled Event.wait() costs nothing.
    return asyncio.wait_for(stop.wait(), timeout=max(seconds, 0.0))


async def sleep_or_stop(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep up to `seconds`; True if a stop was asked for meanwhile."""
    try:
        await _pause(stop, seconds)
        return True
    except asyncio.TimeoutError:
        return stop.is_set()


async def sleep_stop_or_wake(stop: asyncio.Event, wake: asyncio.Event | None, seconds: float) -> bool:
    """Sleep up to `seconds`, less if `wake` is set (it is cleared); True if a stop was asked for."""
    if wake is None:
        return await sleep_or_stop(stop, seconds)
    if not wake.is_set():
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(wake.wait())]
        try:
            await asyncio.wait(waiters, timeout=max(seconds, 0.0), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
    wake.clear()
    return stop.is_set()


def unusable_store(ctx: Context, exc: BaseException | None = None) -> str:
    """The line the daemon exits with when the store `ctx` uses cannot be used any more (or when
    `exc` says so), else "". Only a store this context has open is looked at: opening one here
    could fail too, or create a fresh file."""
    path = ctx.state_dir / DB_NAME
    opened = ctx._store
    reason = opened.unusable(exc) if opened is not None else health.examine(path, None, exc)
    return f"store {path} is unusable: {reason}" if reason else ""


def give_up(rt: Runtime, stop: asyncio.Event, line: str) -> None:
    """End the daemon for an unusable store: the first line found is the one it exits with."""
    if not rt.fatal:
        rt.fatal, rt.exit_code = line, health.EX_IOERR
        log.error("%s; exiting so that the service manager restarts Loom and its salvage runs", line)
    rt.halt.set()
    stop.set()


def _record_error(ctx: Context, name: str, exc: BaseException) -> None:
    record_loop_error(ctx, name, exc)
    log.error("loop %s failed: %s: %s", name, type(exc).__name__, exc)


def record_loop_error(ctx: Context, name: str, exc: BaseException) -> None:
    """A loop's failed tick in the ledger (`loop_error`), where the store takes it: a locked one
    keeps it its busy timeout first (the simulator's loops record theirs through this too)."""
    try:
        ledger.append(ctx.store, "loop_error", source="supervisor",
                      detail={"loop": name, "type": type(exc).__name__, "error": str(exc)[:500]})
    except Exception:  # the store itself may be what failed; the log line still says it
        pass


async def run_tick_loop(rt: Runtime, spec: TickLoop, stop: asyncio.Event) -> None:
    stats = rt.stats.setdefault(spec.name, LoopStats())
    # Made inside the loop's own error handling, each time it (re)starts: a make that raised (the
    # store's open-lock timing out, say) ended the loop for good while the daemon ran on.
    ctx: Context | None = None
    tick: Callable[[], object] | None = None
    wake = spec.wake.bind() if spec.wake is not None else None
    failures = 0
    # A thread of its own, not the shared pool: the signals and exit watches hold theirs for good,
    # and a tick stuck on one agent's stopped tmux server must never leave another agent's loops
    # waiting for a free worker.
    worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"loom-{spec.name}")
    running = asyncio.get_running_loop()
    planned: float | None = None
    # The call in the loop's thread (a make, a tick), shielded: a cancel ends the wait for it, never
    # the record of whether the thread is still at it.
    work: asyncio.Future[Any] | None = None
    try:
        while not stop.is_set():
            began = time.monotonic()
            if planned is not None:
                # How late the tick began against its plan (negative: a doorbell rang it early);
                # bench/agents.py reads this to say whether many agents keep every loop on time.
                log.debug("tick %s late %.3f", spec.name, began - planned)
            planned = None
            status = "ok"
            try:
                stats.began = began  # a make that hangs is a tick under way too
                if ctx is None:
                    ctx = clone(rt.ctx, spec.agent)
                if tick is None:
                    # In the loop's thread: a make may open the store or read it (the hooks loop's
                    # does), which waits out a locked store's busy time, never on the daemon's loop.
                    making = running.run_in_executor(worker, spec.make, ctx, rt.halt)
                    work = making
                    tick = await asyncio.shield(making)
                run = locked(ctx, spec.loop, tick, lock_dir(ctx, spec)) if spec.loop in oneshot.LOOPS else tick
                work = running.run_in_executor(worker, run)
                result = await asyncio.shield(work)
                if result is BUSY:
                    status = "busy"  # a `loom tick` of this loop (cron, a timer) is running: it acts, we don't
                failures = 0
            except Exception as exc:
                status = "failed"
                failures += 1
                stats.errors += 1
                stats.last_error = f"{type(exc).__name__}: {exc}"[:300]
                fatal = await asyncio.to_thread(unusable_store, ctx or rt.ctx, exc)
                if fatal:
                    give_up(rt, stop, fatal)  # a restarted loop would only meet it again
                    break
                await asyncio.to_thread(_record_error, ctx or rt.ctx, spec.name, exc)
                if await sleep_or_stop(stop, backoff(failures, LOOP_RETRY, MAX_LOOP_BACKOFF)):
                    break
                if ctx is not None:
                    ctx.close()
                ctx, tick = None, None  # made afresh at the next tick, under this same handling
                stats.restarts += 1
                continue
            finally:
                stats.began = None
                stats.ticks += 1
                stats.last_duration = time.monotonic() - began
                stats.last_tick = time.time()
                if spec.loop in oneshot.LOOPS:
                    count_tick(rt.tally, spec.loop, status, stats.last_duration, spec.agent)
            planned = began + spec.period
            if await sleep_stop_or_wake(stop, wake, spec.period - (time.monotonic() - began)):
                break
    finally:
        worker.shutdown(wait=False, cancel_futures=True)
        # Cancelled with a tick still running (the daemon's wait for its loops ran out): its store
        # is closed once it is done, never under it.
        if ctx is not None and (work is None or await finished(work, spec.name)):
            ctx.close()


async def finished(work: asyncio.Future[Any], name: str) -> bool:
    """Whether the call `work` in loop `name`'s thread has ended, waiting up to SERVICE_GRACE for it
    (the loop was cancelled while it ran). False: it is left behind, said in the log, and its store
    is left open to it (the process ends soon after: `leave`)."""
    if not work.done():
        try:
            await asyncio.wait([work], timeout=SERVICE_GRACE)
        finally:
            if not work.done():  # the grace ran out, or a second cancel cut it short
                log.error("loop %s still at work after it was cancelled; left behind: loom-%s (its store "
                          "left open)", name, name)
    return work.done()


class LeftBehind(asyncio.CancelledError):
    """A cancelled service whose thread was still at work after its grace: its store stays open."""


def lock_dir(ctx: Context, spec: TickLoop) -> Path:
    """Where the loop's tick lock lives: an agent's loop in that agent's directory (the same lock
    `loom tick LOOP --agent NAME` takes), a host-wide one in the state dir."""
    return ctx.state_dir if spec.agent is None else oneshot.lock_dir(ctx, spec.loop)


BUSY = object()  # what a tick returns when another tick of its loop holds the lock


def locked(ctx: Context, loop: str, tick: Callable[[], object], where: Path | None = None) -> Callable[[], object]:
    """One tick under the loop's tick lock, the one `loom tick` takes: two never act at once."""

    def run() -> object:
        try:
            lock = locks.hold(ctx.state_dir if where is None else where, oneshot.lock_name(loop), timeout=0)
        except LockHeld:
            return BUSY  # only this lock: a lock the tick itself waits for and misses is its error
        with lock:
            return tick()

    return run


def count_tick(tally: counters.Tally, loop: str, status: str, seconds: float, agent: str | None = None) -> None:
    labels = oneshot.loop_labels(loop, agent)
    tally.add("loom_fire_total", {**labels, "source": "tick"})
    tally.add("loom_run_total", {**labels, "status": status})
    if status != "busy":
        tally.observe("loom_tick_duration_seconds", labels, seconds)


async def run_service(rt: Runtime, service: Service, stop: asyncio.Event) -> None:
    stats = rt.stats.setdefault(service.name, LoopStats())
    failures = 0
    while not stop.is_set():
        ctx = clone(rt.ctx)
        left = False
        try:
            await on_a_loop_of_its_own(service, ctx, stop, marking(stats))
            failures = 0
        except LeftBehind:
            left = True  # its thread is still inside a command: the store stays open to it
            raise
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failures += 1
            stats.errors += 1
            stats.last_error = f"{type(exc).__name__}: {exc}"[:300]
            fatal = await asyncio.to_thread(unusable_store, ctx, exc)
            if fatal:
                give_up(rt, stop, fatal)
            else:
                await asyncio.to_thread(_record_error, ctx, service.name, exc)
        finally:
            if not left:
                ctx.close()
        if stop.is_set():
            break
        stats.restarts += 1
        if await sleep_or_stop(stop, backoff(failures, LOOP_RETRY, MAX_LOOP_BACKOFF)):
            break


async def on_a_loop_of_its_own(service: Service, ctx: Context, stop: asyncio.Event,
                               step: StepMark = contextlib.nullcontext) -> None:
    """`service.run` on an event loop of its own, in a thread of its own, until it returns (or
    raises: here, in the caller). A service reads and writes the store between its awaits (the
    Telegram sender's outbox, the poller's offset), and a store another process holds locked makes
    each such call wait out its busy time: on the daemon's loop, that stopped every other loop's
    scheduling, the heartbeat and the stop signal for ten seconds a call. `stop` reaches the
    service's own loop as its own event."""
    halted = threading.Event()
    inner: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    async def body() -> None:
        own = asyncio.Event()
        inner.append((asyncio.get_running_loop(), own))
        if halted.is_set():  # the stop came before this loop was there to be told
            own.set()
        await service.run(ctx, own, step)

    def tell_stop() -> None:
        halted.set()
        for loop, own in inner:
            with contextlib.suppress(RuntimeError):  # its loop has ended: nothing left to tell
                loop.call_soon_threadsafe(own.set)

    async def relay() -> None:
        await stop.wait()
        tell_stop()

    relaying = asyncio.create_task(relay())
    worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"loom-{service.name}")
    running = asyncio.get_running_loop().run_in_executor(worker, asyncio.run, body())
    try:
        await asyncio.shield(running)
    except asyncio.CancelledError:
        # The daemon stops and its wait for the loops ran out: the service was told to stop, and
        # its thread may still be inside a command (a relaunch from Telegram). Its store is closed
        # and the stop recorded only once it is done, or once it is left behind after a grace more.
        tell_stop()
        try:
            await finished(running, service.name)
        finally:
            if not running.done():
                raise LeftBehind(service.name)  # also when a second cancel cut its grace short
        raise
    finally:
        relaying.cancel()
        worker.shutdown(wait=False)


async def run_heartbeat(rt: Runtime, stop: asyncio.Event, period: float) -> None:
    ctx = clone(rt.ctx)
    failures = 0
    try:
        while not stop.is_set():
            detail = {"pid": os.getpid(), "started": rt.started, "version": __version__,
                      "loops": {name: s.said(time.monotonic()) for name, s in list(rt.stats.items())}}
            failed: Exception | None = None
            try:
                await asyncio.to_thread(heartbeats.beat, ctx.store, HEARTBEAT, detail)
                failures = 0
                await asyncio.to_thread(rt.tally.flush, ctx.store)
            except Exception as exc:
                failed = exc
            # A beat that succeeds proves little (its pages may be cached, its log unlinked): the
            # store's health is looked at each time, a stat or two and the damage any loop met.
            fatal = await asyncio.to_thread(unusable_store, ctx, failed)
            if fatal:
                give_up(rt, stop, fatal)
                return
            if failed is not None:
                # A busy or locked store (a backup holding it, a long `sqlite3` session) is never
                # fatal, however long it lasts: three such beats in a row ended the daemon.
                failures = 0 if health.classify(failed) == health.TRANSIENT else failures + 1  # in a row
                log.error("heartbeat failed: %s", failed)
                if failures >= FATAL_HEARTBEAT_FAILURES:
                    rt.fatal = f"cannot write the heartbeat to {ctx.state_dir}: {failed}"
                    stop.set()
                    return
            if await sleep_or_stop(stop, period):
                break
    finally:
        try:
            if not unusable_store(ctx):  # never write into a store that is not the store any more
                rt.tally.flush(ctx.store)  # the last ticks' counts, before the store closes
        except Exception as exc:
            log.error("could not keep the loop counters: %s", exc)
        ctx.close()


async def main_async(rt: Runtime, heartbeat_period: float) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(run_heartbeat(rt, stop, heartbeat_period), name="heartbeat")]
    tasks += [asyncio.create_task(run_tick_loop(rt, spec, stop), name=spec.name) for spec in rt.loops]
    tasks += [asyncio.create_task(run_service(rt, svc, stop), name=svc.name) for svc in rt.services]
    await stop.wait()
    rt.halt.set()
    done, pending = await asyncio.wait(tasks, timeout=30)
    for task in pending:
        task.cancel()
    if pending:
        # Each cancelled loop waits up to SERVICE_GRACE for its thread, then leaves it behind: its
        # end is awaited here, so the stop is recorded and supervisor.lock let go only after it.
        ended, pending = await asyncio.wait(pending, timeout=SERVICE_GRACE + STUCK_GRACE)
        done |= ended
    for task in pending:
        log.error("task %s did not end within its grace", task.get_name())
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            log.error("task %s ended with %s", task.get_name(), task.exception())


def run_leaving_stuck_threads(main: Awaitable[None]) -> None:
    """asyncio.run, but its end does not wait for the threads of its default executor: a tick still
    stuck in one (a /proc read in D state, a call that never returns) held the daemon's stop for
    good, until systemd killed it at its stop timeout. Tasks still running are cancelled as
    asyncio.run cancels them, but never a second time: one cancelled already is in its grace."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(main)
    finally:
        try:
            pending = asyncio.all_tasks(loop)
            for task in pending:
                if not task.cancelling():  # a second cancel would cut short the grace it is in
                    task.cancel()
            if pending:
                _, left = loop.run_until_complete(asyncio.wait(pending, timeout=STUCK_GRACE))
                if left:  # never to end now: what they hold (a store) stays theirs until the process ends
                    log.error("stopped with %d task(s) still running, left behind: %s", len(left),
                              ", ".join(sorted(task.get_name() for task in left)))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()  # its executor shut down without a wait


STUCK_GRACE = 2.0  # a worker thread about to end is given this long before it counts as stuck


def leave(code: int) -> int:
    """`code`; or, when a thread is still running after the stop was recorded, the process ends
    with it now. The interpreter's exit joins every worker thread: one stuck in a tick or a service
    kept a stopped daemon alive for good (systemd killed it at its stop timeout, 90 s)."""
    deadline = time.monotonic() + STUCK_GRACE
    stuck = []
    for thread in threading.enumerate():
        if thread is threading.main_thread() or thread.daemon:
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            stuck.append(thread.name)
    if not stuck:
        return code
    log.error("stopped with %d thread(s) still running, left behind: %s", len(stuck), ", ".join(sorted(stuck)))
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _record_stop(ctx: Context) -> int:
    """The stop asked for (SIGTERM, SIGINT), in the ledger: exit 0, or 74 with the one line when the
    store turned out unusable meanwhile (never a traceback); a busy store only costs the event."""
    try:
        fatal = unusable_store(ctx)
        if not fatal:
            ledger.append(ctx.store, "supervisor_stop", source="supervisor", detail={"pid": os.getpid()})
            return 0
    except (LoomError, sqlite3.Error) as exc:
        fatal = unusable_store(ctx, exc)
        if not fatal:
            log.error("could not record the stop: %s", exc)
            return 0
    raise LoomError(fatal, exit_code=health.EX_IOERR)


def supervise(ctx: Context, loops: list[TickLoop], services: list[Service] | None = None) -> int:
    """Run until stopped. The state dir was proven writable when `ctx` was loaded."""
    lock = locks.FileLock(ctx.state_dir, locks.SUPERVISOR)
    try:
        lock.acquire(timeout=0)
    except LoomError as exc:
        raise LoomError(f"another loom supervise is running for this state dir: {exc}", exit_code=3) from None
    rt = Runtime(ctx, loops, services or [])
    server = None
    try:
        from loomtui.store.salvage import open_or_salvage

        checked, salvaged = open_or_salvage(ctx.state_dir)
        if salvaged is not None:
            log.error("%s", salvaged.summary())
        if ctx.agent == checked.agent:
            ctx.close()
            ctx._store = checked
        else:
            # The daemon's own events (start, stop) are filed like every host-wide one: under the
            # first agent, whose view the loaded config is.
            checked.close()
        if ctx.config.metrics.listen:
            from loomtui.daemon import metrics

            server = metrics.serve(clone(ctx), lambda: {name: s.said(time.monotonic())
                                                         for name, s in list(rt.stats.items())})
        ledger.append(ctx.store, "supervisor_start", source="supervisor",
                      detail={"pid": os.getpid(), "version": __version__,
                              "loops": [s.name for s in loops] + [s.name for s in rt.services]})
        heartbeat_period = min(5.0, min((s.period for s in loops), default=5.0) * 2)
        run_leaving_stuck_threads(main_async(rt, heartbeat_period))
        if rt.fatal:
            raise LoomError(rt.fatal, exit_code=rt.exit_code)
        return _record_stop(ctx)
    finally:
        if server is not None:
            server.shutdown()
        lock.release()
