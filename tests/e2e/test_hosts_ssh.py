"""Two Loom installs as two hosts over a real OpenSSH: host a is the operator's machine (its own
config with `[[hosts]]` b), host b another Loom with its own config, state dir and demo agent in
tmux, reached through a real sshd that this test starts on 127.0.0.1 with a host key, an
authorized key and a known_hosts file of its own (nothing of the machine's ssh setup is read or
changed: the client gets them with `-F FILE`, since ssh reads the passwd home, not $HOME).

Shown: `loom hosts --json` lists both hosts' agents; `loom --host b recycle --fresh` relaunches
b's agent only and b's ledger records it as ssh from a; an operator's words reach b's agent as
they were typed, through the remote shell, and a line on standard input too; b's pane is read
and b's agent attached from a terminal over ssh; a host key that is not the known one is refused;
sshd stopped: b reads `unreachable since …`, `loom --host b status` is refused with ssh's reason,
and a's own agent reads as before.
"""

from __future__ import annotations

import json
import secrets
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from harness import wait_for
from sshd import REMOTE_LOOM, add_host, keygen, kill_masters, masters

from loomtui.agent.tmux import clean_env
from loomtui.cli.remote import UNREACHABLE
from loomtui.config import load_config
from loomtui.hosts import ssh
from loomtui.report.status import STATE_WORDS

pytestmark = pytest.mark.e2e

def test_two_hosts(make_harness, sshd):
    a, b = make_harness(), make_harness()
    add_host(a.config_path, "b", ssh="b", ssh_options=["-F", str(sshd.client_config())], loom=REMOTE_LOOM,
             config=str(b.config_path), state_dir=str(b.state_dir), connect_timeout="10s", timeout="60s")
    try:
        a_session, b_session = a.start(), b.start()
        a_relaunches = len(a.events("relaunch"))

        # Both hosts' agents, b's read over ssh from its own `loom status`.
        listed = a.loom("hosts", "--json")
        assert listed.returncode == 0, listed.stderr
        views = {v["host"]: v for v in json.loads(listed.stdout)}
        assert list(views) == ["local", "b"]
        assert views["b"]["reachable"] and views["b"]["why"] is None
        for view in views.values():
            (agent,) = view["agents"]
            assert agent["name"] == "main" and agent["state"] in STATE_WORDS.values()
        # One master connection for b, its socket in the state dir's private ssh/.
        control = a.state_dir / ssh.CONTROL_DIR
        assert stat.S_IMODE(control.stat().st_mode) == 0o700
        b_host = next(h for h in load_config(str(a.config_path), {})[0].hosts if h.name == "b")
        b_control = ssh.control_path(a.state_dir, b_host)
        assert b_control is not None, "the test's state dir is too deep for a socket"
        assert Path(b_control.replace("%%", "%")).is_socket()
        text = a.loom("hosts")
        assert text.returncode == 0 and [line.split()[:2] for line in text.stdout.splitlines()[1:]] == \
            [["local", "main"], ["b", "main"]], text.stdout

        # An operator's relaunch of b's agent, over ssh: b's agent only, recorded by b as ssh from a.
        done = a.loom("--host", "b", "recycle", "--fresh", "--reason", "over ssh")
        assert done.returncode == 0, done.stderr
        wait_for(lambda: b.pinned() != b_session, 30, what="b's fresh session pinned")
        wait_for(lambda: "> " in b.screen(), 30, what="b's agent's prompt")
        relaunch = b.events("relaunch")[-1]
        assert (relaunch["source"], relaunch["cause"]) == ("ssh", "operator_fresh")
        assert relaunch["detail"]["evidence"]["actor"] == "ssh"
        assert relaunch["detail"]["evidence"]["actor_from"] == ssh.origin()
        assert relaunch["detail"]["evidence"]["actor_address"].startswith("127.0.0.1 ")
        assert a.pinned() == a_session and len(a.events("relaunch")) == a_relaunches

        # The remote side is a shell: the words reach b's agent as they were typed, and run nothing.
        trap = sshd.root / "pwned"
        words = f"$(id>{trap}) `id>{trap}2`; 'quoted' \"double\" \\ * ${{HOME}}"
        typed = a.loom("--host", "b", "inject", words)
        assert typed.returncode == 0, typed.stderr
        wait_for(lambda: words in b.transcript(b.pinned()), 30, what="the words in b's transcript")
        assert not list(sshd.root.glob("pwned*"))
        assert [e["source"] for e in b.events("inject")][-1] == "ssh"
        # A line on standard input goes over ssh inside the channel, not in any command line.
        piped = a.loom("--host", "b", "inject", "--stdin", input="remember PIPED-OVER-SSH\n")
        assert piped.returncode == 0, piped.stderr
        wait_for(lambda: "remember PIPED-OVER-SSH" in b.transcript(b.pinned()), 30, what="the piped line in b's transcript")
        assert [e["source"] for e in b.events("inject")][-1] == "ssh"
        # b's pane read over ssh (what a's console shows for it), and b's agent attached over ssh
        # from a terminal (a tmux pane of the test's own): b's tmux has a client, gone at detach.
        looked = json.loads(a.loom("--host", "b", "pane", "--json", "--lines", "50").stdout)
        assert looked["state"] == "up" and "remember PIPED-OVER-SSH" in looked["text"], looked
        terminal = f"loomtest-term-{secrets.token_hex(3)}"
        # `loom --host b attach` in that terminal: b's own `loom attach`, through `ssh -t`.
        attach = shlex.join(["env", f"LOOM_CONFIG={a.config_path}", sys.executable, "-m", "loomtui", "--host", "b",
                             "attach", "--agent", "main"])
        try:
            subprocess.run(["tmux", f"-L{terminal}", "new-session", "-d", "-x", "90", "-y", "25", "-c", str(REPO),
                            attach], check=True, env=clean_env(), timeout=30)
            wait_for(lambda: b.tmux("list-clients").stdout.strip(), 60, what="a client of b's tmux, over ssh")
            subprocess.run(["tmux", f"-L{terminal}", "send-keys", "C-b", "d"], check=True, timeout=30)
            wait_for(lambda: not b.tmux("list-clients").stdout.strip(), 60, what="the client detached")
        finally:
            subprocess.run(["tmux", f"-L{terminal}", "kill-server"], capture_output=True, timeout=30)

        # A host key that is not the one known for b: refused, as the operator's ssh refuses it.
        stranger = sshd.root / "stranger_known_hosts"
        stranger_key = keygen(sshd.root / "stranger")
        stranger.write_text(f"[127.0.0.1]:{sshd.port} ssh-ed25519 {stranger_key}\n")
        c_config = a.config_path.read_text()
        add_host(a.config_path, "c", ssh="c", ssh_options=["-F", str(sshd.client_config(stranger))],
                 loom=REMOTE_LOOM, config=str(b.config_path), state_dir=str(b.state_dir))
        refused = a.loom("--host", "c", "status")
        assert refused.returncode == UNREACHABLE
        assert "host c (c) is unreachable" in refused.stderr and "Host key verification failed" in refused.stderr
        a.config_path.write_text(c_config)
        # A host whose answer never ends (here its `loom` streams zeros): cut off at MAX_ANSWER, not
        # held whole in memory.
        add_host(a.config_path, "d", ssh="b", ssh_options=["-F", str(sshd.client_config())],
                 loom=["sh", "-c", "head -c 300000000 /dev/zero"], timeout="120s", command_timeout="120s")
        flood = a.loom("--host", "d", "status")
        assert flood.returncode == UNREACHABLE and "longer than 64 MiB" in flood.stderr, flood.stderr
        a.config_path.write_text(c_config)
        # b's own options edited while its master lives (the same stranger's known hosts): the master
        # is the old way's, not used for the new one, which is refused as c was.
        assert masters(a.state_dir)
        a.config_path.write_text(c_config.replace(str(sshd.client_config()), str(sshd.client_config(stranger))))
        moved = a.loom("--host", "b", "status")
        assert moved.returncode == UNREACHABLE and "Host key verification failed" in moved.stderr, moved.stderr
        a.config_path.write_text(c_config)

        # sshd stopped: b reads unreachable since the first failure; a's own agent as before.
        sshd.stop()
        wait_for(lambda: not masters(a.state_dir), 30, what="b's master connection gone with its sshd")
        down = a.loom("hosts", "--json")
        assert down.returncode == 0, down.stderr
        local, far = json.loads(down.stdout)
        assert not far["reachable"] and far["agents"] == [] and "Connection refused" in far["why"]
        assert local["reachable"] and [x["name"] for x in local["agents"]] == ["main"]
        assert local["agents"][0]["state"] in STATE_WORDS.values()
        again = json.loads(a.loom("hosts", "--json").stdout)[1]
        assert again["unreachable_since"] == far["unreachable_since"]
        shown = a.loom("hosts").stdout.splitlines()
        assert any(line.startswith("b  unreachable since ") for line in shown), shown
        assert not any(line.split()[:1] == ["b"] and "gone" in line for line in shown)
        status = a.loom("--host", "b", "status")
        assert status.returncode == UNREACHABLE
        assert status.stderr.startswith("loom: host b (b) is unreachable: ssh: connect to host")
        assert a.loom("status").returncode == 0
        assert a.pinned() == a_session and len(a.events("relaunch")) == a_relaunches
    finally:
        kill_masters(a.state_dir)
