"""Several agents under one `loom supervise` (issue 18's targets; figures the tests never assert).

N demo agents (default 20), each on a tmux server of its own, under one daemon:
- every agent's watchdog tick starts within 1 s of its schedule at p99: the daemon logs, at DEBUG,
  how late each tick began against the time it was planned for (`tick NAME late S`; a tick rung
  early by a doorbell counts as on time). The watchdog runs every 5 s here instead of the default
  30 s: six times the ticks to compete for the two cores, and six times the samples;
- the daemon's RSS, under 100 MB (anchor: the same daemon with one agent, same run);
- a crash in one agent (kill -9 of its process) recovered, relaunched and witnessed by a canary
  ack, as fast as with one agent (anchor: one agent, each crash on a fresh setup so no backoff
  applies, same run; the N agents are each crashed once, for the same reason).

Run: .venv/bin/python bench/agents.py [N]
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import bound_line, machine, ratio_line
from harness import AgentsHarness, toml_value, wait_for

from loomtui.demo.launcher import DEMO_READY

SAMPLE_SECONDS = 120
KILLS = 5
LATE = re.compile(r" tick (watchdog(?::\S+)?) late (-?[0-9.]+)")
SECTIONS = {"watchdog": {"interval": "5s"}}


def daemon_rss(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0.0


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def pane_pid(h: AgentsHarness, name: str) -> int:
    out = h.members[name].tmux("display-message", "-p", "-t", "agent", "#{pane_pid}")
    return int(out.stdout.strip())


def kill_and_time(h: AgentsHarness, name: str) -> tuple[float, float, str]:
    """kill -9 of the agent's process -> (relaunch recorded, its canary ack) in seconds, and the
    relaunch's cause: `crash` when tmux saw the signal, `exit` when tmux 3.3a lost the status (the
    driver then asks again for 0.3 s before it decides: about 330 ms more, whatever the agents)."""
    before = {e["id"] for e in h.events("relaunch", agent=name)}
    victim = pane_pid(h, name)
    t0 = time.time()
    os.kill(victim, signal.SIGKILL)
    relaunch = wait_for(lambda: [e for e in h.events("relaunch", agent=name) if e["id"] not in before], 120,
                        what=f"{name} relaunched")[0]
    ack = wait_for(lambda: [e for e in h.events("canary", agent=name)
                            if e["detail"].get("witnessed") == relaunch["id"]], 180, what=f"{name} witnessed")[0]
    return relaunch["ts"] - t0, ack["ts"] - t0, relaunch["cause"]


def run(root: Path, names: list[str], log: Path, sample: float, kills: int) -> dict:
    """One daemon over `names`: its ticks' lateness over `sample` seconds, its RSS, then `kills`
    crashes, each of a different agent (a second crash of one agent would meet its backoff)."""
    h = AgentsHarness(root, names, SECTIONS)
    try:
        # Default settings, as bench/recovery.py has them (the harness shortens them for the tests),
        # with the demo's ready prompt: a relaunch is probed as soon as the agent shows it.
        text = h.config_path.read_text()
        text = re.sub(r"(?m)^boot_grace = .*$", 'boot_grace = "90s"', text)
        text = re.sub(r"(?m)^resume_check = .*$", 'resume_check = "5s"', text)
        text = re.sub(r"(?m)^(name = .*)$", lambda m: f"{m.group(1)}\nready_match = {toml_value(DEMO_READY)}", text)
        h.config_path.write_text(text)
        for name in names:
            h.start(name)
        with open(log, "w") as err:
            daemon = h.popen("-m", "loomtui", "supervise", "--log-level", "DEBUG", stderr=err,
                             stdout=open(os.devnull, "w"))
            time.sleep(10)  # the daemon's start, its first ticks and probes: not the steady state
            mark = log.stat().st_size
            time.sleep(sample)
            rss = daemon_rss(daemon.pid)
            with open(log) as f:
                f.seek(mark)
                lates = [max(0.0, float(m.group(2))) for m in LATE.finditer(f.read())]
            timed = [kill_and_time(h, names[i]) for i in range(kills)]
        return {"rss": rss, "lates": lates, "kills": timed}
    finally:
        h.cleanup()


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    print(f"machine: {machine()}")
    root = Path(tempfile.mkdtemp(prefix="loom-bench-agents-"))
    # The anchor: one agent, each crash on a fresh setup (as bench/recovery.py does).
    ones = [run(root / f"one{i}", ["solo"], root / f"one{i}.log", 30 if i == 0 else 1, 1) for i in range(KILLS)]
    one = {**ones[0], "kills": [o["kills"][0] for o in ones]}
    many = run(root / "many", [f"a{i:02d}" for i in range(1, n + 1)], root / "many.log", SAMPLE_SECONDS,
               min(KILLS, n))
    if not many["lates"]:
        print("no tick lateness lines in the daemon's log (is it logging at DEBUG?)")
        return 1
    print(f"{n} agents, watchdog every 5 s (its loop wakes every exit_check, 2 s), {SAMPLE_SECONDS} s: "
          f"{len(many['lates'])} watchdog loop ticks")
    print(bound_line(f"watchdog tick start after schedule, p99 ({n} agents)", p99(many["lates"]), 1.0,
                     anchor=("one agent p99", p99(one["lates"]) or 1e-6)))
    print(f"  median {statistics.median(many['lates']) * 1000:.1f} ms, max {max(many['lates']) * 1000:.1f} ms; "
          f"one agent: median {statistics.median(one['lates']) * 1000:.1f} ms")
    print(bound_line(f"daemon RSS ({n} agents)", many["rss"], 100 * 2**20, "MiB",
                     anchor=("one agent", one["rss"])))
    print(f"  relaunch causes: {n} agents {sorted(k[2] for k in many['kills'])}, "
          f"one agent {sorted(k[2] for k in one['kills'])}")
    # Like with like: a kill whose status tmux lost costs its 0.3 s settle with one agent or twenty.
    for cause in ("crash", "exit"):
        mine = [k for k in many["kills"] if k[2] == cause]
        anchor = [k for k in one["kills"] if k[2] == cause]
        if not mine or not anchor:
            continue
        for i, label in enumerate(("kill -9 -> relaunched", "kill -9 -> witnessed")):
            print(ratio_line(f"{label}, {cause} ({n} agents, n={len(mine)})", statistics.median(k[i] for k in mine),
                             f"one agent (n={len(anchor)})", statistics.median(k[i] for k in anchor)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
