"""The daemon at rest: CPU and memory of `loom supervise` watching a healthy demo agent for a minute."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from _common import ROOT
from harness import AgentHarness, wait_for

SECONDS = 60


def main() -> int:
    harness = AgentHarness(Path(tempfile.mkdtemp(prefix="loom-bench-idle-")),
                           sections={"canary": {"interval": "20m"}, "watchdog": {"interval": "30s"}})
    try:
        harness.start()
        proc = harness.popen("-m", "loomtui", "supervise", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        daemon = psutil.Process(proc.pid)
        wait_for(lambda: harness.events("supervisor_start"), what="the daemon up")
        time.sleep(5)  # let start-up (imports, first ticks) finish before measuring the steady state
        cpu0 = daemon.cpu_times()
        t0 = time.monotonic()
        time.sleep(SECONDS)
        cpu1 = daemon.cpu_times()
        wall = time.monotonic() - t0
        used = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
        mem = daemon.memory_info()
        print(f"idle over {wall:.0f} s: CPU {used:.2f} s ({100 * used / wall:.2f}% of one core), "
              f"RSS {mem.rss / 2**20:.1f} MiB, threads {daemon.num_threads()}")
        proc.terminate()
        proc.wait(30)
        return 0
    finally:
        harness.cleanup()


if __name__ == "__main__":
    sys.exit(main())
