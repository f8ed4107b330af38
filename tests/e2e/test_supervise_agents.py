"""Two agents under one `loom supervise`: each agent's loops are its own, so one agent's hung tmux
server never holds up the other's recovery, and the ledger says whose every event is.

Real parts: two demo agents, each on a private tmux socket of its own, the daemon as a subprocess,
one store. Outcomes and their order only, never timing.
"""

from __future__ import annotations

import json
import subprocess
import time

import psutil
import pytest
from harness import AgentsHarness, toml_value, wait_for

from loomtui.store import heartbeats
from loomtui.store.db import Store

pytestmark = pytest.mark.e2e

FAST = {
    "watchdog": {
        "interval": "1s", "exit_check": "300ms", "poller_grace": "2s", "foreign_scan": "1s",
        "backoff_base": "300ms", "backoff_max": "1s",
    },
}


@pytest.fixture
def two(tmp_path):
    harness = AgentsHarness(tmp_path, ["alpha", "beta"], sections=FAST)
    try:
        yield harness
    finally:
        harness.cleanup()


class Daemon:
    def __init__(self, harness: AgentsHarness) -> None:
        self.harness = harness
        self.log = open(harness.root / f"supervise-{time.monotonic_ns()}.log", "w")
        self.proc = harness.popen("-m", "loomtui", "supervise", stdout=self.log, stderr=subprocess.STDOUT)

    def loops(self) -> dict:
        try:
            with Store.in_dir(self.harness.state_dir) as store:
                beat = heartbeats.read(store).get("supervisor")
        except Exception:
            return {}
        return beat["detail"]["loops"] if beat and beat["pid"] == self.proc.pid else {}

    def ticks(self, loop: str) -> int:
        return self.loops().get(loop, {}).get("ticks", 0)

    def output(self) -> str:
        self.log.flush()
        return open(self.log.name).read()


def witnessed(harness: AgentsHarness, relaunch: dict) -> list[dict]:
    return [e for e in harness.events("canary", agent=relaunch["agent"])
            if e["detail"].get("witnessed") == relaunch["id"]]


def test_one_supervisor_names_each_agents_loops_and_runs_them_all(two):
    for name in two.members:
        two.start(name)
    daemon = Daemon(two)
    wait_for(lambda: daemon.ticks("watchdog:alpha") >= 3 and daemon.ticks("watchdog:beta") >= 3, 60,
             what="both agents' watchdogs ticking")
    names = set(daemon.loops())
    assert {f"{loop}:{agent}" for loop in ("watchdog", "canary", "signals", "exit_watch")
            for agent in ("alpha", "beta")} <= names
    assert "sentinel" in names and not any(n.startswith("sentinel:") for n in names)
    assert daemon.proc.poll() is None, daemon.output()


@pytest.mark.incident("confident_false_detector")
def test_a_hung_agent_is_unclear_and_left_alone_while_the_other_is_recovered(two):
    for name in two.members:
        two.start(name)
    starts = {name: two.events("relaunch", agent=name) for name in two.members}
    assert all(len(events) == 1 for events in starts.values()), starts
    daemon = Daemon(two)
    # Both operator starts witnessed by their own agent's canary: nothing of either is pending when alpha hangs.
    for name, [start] in starts.items():
        acks = wait_for(lambda start=start: witnessed(two, start), 90, what=f"agent {name}'s start witnessed")
        assert {ack["agent"] for ack in acks} == {name}
    beta_session = two.pinned("beta")

    server = two.stop_server("alpha")
    assert two.loom("inject", "--agent", "beta", "/crash").returncode == 0
    relaunch = wait_for(lambda: [e for e in two.events("relaunch", agent="beta") if e["cause"] in ("crash", "exit")],
                        90, what="beta relaunched")[0]
    assert relaunch["detail"]["mode"] == "resume" and two.pinned("beta") == beta_session
    wait_for(lambda: witnessed(two, relaunch), 90, what="beta's relaunch witnessed by a canary ack")
    unclear = wait_for(lambda: two.events("observation_ambiguous", agent="alpha"), 90, what="alpha reported unclear")
    assert all("did not answer" in e["detail"]["why"] for e in unclear)
    # `loom status` says so, both agents at once: alpha unclear (not gone), beta running.
    status = two.loom("status", "--json")
    assert status.returncode == 0, status.stderr
    assert {a["name"]: a["state"] for a in json.loads(status.stdout)} == {"alpha": "tmux unknown", "beta": "running"}
    # All of it while alpha's server was still stopped: beta never waited for it.
    assert psutil.Process(server).status() == psutil.STATUS_STOPPED

    assert two.events("relaunch", agent="alpha") == starts["alpha"]  # alpha: seen unclear, not acted on
    # Beta may have caught its own crash half-way (a zombie is no clear look), never alpha's hung server.
    assert not [e for e in two.events("observation_ambiguous", agent="beta") if "did not answer" in e["detail"]["why"]]
    assert all(e["agent"] == "beta" for e in witnessed(two, relaunch))
    every = two.events()
    assert {e["agent"] for e in every} <= {"alpha", "beta"}
    assert {e["agent"] for e in every if e["kind"] == "relaunch" and e["id"] > starts["beta"][0]["id"]} == {"beta"}
    two.resume_servers()
    daemon.proc.terminate()
    assert daemon.proc.wait(30) == 0, daemon.output()
    assert two.loom("ledger", "verify").returncode == 0


def test_two_agents_whose_pollers_share_one_pattern_never_reap_each_other(tmp_path):
    """Two agents running the same plugin: their pollers have one pattern (each with its own token
    in its environment). Each agent's watchdog took the other's poller for a stranger, reaped it,
    recycled the other for its missing poller, and so on to the fuse's fresh starts."""
    harness = AgentsHarness(tmp_path, ["alpha", "beta"], sections=FAST)
    try:
        # Both agents' pollers, as one plugin's would be; no other test's (a pattern that matched
        # every demo poller on the machine had this daemon reap another test's, rightly).
        bots = "|".join(member.bot for member in harness.members.values())
        shared = rf"loomtui\.demo\.poller --bot ({bots})\b"
        text = harness.config_path.read_text()
        for member in harness.members.values():
            text = text.replace(toml_value(rf"loomtui\.demo\.poller --bot {member.bot}\b"), toml_value(shared))
        assert text.count(toml_value(shared)) == 2, text
        harness.config_path.write_text(text)
        for name in harness.members:
            harness.start(name)
        pollers = {name: wait_for(lambda m=member: m.poller_pids(), 60, what=f"agent {name}'s poller")
                   for name, member in harness.members.items()}
        started = {e["id"] for e in harness.events("relaunch")}
        daemon = Daemon(harness)
        try:
            # Many foreign scans of each agent (every second), both trees plainly seen.
            wait_for(lambda: daemon.ticks("watchdog:alpha") >= 12 and daemon.ticks("watchdog:beta") >= 12, 90,
                     what="a dozen watchdog ticks of each agent")
            relaunches = [e for e in harness.events("relaunch") if e["id"] not in started]
            assert [e for e in relaunches if e["cause"] == "poller_missing"] == [], relaunches
            # No agent's live poller reaped. (On a loaded machine an agent may be relaunched for
            # another cause: its old poller, left behind a moment, is a stranger and may be reaped.)
            relaunched = {e["agent"] for e in relaunches}
            kept = {pid for name, pids in pollers.items() if name not in relaunched for pid in pids}
            reaped = [e for e in harness.events("foreign_poller_reaped") if e["detail"]["pid"] in kept]
            assert reaped == [], (reaped, relaunches)
            for name, member in harness.members.items():
                if name not in relaunched:
                    assert member.poller_pids() == pollers[name], name
            pollers = {name: member.poller_pids() for name, member in harness.members.items()}
            before = len(harness.events("foreign_poller_reaped"))
            # Beta's tmux server hangs: alpha's scan takes beta's pane from its launch's record (a
            # tmux call would wait, then leave every stranger alone), and still reaps a stranger.
            harness.stop_server("beta")
            assert harness.loom("inject", "--agent", "alpha", "/foreign-poller").returncode == 0
            reaped = wait_for(lambda: harness.events("foreign_poller_reaped")[before:], 60, what="the stranger reaped")
            assert {e["agent"] for e in reaped} == {"alpha"}
            assert reaped[0]["detail"]["pid"] not in {pid for pids in pollers.values() for pid in pids}
            harness.resume_servers()
            assert daemon.proc.poll() is None, daemon.output()
        finally:
            harness.resume_servers()
            daemon.proc.terminate()
            daemon.proc.wait(30)
    finally:
        harness.cleanup()


STUCK = """
import sys
from loomtui.context import Context
from loomtui.daemon.supervise import TickLoop, supervise

def stuck(ctx, halt):
    return lambda: halt.wait()  # a tick that never ends until the daemon stops: a hung call, a watcher

def alive(ctx, halt):
    return lambda: None

ctx = Context.load(None, sys.argv[1])
# More stuck loops than any shared thread pool holds (asyncio's default is at most 32 workers).
loops = [TickLoop(f"stuck{i}", 1.0, stuck) for i in range(40)] + [TickLoop("alive", 0.05, alive)]
sys.exit(supervise(ctx, loops))
"""


def test_stuck_ticks_never_starve_another_loop_of_a_thread(tmp_path):
    """Twenty agents' signals and exit watches hold a thread each for good, and a hung tmux call
    holds one for its timeout: a loop that needs a thread always has its own."""
    import signal
    import sys

    from conftest import REPO, loom_env

    state = tmp_path / "state"
    proc = subprocess.Popen([sys.executable, "-c", STUCK, str(state)], env=loom_env(), cwd=REPO,
                            stderr=subprocess.PIPE, text=True)
    try:
        def ticks():
            try:
                with Store.in_dir(state) as store:
                    beat = heartbeats.read(store).get("supervisor")
            except Exception:
                return 0
            return beat["detail"]["loops"].get("alive", {}).get("ticks", 0) if beat else 0

        wait_for(lambda: ticks() >= 5, 60, what="the free loop ticking beside 40 stuck ones")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
