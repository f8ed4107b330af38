"""Watchdog tick cost with thousands of other processes on the machine.

The tick walks only the agent's own tree (from the pane's pid) and must not get slower as the
machine gets busier; psutil's children(recursive=True) is shown beside it for scale, and the
rarer machine-wide foreign-poller scan is timed too.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

import psutil
from _common import summary
from harness import AgentHarness, wait_for

from loomtui.agent import proctree
from loomtui.agent.watchdog import Watchdog

CROWD = 2000


def time_it(fn, n=50):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main() -> int:
    harness = AgentHarness(Path(tempfile.mkdtemp(prefix="loom-bench-")))
    crowd: list[subprocess.Popen] = []
    try:
        harness.start()
        ctx = harness.ctx()
        watchdog = Watchdog(ctx)
        root = wait_for(harness.pane_pid, what="the pane")
        for label in ("quiet machine", f"{CROWD} more processes"):
            if crowd == [] and label != "quiet machine":
                crowd = [subprocess.Popen(["sleep", "600"]) for _ in range(CROWD)]
            print(f"-- {label}: {len(psutil.pids())} processes")
            print(summary("  walk the agent's tree (/proc children)", time_it(lambda: proctree.walk(root))))
            print(summary("  psutil children(recursive=True)",
                          time_it(lambda: psutil.Process(root).children(recursive=True))))
            print(summary("  full watchdog observation", time_it(watchdog.observe)))
            print(summary("  fast exit check (one tmux call)", time_it(watchdog.driver.pane.info)))
            print(summary("  foreign-poller scan (whole machine)",
                          time_it(lambda: proctree.foreign_pollers(ctx.config.agent.poller_match, set()), 10)))
        return 0
    finally:
        for proc in crowd:
            proc.kill()
        for proc in crowd:
            proc.wait()
        harness.cleanup()


if __name__ == "__main__":
    raise SystemExit(main())
