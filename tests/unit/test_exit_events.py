"""The daemon's exit events, each on real parts: the signals directory watched with watchfiles,
and a real process whose end a pidfd reports. Each rings a doorbell; nothing here decides."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading

import pytest

from loomtui import platform
from loomtui.agent import launches, proctree
from loomtui.context import Context
from loomtui.daemon.loops import exit_watch, signal_watch
from loomtui.daemon.supervise import Doorbell


def _exit_watch_here() -> bool:
    watch = platform.current().exit_watch(os.getpid())
    if watch is None:
        return False
    watch.close()
    return True


EXIT_WATCH = _exit_watch_here()


@pytest.fixture
def ctx(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n[agent]\ntmux_socket = "loomtest-ev-{tmp_path.name[-6:]}"\n')
    context = Context.load(str(config), None, environ={})
    yield context
    context.close()


async def rung(bell: Doorbell, act, step, halt: threading.Event, timeout: float = 60.0) -> bool:
    """Run `step` in a thread (until `halt`), do `act`, and say whether `bell` rang within `timeout`."""
    wake = bell.bind()
    worker = threading.Thread(target=lambda: [step() for _ in iter(lambda: halt.is_set(), True)], daemon=True)
    worker.start()
    try:
        await asyncio.sleep(0)
        await asyncio.to_thread(act)
        try:
            await asyncio.wait_for(wake.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False
    finally:
        halt.set()
        await asyncio.to_thread(worker.join, 30)


def test_once_the_watch_is_in_place_every_loop_looks_once(ctx):
    # A pane that died before the watch began wrote its signal unseen: each loop looks anyway.
    launches.ring(ctx.state_dir, launches.PANE_DIED)
    died, relaunched = Doorbell(), Doorbell()
    halt = threading.Event()
    step = signal_watch({launches.PANE_DIED: died, launches.RELAUNCHED: relaunched})(ctx, halt)

    async def scenario() -> tuple[bool, bool]:
        other = relaunched.bind()
        got = await rung(died, lambda: None, step, halt)
        return got, other.is_set()

    assert asyncio.run(scenario()) == (True, True)


def test_only_the_named_signal_rings_once_the_watch_is_up(ctx):
    died, relaunched = Doorbell(), Doorbell()
    halt = threading.Event()
    step = signal_watch({launches.PANE_DIED: died, launches.RELAUNCHED: relaunched})(ctx, halt)

    async def scenario() -> tuple[bool, bool]:
        wake_died, wake_relaunched = died.bind(), relaunched.bind()
        worker = threading.Thread(target=step, daemon=True)
        worker.start()
        try:
            await asyncio.wait_for(wake_died.wait(), 60)  # the watch is in place
            wake_died.clear()
            wake_relaunched.clear()
            await asyncio.to_thread(launches.ring, ctx.state_dir, launches.RELAUNCHED)
            await asyncio.wait_for(wake_relaunched.wait(), 60)
            return wake_relaunched.is_set(), wake_died.is_set()
        finally:
            halt.set()
            await asyncio.to_thread(worker.join, 30)

    assert asyncio.run(scenario()) == (True, False)


@pytest.mark.skipif(not EXIT_WATCH, reason="no exit watch on this platform (LOOM_PLATFORM=portable: the hook and "
                    "the exit poll alone)")
def test_the_recorded_pane_process_ending_rings_the_watchdog(ctx):
    proc = subprocess.Popen(["sleep", "600"])
    try:
        ctx.store.set_meta(launches.PROCS_KEY, json.dumps({"pane_pid": proc.pid,
                                                           "pane_started": proctree.start_time(proc.pid)}))
        bell, halt = Doorbell(), threading.Event()
        step = exit_watch(bell)(ctx.clone(), halt)
        assert asyncio.run(rung(bell, proc.kill, step, halt))
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(not EXIT_WATCH, reason="no exit watch on this platform (LOOM_PLATFORM=portable: the hook and "
                    "the exit poll alone)")
def test_a_reused_pid_is_never_watched_as_the_agent(ctx):
    proc = subprocess.Popen(["sleep", "600"])
    try:
        # Recorded with another start time: this pid now belongs to someone else.
        ctx.store.set_meta(launches.PROCS_KEY, json.dumps({"pane_pid": proc.pid, "pane_started": -1.0}))
        bell, halt = Doorbell(), threading.Event()
        step = exit_watch(bell)(ctx.clone(), halt)

        async def scenario() -> bool:
            wake = bell.bind()
            await asyncio.to_thread(step)  # not running as recorded: the watchdog is asked to look
            return wake.is_set()

        assert asyncio.run(scenario())
        halt.set()
        step()  # and nothing is watched afterwards: the step just waits out its halt
    finally:
        proc.kill()
        proc.wait()
