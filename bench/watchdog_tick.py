"""Watchdog costs as the machine fills with processes: quiet, +200, +2,000, +20,000.

At each level, beside its anchor measured at that level:
- the foreign-poller scan (/proc cmdlines, needle prefilter) against one `ps -eo pid,ppid,args`;
  target <= 0.5x. psutil's process_iter (what it replaced) is shown for scale;
- the full watchdog observation (what every tick does) against its 2 ms target, flat across
  the levels, both ways tmux can be asked: through the control-mode client (the default from
  tmux 3.7; LOOM_TMUX_CONTROL=1 before) and one tmux process per query (the default before 3.7),
  with its parts: list-panes, capture-pane when modals are configured, the tree walk with its
  cmdlines, and the store reads; one tmux process as the anchor. Without a control client a
  look can carry list-panes and capture-pane in one tmux process (`AgentPane.look`, asked by
  `driver.observe(with_screen=True)`): measured on its own as well, with the floor of any
  process (spawning /bin/true) beside it;
- the tree walk beside psutil's children(recursive=True).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psutil
from _common import bound_line, exit_on_sigterm, machine, median, ratio_line, run_wall, timed
from harness import AgentHarness, wait_for

from loomtui.agent import launches, proctree
from loomtui.agent.tmux import CONTROL_ENV, CONTROL_SAFE_FROM, control_mode_safe, tmux_binary
from loomtui.agent.watchdog import Watchdog

LEVELS = tuple(int(x) for x in os.environ.get("LOOM_BENCH_LEVELS", "0 200 2000 20000").split())


def crowd(n: int) -> subprocess.Popen | None:
    """n sleeping processes in one process group (one kill ends them all)."""
    if not n:
        return None
    proc = subprocess.Popen(["bash", "-c", f"for i in $(seq {n}); do sleep 1800 & done; wait"], start_new_session=True)
    try:
        wait_for(lambda: len(proctree.children(proc.pid)) >= n, timeout=600, interval=0.5, what=f"{n} more processes")
    except BaseException:
        end_crowd(proc)
        raise
    return proc


def end_crowd(proc: subprocess.Popen | None) -> None:
    if proc is None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


@contextlib.contextmanager
def tmux_path(mode: str):
    """Queries one tmux process each ("0") or through the control-mode client ("1") while inside."""
    os.environ[CONTROL_ENV] = mode
    try:
        yield
    finally:
        del os.environ[CONTROL_ENV]


def interleaved(fns: list, n: int) -> list[list[float]]:
    """n wall-clock samples of each of fns, one of each in turn."""
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(n):
        for fn, into in zip(fns, samples):
            into.extend(timed(fn, 1))
    return samples


def observe_in_one_look(watchdog: Watchdog) -> None:
    """Watchdog.observe's work with the screen asked for with the pane (one tmux process per look
    without a control client): the driver's look, the tree walk, the store reads. Watchdog.observe
    itself does this once it passes `with_screen` (agent/watchdog.py)."""
    ctx = watchdog.ctx
    facts = watchdog.driver.observe(with_screen=bool(watchdog.settings.modals))
    assert facts.screen is not None or not watchdog.settings.modals, "the look brought no screen"
    launches.last_launch(ctx), launches.since_launch(ctx), launches.recorded_processes(ctx)


def level(watchdog: Watchdog, root: int, poller_match: str) -> None:
    n = len(psutil.pids())
    print(f"-- {n} processes on the machine")
    ps = median(run_wall(["ps", "-eo", "pid,ppid,args"], 5))
    ours = set(proctree.walk(root)[0])
    scan = median(timed(lambda: proctree.foreign_pollers(poller_match, ours), 10))
    print(ratio_line("  foreign-poller scan (/proc)", scan, "ps -eo pid,ppid,args", ps, target=0.5))
    pattern = re.compile(poller_match)
    old = median(timed(lambda: proctree._foreign_pollers_psutil(pattern, ours), 3))
    print(ratio_line("    (psutil process_iter, what it replaced)", old, "ps -eo pid,ppid,args", ps))
    pane = watchdog.driver.pane
    with tmux_path("0"):
        # Taken in turns, so a load that comes and goes (a shared machine) weighs on each alike.
        tmux, plain_observe, one_look, spawn = (median(samples) for samples in interleaved(
            [pane.info, watchdog.observe, lambda: observe_in_one_look(watchdog),
             lambda: subprocess.run(["/bin/true"])], 60))
    with tmux_path("1"):
        pane.info()
        assert pane.server.control_client(), "no control-mode client: the figures below would be the plain path's"
        observe = median(timed(watchdog.observe, 100))
        queried = median(timed(pane.info, 100))
    print(bound_line("  full watchdog observation, control mode", observe, 0.002, anchor=("one tmux call", tmux)))
    print(bound_line("  full watchdog observation, process per query", plain_observe, 0.002,
                     anchor=("one tmux call", tmux)))
    print(bound_line("  full observation, one tmux process per look", one_look, 0.002,
                     anchor=("one tmux call", tmux)))
    print(ratio_line("    (the floor of any process: /bin/true)", spawn, "one tmux call", tmux))
    print(ratio_line("    of which: list-panes (control mode)", queried, "one tmux call", tmux))
    agent = watchdog.ctx.config.agent
    inspect = median(timed(lambda: proctree.inspect(root, agent.process_match, agent.poller_match), 50))
    print(ratio_line("    of which: tree walk + cmdlines", inspect, "one tmux call", tmux))
    if agent.modals:
        with tmux_path("1"):
            capture = median(timed(watchdog.driver.screen, 100))
        print(ratio_line("    of which: capture-pane (modals set)", capture, "one tmux call", tmux))
    store = median(timed(lambda: (launches.last_launch(watchdog.ctx), launches.since_launch(watchdog.ctx),
                                  launches.recorded_processes(watchdog.ctx)), 50))
    print(ratio_line("    of which: store reads", store, "one tmux call", tmux))
    walk = median(timed(lambda: proctree.walk(root), 50))
    kids = median(timed(lambda: psutil.Process(root).children(recursive=True), 5))
    print(ratio_line("  tree walk (/proc children)", walk, "psutil children(recursive)", kids))


def main() -> int:
    exit_on_sigterm()
    print(f"machine: {machine()}")
    safe = control_mode_safe(tmux_binary())
    print(f"{subprocess.run([tmux_binary(), '-V'], capture_output=True, text=True).stdout.strip()}: the daemon's "
          f"default is {'control mode' if safe else 'one tmux process per query'} (control mode by default from "
          f"tmux {'.'.join(map(str, CONTROL_SAFE_FROM))}: loomtui/agent/tmux.py)")
    harness = AgentHarness(Path(tempfile.mkdtemp(prefix="loom-bench-")))
    try:
        harness.start()
        ctx = harness.ctx()
        watchdog = Watchdog(ctx)
        root = wait_for(harness.pane_pid, what="the pane")
        wait_for(lambda: proctree.inspect(root, ctx.config.agent.process_match, ctx.config.agent.poller_match).poller
                 == proctree.PRESENT, what="the agent and its poller")
        crowds: list[subprocess.Popen | None] = []
        try:
            added = 0
            for target in LEVELS:
                crowds.append(crowd(target - added))  # the crowd only grows from level to level
                added = target
                level(watchdog, root, ctx.config.agent.poller_match)
        finally:
            for proc in crowds:
                end_crowd(proc)
        return 0
    finally:
        harness.cleanup()


if __name__ == "__main__":
    started = time.monotonic()
    code = main()
    print(f"({time.monotonic() - started:.0f} s)")
    raise SystemExit(code)
