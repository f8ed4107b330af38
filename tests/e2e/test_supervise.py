"""`loom supervise` end to end: a real tmux server, the real demo agent, the daemon as a subprocess."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import wait_for

from loomtui.store import heartbeats
from loomtui.store.db import Store

pytestmark = pytest.mark.e2e

FAST = {
    "watchdog": {
        "interval": "1s", "exit_check": "300ms", "poller_grace": "2s", "foreign_scan": "1s",
        "backoff_base": "300ms", "backoff_max": "1s",
    },
}


class Daemon:
    def __init__(self, harness, env=None):
        self.harness = harness
        self.log = open(harness.root / f"supervise-{time.monotonic_ns()}.log", "w")
        self.proc = harness.popen("-m", "loomtui", "supervise", stdout=self.log, stderr=subprocess.STDOUT, env=env)
        wait_for(lambda: self.heartbeat() is not None or self.proc.poll() is not None, 30, what="a heartbeat")
        assert self.proc.poll() is None, self.output()

    def heartbeat(self):
        try:
            with Store.in_dir(self.harness.state_dir) as store:
                beat = heartbeats.read(store).get("supervisor")
        except Exception:
            return None
        return beat if beat and beat["pid"] == self.proc.pid else None

    def ticks(self) -> int:
        beat = self.heartbeat()
        return beat["detail"]["loops"].get("watchdog", {}).get("ticks", 0) if beat else 0

    def settle(self, ticks: int = 8):
        """Let the watchdog run `ticks` more ticks (so 'nothing more happened' means something)."""
        start = self.ticks()
        wait_for(lambda: self.ticks() >= start + ticks, 60, what=f"{ticks} more watchdog ticks")

    def output(self) -> str:
        self.log.flush()
        return open(self.log.name).read()

    def explain(self, events: int = 40, lines: int = 60) -> str:
        """What a failed wait shows (wait_for's `explain`): whether the daemon still runs, its log's
        last `lines`, the ledger's last `events` (kind, cause, a short detail) and the pane's screen."""
        parts = [f"daemon: {'running' if self.proc.poll() is None else f'exited {self.proc.returncode}'}"]
        for title, part in (("daemon log", lambda: self.output().splitlines()[-lines:]),
                            ("ledger", lambda: [f"{e['id']} {e['ts']:.2f} {e['kind']} {e['cause'] or ''} "
                                                f"{json.dumps(e['detail'])[:160]}"
                                                for e in self.harness.events()[-events:]]),
                            ("pane", lambda: self.harness.screen().rstrip().splitlines()[-lines:])):
            try:
                shown = part()
            except Exception as exc:  # the thing that failed may be what a part reads
                shown = [f"(unreadable: {type(exc).__name__}: {exc})"]
            parts += [f"--- {title}:", *shown]
        return "\n".join(parts)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)


def relaunches(harness, cause=None):
    return [e for e in harness.events("relaunch") if cause is None or e["cause"] == cause]


def last_inject_ts(harness):
    return harness.events("inject")[-1]["ts"]


@pytest.fixture
def fast(make_harness):
    return make_harness(sections=FAST)


def test_crash_is_noticed_by_the_exit_watch_and_resumed(make_harness):
    # Full ticks 10 minutes apart: only the exit watch (every exit_check) can notice the crash in time.
    fast = make_harness(sections={"watchdog": {**FAST["watchdog"], "interval": "10m"}})
    session = fast.start()
    daemon = Daemon(fast)
    old_agent = fast.agent_pid()
    assert fast.loom("inject", "/crash").returncode == 0
    sent = last_inject_ts(fast)
    event = wait_for(lambda: relaunches(fast, "crash") + relaunches(fast, "exit"), 60, what="a relaunch")[0]
    assert event["detail"]["mode"] == "resume" and event["detail"]["new_session"] == session
    # tmux 3.3a does not always learn an exit status; when it does, /crash exits 1.
    assert event["detail"]["evidence"]["status"] in (1, None)
    assert event["detail"]["evidence"]["note"].startswith("the agent exited") and event["ts"] > sent
    wait_for(lambda: fast.agent_pid() not in (None, old_agent), what="the resumed agent")
    wait_for(lambda: "resumed:" in fast.screen(), what="the resumed conversation on screen")
    assert fast.pinned() == session
    daemon.settle()
    assert len(relaunches(fast)) == 2  # the operator's start and this one
    assert daemon.stop() == 0
    assert fast.events("supervisor_stop")
    assert fast.loom("ledger", "verify").returncode == 0


@pytest.mark.incident("exit_zero_is_failure")
def test_exit_zero_is_a_failure_too(fast):
    session = fast.start()
    Daemon(fast)
    assert fast.loom("inject", "/exit0").returncode == 0
    event = wait_for(lambda: relaunches(fast, "exit"), 30, what="an exit relaunch")[0]
    assert event["detail"]["evidence"]["status"] in (0, None) and event["detail"]["mode"] == "resume"
    wait_for(lambda: fast.agent_pid() is not None, what="the agent back")
    assert fast.pinned() == session


def test_killed_poller_is_recycled_after_the_grace(fast):
    fast.start()
    daemon = Daemon(fast)
    wait_for(lambda: fast.poller_pids(), what="the agent's poller")
    assert fast.loom("inject", "/kill-poller").returncode == 0
    killed_at = last_inject_ts(fast)
    event = wait_for(lambda: relaunches(fast, "poller_missing"), 60, what="a poller_missing relaunch")[0]
    assert event["ts"] - killed_at >= 2.0  # poller_grace
    wait_for(lambda: fast.poller_pids(), what="a new poller")
    daemon.settle()
    assert len(relaunches(fast, "poller_missing")) == 1


@pytest.mark.incident("one_bot_one_poller")
def test_foreign_poller_is_reaped_and_the_agent_untouched(fast):
    fast.start()
    daemon = Daemon(fast)
    agent = fast.agent_pid()
    ours = set(wait_for(lambda: fast.poller_pids(), what="the agent's poller"))
    assert fast.loom("inject", "/foreign-poller").returncode == 0
    reaped = wait_for(lambda: fast.events("foreign_poller_reaped"), 30, what="the foreign poller reaped")
    foreign = reaped[0]["detail"]["pid"]
    assert foreign not in ours
    wait_for(lambda: foreign not in fast.poller_pids(), what="the foreign poller gone")
    daemon.settle()
    assert fast.agent_pid() == agent
    assert set(fast.poller_pids()) == ours
    assert [e["cause"] for e in relaunches(fast)] == ["operator_fresh"]


def test_modal_is_dismissed_through_the_injection_path(fast):
    session = fast.start()
    Daemon(fast)
    assert fast.loom("inject", "/modal").returncode == 0
    event = wait_for(lambda: fast.events("modal_dismissed"), 30, what="the modal dismissed")[0]
    assert event["detail"]["keys"] == ["Enter"] and event["detail"]["ok"]
    assert fast.loom("inject", "after the dialog").returncode == 0
    wait_for(lambda: "after the dialog" in fast.transcript(session), what="the agent reading again")


def test_tmux_server_killed_session_recreated_and_resumed(fast):
    session = fast.start()
    assert fast.loom("inject", "before the outage").returncode == 0
    wait_for(lambda: "before the outage" in fast.transcript(session), what="a turn recorded")
    Daemon(fast)
    fast.tmux("kill-server")
    event = wait_for(lambda: relaunches(fast, "tmux_gone"), 30, what="a tmux_gone relaunch")[0]
    assert event["detail"]["mode"] == "resume" and event["detail"]["new_session"] == session
    wait_for(lambda: "before the outage" in fast.screen(), what="the resumed conversation")


@pytest.mark.incident("recovery_storm")
def test_supervisor_killed_at_random_points_never_double_relaunches(fast):
    fast.start()
    rng = random.Random(1234)
    daemon = Daemon(fast)
    for round_ in range(1, 4):
        wait_for(lambda: fast.agent_pid() is not None, what="a live agent")
        assert fast.loom("inject", "/crash").returncode == 0
        # Fault injection, not waiting for a state: kill the daemon at a random moment of its work.
        time.sleep(rng.uniform(0.0, 1.5))
        daemon.kill()
        daemon = Daemon(fast)
        wait_for(lambda: fast.agent_starts() >= round_ + 1 and fast.agent_pid(), 60, what=f"crash {round_} relaunched")
        daemon.settle()
        ledger = "\n".join(f'{e["id"]} {e["kind"]} {e["cause"]} {e["detail"].get("mode", "")}' for e in fast.events())
        # One new agent per crash, never two. A daemon killed after recording a relaunch and before
        # launching leaves a relaunch that never started an agent; the next daemon completes it.
        assert fast.agent_starts() == round_ + 1, ledger
        assert round_ + 1 <= len(relaunches(fast)) <= 2 * round_ + 1, ledger
    assert fast.loom("ledger", "verify").returncode == 0
    assert daemon.stop() == 0


@pytest.mark.incident("recovery_storm")
def test_an_agent_that_dies_at_every_boot_hits_the_fuse_then_the_ceiling(make_harness):
    dying = f"{sys.executable} -c 'import sys; sys.exit(3)' {{session_id}}"
    harness = make_harness(sections={**FAST, "agent": {"fresh_command": dying, "resume_command": dying}})
    harness.loom("recycle", "--fresh")  # an operator start: the budget counts from here
    daemon = Daemon(harness)
    wait_for(lambda: harness.events("escalation"), 90, what="the ceiling's escalation")
    daemon.settle()
    automatic = [e for e in relaunches(harness) if not e["cause"].startswith("operator")]
    assert len(automatic) == 6
    modes = [e["detail"]["mode"] for e in automatic]
    assert modes[:2] == ["resume", "resume"] and set(modes[3:]) == {"fresh"}
    assert len(harness.events("escalation")) == 1
    with Store.in_dir(harness.state_dir) as store:
        rows = store.query("SELECT text FROM outbox")
    assert len(rows) == 1 and "stopped relaunching" in rows[0][0]
    status = json.loads(harness.loom("status", "--json").stdout)
    assert status["pinned_session"]
    # Only an operator action clears the hold.
    result = harness.loom("recycle", "--fresh", "--reason", "operator looked")
    assert result.returncode == 1 and "exited at once" in result.stderr  # it still dies, and says so
    assert harness.events("hold_cleared")
    wait_for(lambda: len([e for e in relaunches(harness) if not e["cause"].startswith("operator")]) > 6, 30,
             what="automatic relaunching resumed after the operator's action")
    daemon.stop()


def test_one_supervisor_per_state_dir(fast):
    daemon = Daemon(fast)
    second = fast.loom("supervise", timeout=60)
    assert second.returncode == 3
    assert "supervisor.lock" in second.stderr and str(daemon.proc.pid) in second.stderr
    assert daemon.stop() == 0


def test_unusable_state_dir_is_a_nonzero_exit(fast, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    result = fast.loom("supervise", "--state-dir", str(blocker / "state"), timeout=60)
    assert result.returncode != 0 and str(blocker / "state") in result.stderr


BOOM = """
import sys
from loomtui.context import Context
from loomtui.daemon.supervise import TickLoop, supervise

count = 0

def make(ctx, halt):
    def tick():
        global count
        count += 1
        if count % 2:
            raise RuntimeError(f"boom {count}")
    return tick

ctx = Context.load(None, sys.argv[1])
sys.exit(supervise(ctx, [TickLoop("boom", 0.05, make)]))
"""


def test_a_crashing_loop_is_recorded_restarted_and_contained(tmp_path):
    from conftest import REPO, loom_env

    state = tmp_path / "state"
    proc = subprocess.Popen([sys.executable, "-c", BOOM, str(state)], env=loom_env(), cwd=REPO,
                            stderr=subprocess.PIPE, text=True)
    try:
        def errors():
            try:
                with Store.in_dir(state) as store:
                    return store.query("SELECT detail FROM ledger WHERE kind = 'loop_error'")
            except Exception:
                return []
        rows = wait_for(lambda: len(errors()) >= 3 and errors(), 60, what="three recorded loop errors")
        assert all(json.loads(r[0])["loop"] == "boom" for r in rows)
        with Store.in_dir(state) as store:
            stats = heartbeats.read(store)["supervisor"]["detail"]["loops"]["boom"]
        assert stats["errors"] >= 1 and stats["restarts"] >= 1
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_install_service_renders_units(fast):
    unit = fast.loom("install-service", "--systemd", "--print")
    assert unit.returncode == 0
    assert "Restart=always" in unit.stdout and "supervise" in unit.stdout and str(fast.config_path) in unit.stdout
    plist = fast.loom("install-service", "--launchd", "--print")
    assert "<key>KeepAlive</key>" in plist.stdout and "<true/>" in plist.stdout
    home = fast.root / "home"
    written = fast.loom("install-service", "--systemd", env={"HOME": str(home), "XDG_CONFIG_HOME": str(home / "cfg")})
    assert written.returncode == 0
    assert (home / "cfg" / "systemd" / "user" / "loom.service").read_text() == unit.stdout


def test_a_deleted_tmux_socket_is_repaired_not_relaunched(fast):
    fast.start()
    daemon = Daemon(fast)
    agent = wait_for(fast.agent_pid, what="the agent")
    pollers = set(wait_for(fast.poller_pids, what="its poller"))
    socket_path = Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.getuid()}" / fast.socket
    assert socket_path.exists()
    socket_path.unlink()  # what a /tmp cleaner does: the server runs on, unreachable
    wait_for(lambda: fast.events("tmux_socket_repair"), 30, what="the socket repaired")
    wait_for(socket_path.exists, 10, what="the socket back")
    daemon.settle()
    assert [e["cause"] for e in relaunches(fast)] == ["operator_fresh"]
    assert fast.agent_pid() == agent and set(fast.poller_pids()) == pollers
    assert fast.events("foreign_poller_reaped") == []
    assert daemon.stop() == 0
