"""Recovery speed on the real demo agent under `loom supervise` (figures the tests no longer assert).

- crash -> relaunch recorded: noticed by the exit watch (`watchdog.exit_check`, default 2 s);
- relaunch -> first ack: `loom canary` asked again and again after the relaunch until it acks
  (each crash on a fresh setup, so the relaunch backoff never applies);
- the poisoned-session incident: from the resumed session's wedge to an acking fresh agent,
  beside its bound (one canary interval + two ack timeouts + the relaunch itself).

Anchor, measured in the same run: the demo agent's own cold start (a relaunch cannot beat it).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, summary
from harness import AgentHarness, wait_for

from loomtui.store.db import Store

ROUNDS = 5


def relaunches(harness: AgentHarness, cause: str) -> list[dict]:
    return [e for e in harness.events("relaunch") if e["cause"] == cause]


def canary_runs(harness: AgentHarness) -> list[dict]:
    with Store.in_dir(harness.state_dir) as store:
        return [dict(r) for r in store.query("SELECT * FROM canary_runs ORDER BY id")]


def cold_start(root: Path) -> float:
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "loomtui.demo.agent", "--data-dir", str(root), "--bot", ""],
                   input="", capture_output=True, cwd=ROOT, check=True)
    return time.monotonic() - t0


def crash_once() -> tuple[float, float]:
    """One crash on a fresh setup: a second crash within the hour would be held back by the backoff."""
    harness = AgentHarness(Path(tempfile.mkdtemp(prefix="loom-bench-recovery-")),
                           sections={"canary": {"interval": "20m", "ack_timeout": "30s"}})
    try:
        harness.start()
        daemon = harness.popen("-m", "loomtui", "supervise", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: harness.events("supervisor_start"), what="the daemon up")
        assert harness.loom("inject", "/crash").returncode == 0
        sent = harness.events("inject")[-1]["ts"]
        event = wait_for(lambda: relaunches(harness, "crash") + relaunches(harness, "exit"), 60, what="a relaunch")[0]
        # A probe during the relaunch's boot grace is skipped (it would prove nothing): ask again.
        wait_for(lambda: harness.loom("canary").returncode == 0, 120, interval=0.2, what="an ack")
        heard = canary_runs(harness)[-1]["ack_at"] - event["ts"]
        daemon.terminate()
        daemon.wait(30)
        return event["ts"] - sent, heard
    finally:
        harness.cleanup()


def crashes() -> None:
    samples = [crash_once() for _ in range(ROUNDS)]
    print(summary("crash -> relaunch recorded", [noticed for noticed, _ in samples]))
    print(summary("relaunch -> first ack (on demand)", [heard for _, heard in samples]))


def incident() -> None:
    interval, ack = 3.0, 2.0
    harness = AgentHarness(Path(tempfile.mkdtemp(prefix="loom-bench-incident-")),
                           sections={"canary": {"interval": f"{interval:g}s", "ack_timeout": f"{ack:g}s"},
                                     "agent": {"boot_grace": "2s"}})
    try:
        harness.start()
        harness.popen("-m", "loomtui", "supervise", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: any(r["result"] == "ok" for r in canary_runs(harness)), 60, what="a healthy ack")
        assert harness.loom("inject", "/poison").returncode == 0
        fresh = wait_for(lambda: [e for e in relaunches(harness, "canary_failed") if e["detail"]["mode"] == "fresh"],
                         180, what="the fresh start")[0]
        resumed = relaunches(harness, "canary_failed")[0]
        acked = wait_for(lambda: [r for r in canary_runs(harness) if r["result"] == "ok" and r["sent_at"] > fresh["ts"]],
                         60, what="the fresh session acking")[0]
        relaunch = acked["ack_at"] - fresh["ts"]
        deaf = acked["ack_at"] - resumed["ts"]
        bound = interval + 2 * ack + relaunch
        print(f"{'poisoned session: resumed -> heard again':<46} {deaf:8.2f} s    bound {bound:8.2f} s "
              f"(interval {interval:g} + 2 x ack {ack:g} + relaunch {relaunch:.2f})")
    finally:
        harness.cleanup()


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="loom-bench-cold-"))
    print(summary("anchor: demo agent cold start", [cold_start(root) for _ in range(5)]))
    crashes()
    incident()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
