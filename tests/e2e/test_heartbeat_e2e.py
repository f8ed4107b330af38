"""Push heartbeats under the real daemon, against a loopback HTTP receiver: a GET on healthy beats;
under an operator's hold, `/fail` only from the heartbeat whose config says a hold fails; the agent
down (its process killed while held, so nothing relaunches it) → `/fail` from every heartbeat; a
receiver that hangs delays neither the other heartbeats nor the daemon's other loops. The URL's
secret reaches neither `loom status` nor the daemon's log."""

from __future__ import annotations

import json
import os
import signal

import pytest
from harness import AgentHarness, toml_value, wait_for
from push_receiver import Receiver
from test_supervise import FAST, Daemon

pytestmark = pytest.mark.e2e

LONG = 60


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def count(receiver, path: str) -> int:
    return sum(1 for p in list(receiver.paths) if p == path)


def test_heartbeats_say_up_held_and_down_and_a_hung_receiver_delays_nothing(tmp_path, receiver):
    harness = AgentHarness(tmp_path / "h", sections=FAST)
    beats = [("up", "/ping/s3cret-up", False, "5s"), ("strict", "/ping/s3cret-strict", True, "5s"),
             ("hung", "/hang/s3cret-hung", False, "300s")]
    with harness.config_path.open("a") as f:
        for name, path, hold_fails, timeout in beats:
            f.write(f"[[heartbeat]]\nname = {toml_value(name)}\nurl = {toml_value(receiver.url + path)}\n"
                    f"interval = \"1s\"\ntimeout = {toml_value(timeout)}\nhold_fails = {str(hold_fails).lower()}\n")
    harness.start()
    daemon = Daemon(harness)
    try:
        # Healthy: GETs on the URL itself, from both; the hung one's first GET hangs in its thread.
        wait_for(lambda: count(receiver, "/hang/s3cret-hung") == 1, LONG, what="the hung receiver's first GET")
        hung_at = daemon.ticks()
        up = count(receiver, "/ping/s3cret-up")
        wait_for(lambda: count(receiver, "/ping/s3cret-up") >= up + 3 and count(receiver, "/ping/s3cret-strict") >= 3,
                 LONG, what="healthy beats while the other receiver hangs")
        daemon.settle(3)  # the watchdog ticks on too
        assert daemon.ticks() > hung_at
        assert count(receiver, "/hang/s3cret-hung") == 1  # one GET at a time: it is still in flight
        assert not [p for p in receiver.paths if p.endswith("/fail")]

        # An operator's hold: a failure only for the heartbeat whose config says so.
        held = harness.loom("hold", "--reason", "maintenance")
        assert held.returncode == 0, held.stdout + held.stderr
        wait_for(lambda: count(receiver, "/ping/s3cret-strict/fail") >= 2, LONG, what="the strict heartbeat failing")
        up = count(receiver, "/ping/s3cret-up")
        wait_for(lambda: count(receiver, "/ping/s3cret-up") >= up + 2, LONG, what="the other still ok under the hold")
        assert count(receiver, "/ping/s3cret-up/fail") == 0

        # Down: its process killed; held, so nothing relaunches it.
        pid = harness.pane_pid()
        assert pid
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: count(receiver, "/ping/s3cret-up/fail") >= 2, LONG, what="the agent down: /fail")

        status = harness.loom("status", "--json")
        assert status.returncode == 0, status.stderr
        pushes = json.loads(status.stdout)["heartbeat_push"]
        assert set(pushes) == {"up", "strict", "hung"}
        assert pushes["up"]["url"] == receiver.url + "/…"
        assert (pushes["up"]["says"], pushes["up"]["sent"]) == ("fail", True)
        assert "exited" in pushes["up"]["why"]
        text = harness.loom("status")
        assert "heartbeat       up to " in text.stdout and "fail sent" in text.stdout, text.stdout
        assert pushes["up"]["age"] >= 0  # by this host's clock: what another host's `loom hosts` shows
        hosts = harness.loom("hosts")
        assert hosts.returncode == 0, hosts.stderr
        assert any(line.startswith("local  heartbeat push up: fail sent ") for line in hosts.stdout.splitlines()), \
            hosts.stdout
        for shown in (status.stdout, text.stdout, hosts.stdout, daemon.output()):
            assert "s3cret" not in shown
    finally:
        receiver.release.set()
        assert daemon.stop() == 0
        harness.cleanup()
