"""An attach from a small terminal resizes the agent's window, and tmux keeps that size after the
client detached (window-size `latest`): the agent would draw at 80 columns from then on, and the
console show its lines cut there. restore_size puts the configured size back, and the next attach
still fits its own terminal. Real tmux servers on private sockets: the agent's, and an 80x24
"terminal" (a second server whose pane runs the attach)."""

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


def size(socket: str) -> str:
    return tmux(socket, "display-message", "-p", "-t", "=agent:0", "#{window_width}x#{window_height}")


def test_an_attach_at_80_columns_leaves_the_window_at_its_configured_size_once_restored(tmp_path):
    tag = secrets.token_hex(4)
    agent, terminal = f"loomtest-ws-{tag}", f"loomtest-wsterm-{tag}"
    pane = AgentPane(agent, "agent", width=200, height=50)
    try:
        pane.ensure_session(tmp_path)
        assert size(agent) == "200x50"

        def attach_and_leave() -> None:
            tmux(terminal, "new-session", "-d", "-s", "t", "-x", "80", "-y", "24",
                 f"env -u TMUX tmux -L{agent} attach-session -t =agent")
            wait_for(lambda: size(agent) == "80x23", 30, what="the window sized to the attaching terminal")
            tmux(terminal, "kill-server")
            wait_for(lambda: not tmux(agent, "list-clients"), 30, what="the client gone")

        attach_and_leave()
        assert size(agent) == "80x23"  # tmux keeps the last client's size
        pane.restore_size()
        assert size(agent) == "200x50"
        attach_and_leave()  # the next attach still fits its terminal (window-size is not left manual)
        pane.restore_size()
        assert size(agent) == "200x50"
    finally:
        tmux(terminal, "kill-server")
        tmux(agent, "kill-server")
