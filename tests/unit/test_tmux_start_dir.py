"""The agent starts in `agent.cwd` as named, on a real tmux server on a private socket: tmux
expands formats in its `-c` (agent/tmux.py `start_dir`)."""

from __future__ import annotations

import os
import secrets
import subprocess

from harness import wait_for

from loomtui.agent.tmux import AgentPane


def tmux(socket: str, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TMUX"}
    return subprocess.run(["tmux", f"-L{socket}", *args], capture_output=True, text=True, env=env,
                          timeout=10).stdout.strip()


def test_the_agent_starts_in_its_cwd_whatever_the_name_holds(tmp_path):
    # tmux expands formats in `-c`: a cwd named `proj#{session_name}` started the agent in
    # `projagent` (and `#(...)` would have run a command in the tmux server).
    tag = secrets.token_hex(4)
    socket = f"loomtest-cwd-{tag}"
    cwd = tmp_path / "proj#{session_name}#S"
    cwd.mkdir()
    pane = AgentPane(socket, "agent")
    try:
        pane.ensure_session(cwd)
        assert tmux(socket, "display-message", "-p", "-t", "=agent:0.0", "#{pane_current_path}") == str(cwd)
        out = tmp_path / "pwd.txt"
        pane.respawn(f"pwd > {out}; exec sleep 600", cwd, {})
        wait_for(lambda: out.exists() and out.read_text().strip(), 30, what="the agent's pwd")
        assert out.read_text().strip() == str(cwd)
    finally:
        tmux(socket, "kill-server")
