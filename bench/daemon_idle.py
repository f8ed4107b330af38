"""The daemon at rest: CPU and memory of `loom supervise` watching a healthy demo agent for a minute.

Anchors, measured in the same run over the same minute:
- a bare Python interpreter sleeping (the floor of any Python daemon's memory);
- supervisord keeping one `sleep` alive, where it is installed (`supervisord` on PATH, or
  LOOM_BENCH_SUPERVISORD=/path/to/supervisord): a process supervisor that watches no pane,
  probes nothing and scans no log.
Not to regress: 46 MiB RSS and 0.25 % of one core (issue 14's figures).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from _common import exit_on_sigterm, fmt, machine, ratio_line, was_line
from harness import AgentHarness, wait_for

SECONDS = 60


def supervisord(root: Path) -> subprocess.Popen | None:
    binary = os.environ.get("LOOM_BENCH_SUPERVISORD") or shutil.which("supervisord")
    if not binary:
        return None
    conf = root / "supervisord.conf"
    conf.write_text(f"[supervisord]\nnodaemon=true\nlogfile={root}/supervisord.log\npidfile={root}/supervisord.pid\n"
                    f"[unix_http_server]\nfile={root}/supervisor.sock\n"
                    "[program:sleeper]\ncommand=sleep 3600\nautorestart=true\n")
    return subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> int:
    exit_on_sigterm()
    print(f"machine: {machine()}")
    root = Path(tempfile.mkdtemp(prefix="loom-bench-idle-"))
    harness = AgentHarness(root / "loom", sections={"canary": {"interval": "20m"}, "watchdog": {"interval": "30s"}})
    others: list[subprocess.Popen] = []
    try:
        harness.start()
        proc = harness.popen("-m", "loomtui", "supervise", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        bare = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        others.append(bare)
        sup = supervisord(root)
        if sup is not None:
            others.append(sup)
        watched = {"loom supervise": psutil.Process(proc.pid), "bare python": psutil.Process(bare.pid)}
        if sup is not None:
            watched["supervisord"] = psutil.Process(sup.pid)
        wait_for(lambda: harness.events("supervisor_start"), what="the daemon up")
        time.sleep(5)  # let start-up (imports, first ticks) finish before measuring the steady state
        cpu0 = {k: p.cpu_times() for k, p in watched.items()}
        t0 = time.monotonic()
        time.sleep(SECONDS)
        wall = time.monotonic() - t0
        figures = {}
        for name, p in watched.items():
            c = p.cpu_times()
            used = (c.user + c.system) - (cpu0[name].user + cpu0[name].system)
            figures[name] = (100 * used / wall, p.memory_info().rss, p.num_threads())
        loom_cpu, loom_rss, threads = figures["loom supervise"]
        print(f"idle over {wall:.0f} s: loom supervise CPU {loom_cpu:.2f} % of one core, RSS {fmt(loom_rss, 'MiB')}, "
              f"threads {threads}")
        for name in ("bare python", "supervisord"):
            if name not in figures:
                print("  supervisord not installed: that anchor skipped (LOOM_BENCH_SUPERVISORD=/path to add it)")
                continue
            cpu, rss, _ = figures[name]
            print(ratio_line("  RSS", loom_rss, name, rss, "MiB"))
            print(f"  CPU {loom_cpu:.2f} % of one core   anchor {name} {cpu:.2f} %   "
                  f"{'ratio ' + format(loom_cpu / cpu, '.3g') + 'x' if cpu > 0 else '(anchor used no measurable CPU)'}")
        print(was_line("  RSS, not to regress", loom_rss, 46 * 2**20, "MiB"))
        print(was_line("  CPU, not to regress", loom_cpu, 0.25, "%"))
        proc.terminate()
        proc.wait(30)
        return 0
    finally:
        for other in others:
            other.terminate()
            try:
                other.wait(10)
            except subprocess.TimeoutExpired:
                other.kill()
        harness.cleanup()


if __name__ == "__main__":
    sys.exit(main())
