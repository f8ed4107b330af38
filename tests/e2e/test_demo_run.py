"""`make demo` without the console: the demo's one crash is recovered, its failing job queued, and
stopping it leaves nothing running."""

from __future__ import annotations

import os
import signal
import subprocess

import psutil
import pytest
from harness import wait_for

from loomtui.demo.launcher import Demo
from loomtui.sentinel import queue
from loomtui.store import ledger, session
from loomtui.store.db import Store

pytestmark = pytest.mark.e2e

# Sooner than the demo's 25 s; any value works, since the test waits for states, not times.
CRASH_AFTER = 8.0


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def demo_processes(demo: Demo) -> set[int]:
    """Every process the demo started that runs now: its own, the tmux server, and their trees."""
    pids = {p.pid for p in demo.procs}
    out = subprocess.run(["tmux", f"-L{demo.socket}", "display-message", "-p", "#{pid}"],
                         capture_output=True, text=True, timeout=10).stdout.strip()
    if out.isdigit():
        pids.add(int(out))
    for pid in list(pids):
        try:
            pids.update(p.pid for p in psutil.Process(pid).children(recursive=True))
        except psutil.Error:
            pass
    # The agent's poller may have left its parent's tree; it is named by the demo's bot.
    for proc in psutil.process_iter(["pid", "cmdline"]):
        line = " ".join(proc.info["cmdline"] or [])
        if demo.socket in line or str(demo.root) in line:
            pids.add(proc.info["pid"])
    return {p for p in pids if alive(p)}


def test_the_demo_crashes_its_agent_once_recovers_it_and_stops_cleanly(tmp_path):
    demo = Demo(tmp_path / "demo", crash_after=CRASH_AFTER)
    seen: set[int] = set()
    try:
        demo.start()
        state = demo.root / "state"

        def query(sql, params=()):
            with Store.in_dir(state) as store:
                return [dict(r) for r in store.query(sql, params)]

        def relaunches():
            with Store.in_dir(state) as store:
                return [e.as_dict() for e in ledger.tail(store, 1000, kinds=["relaunch"])]

        with Store.in_dir(state) as store:
            pinned = session.pinned(store)
        [start] = relaunches()
        assert (start["cause"], start["source"], start["detail"]["mode"]) == ("operator_fresh", "demo", "fresh")

        crash = wait_for(lambda: [e for e in relaunches() if e["cause"] in ("crash", "exit")], 180,
                         what="the demo's crash relaunched")[0]
        assert crash["source"] == "watchdog"
        assert crash["detail"]["mode"] == "resume" and crash["detail"]["new_session"] == pinned
        seen |= demo_processes(demo)

        # Heard again: a canary of the resumed session acked after the relaunch.
        acked = wait_for(lambda: query("SELECT * FROM canary_runs WHERE result = 'ok' AND sent_at > ?",
                                       (crash["ts"],)), 180, what="a canary ok after the relaunch")
        assert acked[0]["session_id"] == pinned
        # ...and the ledger ties that ack to the relaunch: witnessed, with nobody asking.
        with Store.in_dir(state) as store:
            canaries = [e.as_dict() for e in ledger.tail(store, 1000, kinds=["canary"])]
        [witness] = [e for e in canaries if e["detail"].get("witnessed") == crash["id"]]
        assert witness["detail"]["result"] == "ok" and witness["source"] == "canary" and witness["id"] > crash["id"]

        def newsletter_items():
            with Store.in_dir(state) as store:
                return {i.kind: i for i in queue.listing(store) if i.job == "newsletter"}

        items = wait_for(lambda: (lambda got: got if {"exit", "line"} <= set(got) else None)(newsletter_items()),
                         180, what="the failing newsletter job's queue items")
        assert items["exit"].signature == "exit code 1"
        assert items["line"].signature == "<ts> Traceback (most recent call last):"
        assert [e["cause"] for e in relaunches()] == ["operator_fresh", crash["cause"]]  # one crash, one recovery
        seen |= demo_processes(demo)
    finally:
        seen |= demo_processes(demo)
        demo.stop()
        try:
            wait_for(lambda: not {p for p in seen if alive(p)} and not demo_processes(demo), 60,
                     what="every demo process gone after the stop")
        finally:
            for pid in {p for p in seen | demo_processes(demo) if alive(p)}:  # only after a failed stop
                os.kill(pid, signal.SIGKILL)
    gone = subprocess.run(["tmux", f"-L{demo.socket}", "list-sessions"], capture_output=True, text=True, timeout=10)
    assert gone.returncode != 0, gone.stdout


def test_the_demo_stops_when_its_terminal_dies(tmp_path):
    """`make demo` in a terminal that goes away without `q` (an SSH drop: here the terminal's own tmux
    server killed, which hangs up on the console): nothing the demo started keeps running."""
    import sys
    import uuid

    from conftest import loom_env

    root = tmp_path / "demo"
    demo = Demo(root)  # the same root, to find the socket and processes the console's demo runs
    terminal = f"loomterm-{uuid.uuid4().hex[:8]}"
    env = loom_env({"LOOM_DEMO_DIR": str(root), "TERM": "xterm-256color"})
    tmux = ["tmux", f"-L{terminal}", "-f/dev/null"]
    subprocess.run([*tmux, "new-session", "-d", "-x", "100", "-y", "30", "--",
                    sys.executable, "-m", "loomtui.tui.main", "--demo"], env=env, check=True, timeout=30)
    seen: set[int] = set()
    try:
        def running() -> set[int] | None:
            pids = root / "pids"
            if not pids.exists():
                return None
            started = {int(p) for p in pids.read_text().split()}
            up = demo_processes(demo) | {p for p in started if alive(p)}
            return up if started <= up and len(up) > len(started) else None  # its own three, and the agent's tree

        seen = wait_for(running, 180, what="the console's demo running")
        subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=30)
        wait_for(lambda: not {p for p in seen if alive(p)} and not demo_processes(demo), 60,
                 what="every demo process gone after its terminal died")
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=30)
        for pid in {p for p in seen | demo_processes(demo) if alive(p)}:  # only after a failed reap
            os.kill(pid, signal.SIGKILL)
