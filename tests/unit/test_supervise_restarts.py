"""The daemon's tick loops restart on their own (daemon/supervise.py), making their tick again: also
when making it is what failed."""

from __future__ import annotations

import asyncio
import sqlite3

from loomtui.context import Context
from loomtui.daemon.supervise import Runtime, TickLoop, run_tick_loop
from loomtui.store import ledger


def test_a_loop_whose_tick_could_not_be_made_is_made_again_and_runs(tmp_path):
    """A make that raised (the hooks loop's opens the store: a lock that timed out, say) ended the
    loop for good while the daemon ran on: the dispatch witness and the resume's proof gone."""
    ctx = Context.load(None, str(tmp_path / "state"), environ={})
    made: list[int] = []
    ticks: list[int] = []

    def make(loop_ctx: Context, halt) -> object:
        made.append(1)
        if len(made) == 1:
            raise sqlite3.OperationalError("database is locked")
        return lambda: ticks.append(1)

    spec = TickLoop("witness", 0.05, make)
    rt = Runtime(ctx, [spec])

    async def run() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(run_tick_loop(rt, spec, stop))
        while len(ticks) < 3 and not task.done():
            await asyncio.sleep(0.05)
        stop.set()
        await task

    try:
        asyncio.run(asyncio.wait_for(run(), 120))
        assert len(made) == 2 and len(ticks) >= 3 and rt.stats["witness"].restarts == 1
        [error] = ledger.tail(ctx.store, 10, kinds=["loop_error"])
        assert error.detail["loop"] == "witness" and error.detail["type"] == "OperationalError"
    finally:
        ctx.close()


def test_a_locked_store_never_ends_the_daemon_however_many_beats_it_costs(tmp_path):
    """A backup (or a `sqlite3` session) holding the store locked: each beat waits its busy timeout
    and fails. Three in a row ended the daemon, though a busy store is never fatal (the module's
    own word); the heartbeat goes on once the lock is let go."""
    from fake_clock import FakeClock

    from loomtui import clock
    from loomtui.daemon.supervise import FATAL_HEARTBEAT_FAILURES, HEARTBEAT, run_heartbeat
    from loomtui.store import heartbeats
    from loomtui.store.db import Store

    loaded = Context.load(None, str(tmp_path / "state"), environ={})
    ctx = Context(loaded.config, None, loaded.state_dir, store_waits_on_clock=True)  # its busy wait: virtual
    holder = Store.in_dir(ctx.state_dir, timeout=0)
    rt = Runtime(ctx, [])
    beats: list[int] = []

    async def run() -> None:
        stop = asyncio.Event()
        holder.lock_out()
        task = asyncio.create_task(run_heartbeat(rt, stop, 0.01))
        for _ in range(200):  # many more failed beats than FATAL_HEARTBEAT_FAILURES
            await asyncio.sleep(0.01)
        assert not task.done()
        holder.let_in()
        while HEARTBEAT not in heartbeats.read(holder) and not task.done():
            await asyncio.sleep(0.05)
        beats.append(1)
        stop.set()
        await task

    try:
        with clock.use(FakeClock()):
            asyncio.run(asyncio.wait_for(run(), 120))
        assert rt.fatal == "" and beats and FATAL_HEARTBEAT_FAILURES == 3
    finally:
        holder.close()
        ctx.close()
        loaded.close()


def test_a_sleep_that_runs_out_leaves_no_task_behind():
    # The shielded wait left its inner stop.wait() pending at each timeout: every loop's every sleep
    # added a task for the life of the daemon (about 1 GB a month).
    from loomtui.daemon.supervise import sleep_or_stop

    async def run() -> tuple[list[bool], int, bool]:
        stop = asyncio.Event()
        slept = [await sleep_or_stop(stop, 0.001) for _ in range(200)]
        await asyncio.sleep(0)
        left = len(asyncio.all_tasks()) - 1  # this one
        stop.set()
        return slept, left, await sleep_or_stop(stop, 10)

    slept, left, stopped = asyncio.run(run())
    assert slept == [False] * 200 and left == 0 and stopped


def test_a_tick_that_ran_is_ran_when_the_locked_store_refuses_its_count(tmp_path):
    # `loom tick` counted its run after it: a store locked past its busy timeout then made a tick
    # that ran (and may have relaunched) exit 1, "failed".
    from fake_clock import FakeClock
    from harness import clock_waiting_context, locked_by_another

    from loomtui import clock
    from loomtui.daemon.oneshot import tick_once

    config = tmp_path / "config.toml"
    config.write_text("")
    ctx = clock_waiting_context(config, tmp_path / "state")
    blocker = locked_by_another(ctx.store.path)
    try:
        with clock.use(FakeClock()):
            outcome = tick_once(ctx, "notify")  # Telegram is off: the pass reads, writes nothing
        assert (outcome.status, outcome.exit_code) == ("ran", 0), outcome
    finally:
        blocker.close()
        ctx.close()


def test_a_canary_tick_the_locked_store_kept_from_probing_is_failed(tmp_path):
    """The daemon's canary loop keeps a locked store's error to record at its next tick; `loom
    tick canary` has no next tick, and it had said "ran" (exit 0) over a probe never made."""
    from fake_clock import FakeClock
    from harness import clock_waiting_context, locked_by_another

    from loomtui import clock
    from loomtui.daemon.oneshot import tick_once

    config = tmp_path / "config.toml"
    config.write_text(f'[agent]\ntmux_socket = "loomtest-tick-{tmp_path.name[-6:]}"\n')
    ctx = clock_waiting_context(config, tmp_path / "state")
    blocker = locked_by_another(ctx.store.path)
    try:
        with clock.use(FakeClock()):
            outcome = tick_once(ctx, "canary")  # due at once: its probe's run is a write
        assert (outcome.status, outcome.exit_code) == ("failed", 1), outcome
        assert "database is locked" in outcome.line
    finally:
        blocker.close()
        ctx.close()


def test_telegram_waiting_out_a_locked_store_never_stops_the_daemon_s_own_loop(tmp_path):
    """The Telegram services read and write the store between their awaits. On the daemon's loop,
    a store another process held locked made each such call wait out its busy time there: every
    other loop's next tick, the heartbeat and the stop signal waited with it. Each service runs on
    a loop of its own now. Here the sender has a delivery to record while another process holds
    the store; its busy wait is held open (the clock port's sleep, until the test lets it go), and
    a loop on the daemon's loop ticks on all the while."""
    import threading

    from fakebot import bot_config
    from harness import clock_waiting_context, locked_by_another

    from loomtui import clock
    from loomtui.daemon.loops import services
    from loomtui.daemon.supervise import run_service
    from loomtui.store import outbox

    class HeldSleep:
        """The real clocks; a sleep (the store's busy wait) waits for the test to let it go."""

        def __init__(self) -> None:
            self.sleeping, self.go = threading.Event(), threading.Event()
            self.gave_up = False  # the test never let it go: the daemon's loop was stuck behind it

        def wall(self) -> float:
            return clock.SYSTEM.wall()

        def monotonic(self) -> float:
            return clock.SYSTEM.monotonic()

        def boot_id(self) -> str | None:
            return clock.SYSTEM.boot_id()

        def sleep(self, seconds: float) -> None:
            self.sleeping.set()
            if not self.go.wait(60):
                self.gave_up = True
                self.go.set()
            clock.SYSTEM.sleep(min(seconds, 0.01))

    fake, config = bot_config(tmp_path, "123456:own-loop-test-token", 'poll_interval = "50ms"\n')
    ctx = clock_waiting_context(config, tmp_path / "state")
    [sender] = [s for s in services(ctx) if s.name == "telegram_sender"]
    ticks: list[int] = []
    spec = TickLoop("counter", 0.02, lambda loop_ctx, halt: lambda: ticks.append(1))
    rt = Runtime(ctx, [spec], [sender])
    held = HeldSleep()
    seen: list[int] = []

    async def run() -> None:
        stop = asyncio.Event()
        tasks = [asyncio.create_task(run_service(rt, sender, stop)), asyncio.create_task(run_tick_loop(rt, spec, stop))]
        blocker = locked_by_another(ctx.store.path)  # before the row: Telegram takes it, its record waits
        try:
            while not held.sleeping.is_set():
                await asyncio.sleep(0.02)
            before = len(ticks)
            while len(ticks) < before + 20:  # the sender waits in its busy wait all this time
                await asyncio.sleep(0.02)
            seen.append(len(ticks) - before)
        finally:
            blocker.close()
            held.go.set()
        stop.set()
        await asyncio.gather(*tasks)

    try:
        with clock.use(held):
            outbox.enqueue(ctx.store, "the ceiling's hold is in force")
            asyncio.run(asyncio.wait_for(run(), 120))
        assert not held.gave_up and seen and seen[0] >= 20
        assert fake.texts(42) == ["the ceiling's hold is in force"]
    finally:
        held.go.set()
        fake.stop()
        ctx.close()


def test_a_service_still_at_work_when_the_daemon_stops_finishes_before_its_store_closes(tmp_path):
    """The daemon's wait for its loops ran out (30 s) and cancelled the service's task: the task
    returned at once while the service's own thread was still inside a command, and its store was
    closed under it, the stop recorded and the daemon's lock let go while it acted. The task now
    ends once the service is done (or after a grace)."""
    import threading

    from loomtui.daemon.supervise import Service, on_a_loop_of_its_own

    ctx = Context.load(None, str(tmp_path / "state"), environ={})
    inside, finish = threading.Event(), threading.Event()
    done: list[str] = []

    async def busy(loop_ctx: Context, stop: asyncio.Event, step) -> None:
        await asyncio.to_thread(inside.set)
        await asyncio.to_thread(finish.wait, 120)  # a command that takes a while, deaf to the stop
        done.append("done")

    async def run() -> list[str]:
        stop = asyncio.Event()
        task = asyncio.create_task(on_a_loop_of_its_own(Service("busy", busy), ctx, stop))
        while not inside.is_set():
            await asyncio.sleep(0.01)
        stop.set()
        task.cancel()
        for _ in range(20):
            await asyncio.sleep(0.01)  # the cancelled task waits for the service
        seen = ["waiting" if not task.done() else "ended"]
        finish.set()
        try:
            await task
        except asyncio.CancelledError:
            seen.append("cancelled")
        return seen + done

    try:
        assert asyncio.run(asyncio.wait_for(run(), 120)) == ["waiting", "cancelled", "done"]
    finally:
        finish.set()
        ctx.close()


STUCK_DAEMON = """
import sys, threading
from loomtui.cli import _guarded
from loomtui.context import Context
from loomtui.daemon import supervise as daemon
from loomtui.daemon.supervise import TickLoop, leave, supervise

ctx = Context.load(None, sys.argv[1], environ={})
daemon.SERVICE_GRACE = 2.0  # its grace once cancelled: this one will never take it


def make(loop_ctx, halt):
    def tick():
        print("stuck", flush=True)
        threading.Event().wait()  # never returns, whatever the daemon asks (a /proc read in D state)
    return tick


sys.exit(leave(_guarded(lambda: supervise(ctx, [TickLoop("stuck", 3600.0, make)], []))))
"""


def test_a_daemon_whose_tick_is_stuck_for_good_still_stops_on_sigterm(tmp_path):
    """The loops are given their grace, the stop is recorded, and the process ends: the interpreter's
    exit joined the stuck worker thread and never came, until systemd's SIGKILL at its stop timeout."""
    import signal
    import subprocess
    import sys

    from conftest import loom_env
    from harness import wait_for

    state = tmp_path / "state"
    daemon = subprocess.Popen([sys.executable, "-c", STUCK_DAEMON, str(state)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=loom_env({}))
    try:
        assert daemon.stdout is not None
        assert daemon.stdout.readline().strip() == "stuck"
        daemon.send_signal(signal.SIGTERM)
        wait_for(lambda: daemon.poll() is not None, 180, what="the daemon to end after SIGTERM")
        assert daemon.returncode == 0, daemon.stderr.read() if daemon.stderr else ""
        assert "left behind: loom-stuck" in (daemon.stderr.read() if daemon.stderr else "")
        ctx = Context.load(None, str(state), environ={})
        try:
            assert ledger.tail(ctx.store, 10, kinds=["supervisor_stop"])
        finally:
            ctx.close()
    finally:
        if daemon.poll() is None:
            daemon.kill()
        daemon.wait()


BUSY_AT_STOP = """
import asyncio, os, sys, time
from loomtui.cli import _guarded
from loomtui.context import Context
from loomtui.daemon.supervise import Service, TickLoop, leave, supervise
from loomtui.store import ledger

ctx = Context.load(None, sys.argv[1], environ={})
PAST = float(sys.argv[2])  # how long each keeps at work once the stop came, deaf to it


def make(loop_ctx, halt):
    def tick():
        os.write(1, b"ticking\\n")  # one write: print from two threads can interleave its text and newline
        halt.wait()
        time.sleep(PAST)
        ledger.append(loop_ctx.store, "operator_alert", source="test", detail={"note": "tick done"})
    return tick


async def busy(service_ctx, stop, step):
    os.write(1, b"serving\\n")
    await stop.wait()
    await asyncio.to_thread(time.sleep, PAST)  # a command (a relaunch from Telegram) still under way
    ledger.append(service_ctx.store, "operator_alert", source="test", detail={"note": "service done"})


sys.exit(leave(_guarded(lambda: supervise(ctx, [TickLoop("slow", 3600.0, make)], [Service("busy", busy)]))))
"""


def test_a_tick_and_a_service_still_at_work_past_the_daemons_wait_finish_before_the_stop_is_recorded(tmp_path):
    """Stopped, the daemon waits 30 s for its loops, then cancels those still at work and gives them
    SERVICE_GRACE more. The cancel was sent twice (main_async, then the end of the event loop), and the
    second cut the service's grace to nothing; a tick was given none at all: their stores were closed
    under them, the stop recorded, supervisor.lock let go and the process ended while each still acted.
    Here both work a few seconds past the daemon's wait: each ends, then the stop is recorded."""
    import signal
    import subprocess
    import sys

    from conftest import loom_env
    from harness import wait_for

    from loomtui.daemon.supervise import SERVICE_GRACE

    past = 33.0  # past the daemon's 30 s wait, well inside its grace
    assert past < 30.0 + SERVICE_GRACE
    state = tmp_path / "state"
    daemon = subprocess.Popen([sys.executable, "-c", BUSY_AT_STOP, str(state), str(past)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=loom_env({}))
    try:
        assert daemon.stdout is not None
        assert {daemon.stdout.readline().strip(), daemon.stdout.readline().strip()} == {"ticking", "serving"}
        daemon.send_signal(signal.SIGTERM)
        wait_for(lambda: daemon.poll() is not None, 180, what="the daemon to end after SIGTERM")
        stderr = daemon.stderr.read() if daemon.stderr else ""
        assert daemon.returncode == 0, stderr
        assert "left behind" not in stderr, stderr
        ctx = Context.load(None, str(state), environ={})
        try:
            said = [e.detail.get("note") or e.kind for e in ledger.tail(ctx.store, 20,
                                                                        kinds=["operator_alert", "supervisor_stop"])]
        finally:
            ctx.close()
        assert sorted(said[:2]) == ["service done", "tick done"] and said[2:] == ["supervisor_stop"], said
    finally:
        if daemon.poll() is None:
            daemon.kill()
        daemon.wait()
