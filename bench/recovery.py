"""Recovery speed on the real demo agent under `loom supervise` (figures the tests never assert).

- kill -9 of the agent -> relaunch recorded (the ledger's `relaunch` event): tmux's pane-died hook
  wakes the watchdog; the `exit_check` poll is only the safety net;
- kill -9 -> the new agent ready (its prompt seen: `agent.ready_match`, the demo config's);
- kill -9 -> witnessed: the ledger's canary `ok` tied to that relaunch, probed by the daemon
  itself with nobody asking;
- the same relaunch with the hook removed (the pidfd alone), and with neither hook nor pidfd
  (the exit poll alone: what a tmux that loses the hook on a machine without pidfds gets);
- the poisoned-session incident: from the resumed session's wedge to an acking fresh agent,
  beside its bound (one canary interval + two ack timeouts + the relaunch itself).

Default settings (watchdog, canary, boot grace, resume check) with the demo config's ready_match;
each kill on a fresh setup, so the relaunch backoff never applies. Anchor, measured in the same
run: the demo agent's own cold start (a relaunch cannot beat it).
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, bound_line, summary
from harness import AgentHarness, wait_for

from loomtui.agent import launches
from loomtui.demo.launcher import DEMO_READY
from loomtui.store import heartbeats
from loomtui.store.db import Store

ROUNDS = 7
FALLBACK_ROUNDS = 3
# The daemon as a machine without pidfds runs it.
NO_PIDFD = "import os, runpy; del os.pidfd_open; runpy.run_module('loomtui', run_name='__main__', alter_sys=True)"
RELAUNCHED_TARGET = 0.5
EXIT_CHECK = 2.0  # watchdog.exit_check's default
PHASE = random.Random(14)
WITNESSED_TARGET = 3.0
# The harness shortens these for the tests; the bench puts the defaults back.
DEFAULTS = {"boot_grace": "90s", "resume_check": "5s", "ready_match": DEMO_READY}


def relaunches(harness: AgentHarness, cause: str) -> list[dict]:
    return [e for e in harness.events("relaunch") if e["cause"] == cause]


def canary_runs(harness: AgentHarness) -> list[dict]:
    with Store.in_dir(harness.state_dir) as store:
        return [dict(r) for r in store.query("SELECT * FROM canary_runs ORDER BY id")]


def witness(harness: AgentHarness, relaunch_id: int) -> list[dict]:
    return [e for e in harness.events("canary") if e["detail"].get("witnessed") == relaunch_id]


def ready_at(harness: AgentHarness) -> float | None:
    with Store.in_dir(harness.state_dir) as store:
        raw = store.get_meta(launches.LAUNCH_KEY)
    ready = json.loads(raw).get("ready") if raw else None
    return ready["ts"] if ready else None


def watchdog_ticks(harness: AgentHarness) -> int:
    with Store.in_dir(harness.state_dir) as store:
        beat = heartbeats.read(store).get("supervisor")
    return beat["detail"]["loops"].get("watchdog", {}).get("ticks", 0) if beat else 0


def cold_start(root: Path) -> float:
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "loomtui.demo.agent", "--data-dir", str(root), "--bot", ""],
                   input="", capture_output=True, cwd=ROOT, check=True)
    return time.monotonic() - t0


def kill_once(hook: bool = True, pidfd: bool = True) -> tuple[float, float, float]:
    """One kill -9 on a fresh setup: seconds to the relaunch recorded, the agent ready, the witness."""
    harness = AgentHarness(Path(tempfile.mkdtemp(prefix="loom-bench-recovery-")), sections={"agent": DEFAULTS})
    try:
        harness.start()
        if not hook:
            harness.tmux("set-hook", "-u", "-w", "-t", "=agent:0", "pane-died")
        daemon = harness.popen(*(["-m", "loomtui"] if pidfd else ["-c", NO_PIDFD]), "supervise",
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        start = harness.events("relaunch")[-1]
        # Killed once the daemon has witnessed the start (no probe is being typed at that moment)
        # and has run a while (its watch on the signals directory is in place: steady state).
        wait_for(lambda: witness(harness, start["id"]), 120, what="the start witnessed")
        wait_for(lambda: watchdog_ticks(harness) >= 2, 60, what="the daemon settled")
        pid = wait_for(harness.agent_pid, 30, what="the agent's pid")
        # At a random moment of the exit poll's period: "the daemon settled" is read from its
        # heartbeat, which keeps step with the poll, and would otherwise kill just after a poll.
        time.sleep(PHASE.uniform(0, EXIT_CHECK))
        killed = time.time()
        os.kill(pid, signal.SIGKILL)
        event = wait_for(lambda: relaunches(harness, "crash") + relaunches(harness, "exit"), 60, what="a relaunch")[0]
        ack = wait_for(lambda: witness(harness, event["id"]), 120, what="the witnessing ack")[0]
        ready = ready_at(harness)
        daemon.terminate()
        daemon.wait(30)
        return event["ts"] - killed, (ready - killed) if ready else float("nan"), ack["ts"] - killed
    finally:
        harness.cleanup()


def kills(anchor: float) -> None:
    samples = [kill_once() for _ in range(ROUNDS)]
    relaunched = [s[0] for s in samples]
    ready = [s[1] for s in samples]
    witnessed = [s[2] for s in samples]
    cold = ("demo agent cold start", anchor)
    print(bound_line("kill -9 -> relaunch recorded (p50)", statistics.median(relaunched), RELAUNCHED_TARGET,
                     anchor=cold))
    print(summary("  kill -9 -> relaunch recorded", relaunched))
    print(summary("  kill -9 -> new agent ready (prompt seen)", ready))
    print(bound_line("kill -9 -> witnessed by a canary ack (p50)", statistics.median(witnessed), WITNESSED_TARGET,
                     anchor=cold))
    print(summary("  kill -9 -> witnessed, nobody asking", witnessed))
    pidfd = [kill_once(hook=False)[0] for _ in range(FALLBACK_ROUNDS)]
    print(bound_line("  same, hook removed (pidfd alone)", statistics.median(pidfd), RELAUNCHED_TARGET, anchor=cold))
    poll = [kill_once(hook=False, pidfd=False)[0] for _ in range(FALLBACK_ROUNDS)]
    print(bound_line("  same, no hook, no pidfd (exit poll alone)", statistics.median(poll), RELAUNCHED_TARGET,
                     anchor=cold))


def incident() -> None:
    interval, ack = 3.0, 2.0
    harness = AgentHarness(Path(tempfile.mkdtemp(prefix="loom-bench-incident-")),
                           sections={"canary": {"interval": f"{interval:g}s", "ack_timeout": f"{ack:g}s"},
                                     "agent": {"boot_grace": "2s", "ready_match": DEMO_READY}})
    try:
        harness.start()
        harness.popen("-m", "loomtui", "supervise", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: any(r["result"] == "ok" for r in canary_runs(harness)), 60, what="a healthy ack")
        assert harness.loom("inject", "/poison").returncode == 0
        fresh = wait_for(lambda: [e for e in relaunches(harness, "canary_failed") if e["detail"]["mode"] == "fresh"],
                         180, what="the fresh start")[0]
        resumed = relaunches(harness, "canary_failed")[0]
        acked = wait_for(lambda: witness(harness, fresh["id"]), 60, what="the fresh session witnessed")[0]
        relaunch = acked["ts"] - fresh["ts"]
        deaf = acked["ts"] - resumed["ts"]
        bound = interval + 2 * ack + relaunch
        print(f"{'poisoned session: resumed -> heard again':<44} {deaf:9.2f} s    bound {bound:8.2f} s "
              f"(interval {interval:g} + 2 x ack {ack:g} + relaunch to witness {relaunch:.2f})")
    finally:
        harness.cleanup()


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="loom-bench-cold-"))
    cold = [cold_start(root) for _ in range(7)]
    print(summary("anchor: demo agent cold start", cold))
    kills(statistics.median(cold))
    incident()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
