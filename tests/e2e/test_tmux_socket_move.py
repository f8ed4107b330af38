"""Issue 27: Loom's default tmux socket is a name of its own (`loomtui`; `loom` is another
orchestrator's too). An agent an older Loom launched on the old default (`loom`, no socket file in
its directory) is found there after the upgrade and never gets a second agent beside it; its next
relaunch closes that session and runs it on the new socket, and every process, the running daemon
included, follows the socket file.

The default names are machine-wide, so the test gives tmux a private TMUX_TMPDIR: `-L loom` and
`-L loomtui` are its own servers, no one else's."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import psutil
import pytest
from harness import AgentHarness, wait_for
from test_supervise import FAST, Daemon

pytestmark = pytest.mark.e2e

DEMO_READY = r"(?m)^> $"


@pytest.fixture
def private_tmux():
    # Short: a unix socket's path must fit in 108 bytes (TMUX_TMPDIR/tmux-UID/NAME).
    root = Path(tempfile.mkdtemp(prefix="lt-", dir="/tmp"))
    yield {"TMUX_TMPDIR": str(root)}
    env = {**os.environ, "TMUX_TMPDIR": str(root)}
    for socket in ("loom", "loomtui"):
        subprocess.run(["tmux", f"-L{socket}", "kill-server"], env=env, capture_output=True, timeout=10)
    shutil.rmtree(root, ignore_errors=True)


def sessions(env: dict[str, str], socket: str) -> list[str]:
    done = subprocess.run(["tmux", f"-L{socket}", "list-sessions", "-F", "#{session_name}"], capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=10)
    return done.stdout.split() if done.returncode == 0 else []


def agents_running(session_id: str | None = None) -> list[int]:
    """The demo agents of this test (by the session id on their command line)."""
    out = []
    for proc in psutil.process_iter(["cmdline"]):
        argv = " ".join(proc.info["cmdline"] or [])
        if "loomtui.demo.agent" in argv and (session_id is None or session_id in argv):
            out.append(proc.pid)
    return out


def status(harness, env) -> dict:
    done = harness.loom("status", "--json", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_an_agent_on_the_old_default_socket_stays_there_until_its_relaunch_moves_it(tmp_path, private_tmux):
    env = private_tmux
    harness = AgentHarness(tmp_path / "h", sections={**FAST, "agent": {"ready_match": DEMO_READY}})
    config = harness.config_path.read_text()
    # An older Loom: its default socket was `loom`, and it kept no socket file.
    harness.config_path.write_text(re.sub(r'(?m)^tmux_socket = .*$', 'tmux_socket = "loom"', config))
    started = harness.loom("recycle", "--fresh", "--reason", "an older Loom's start", env=env)
    assert started.returncode == 0, started.stdout + started.stderr
    session_id = harness.pinned()
    wait_for(lambda: agents_running(session_id), 30, what="the agent on the old socket")
    (harness.state_dir / "tmux-socket").unlink()
    assert sessions(env, "loom") == ["agent"]

    # The upgrade: the config says nothing of a socket (the default is `loomtui` now).
    harness.config_path.write_text(re.sub(r'(?m)^tmux_socket = .*\n', "", config))
    assert status(harness, env)["agent"]["tmux"] == "up"  # found where it runs
    daemon = Daemon(harness, env={**env})
    try:
        daemon.settle(8)
        assert sessions(env, "loomtui") == []  # no second agent beside it
        assert len(agents_running(session_id)) == 1
        assert not [e for e in harness.events("relaunch") if e["source"] == "watchdog"], harness.events("relaunch")

        # Its next relaunch moves it: the old session closed, the new socket recorded, one agent.
        moved = harness.loom("recycle", "--resume", "--reason", "after the upgrade", env=env)
        assert moved.returncode == 0, moved.stdout + moved.stderr
        assert (harness.state_dir / "tmux-socket").read_text().strip() == "loomtui"
        wait_for(lambda: sessions(env, "loomtui") == ["agent"] and "agent" not in sessions(env, "loom"), 30,
                 what="the agent on the new socket, its old session closed")
        wait_for(lambda: len(agents_running(session_id)) == 1, 30, what="one agent, resumed")
        # The daemon, started before the move, follows it: it looks there, and relaunches nothing.
        daemon.settle(8)
        assert status(harness, env)["agent"]["tmux"] == "up"
        assert not [e for e in harness.events("relaunch") if e["source"] == "watchdog"], harness.events("relaunch")
        assert len(agents_running(session_id)) == 1
    finally:
        assert daemon.stop() == 0
        for pid in agents_running(session_id):
            psutil.Process(pid).kill()
        harness.cleanup()
