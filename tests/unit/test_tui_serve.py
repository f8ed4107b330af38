"""`loom-tui --serve`'s address rule and command line: loopback only, refused in one line otherwise."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest
from conftest import REPO, loom_env

from loomtui.tui.serve import console_command, is_loopback


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "LOCALHOST", "::1", "[::1]"])
def test_loopback_addresses_are_allowed(host):
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "10.0.0.1", "example.com", "localhost.evil",
                                  "", "127.0.0.1.nip.io"])
def test_anything_else_is_not(host):
    assert not is_loopback(host)


def test_the_console_command_quotes_every_part():
    command = console_command("/tmp/a b/con'fig.toml", "/tmp/state; rm -rf x")
    argv = shlex.split(command)
    assert argv[0] == sys.executable and argv[1:3] == ["-m", "loomtui.tui.main"]
    assert argv[3:] == ["--state-dir", "/tmp/state; rm -rf x", "--config", "/tmp/a b/con'fig.toml"]


def serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loomtui.tui.main", *args], capture_output=True, text=True,
                          env=loom_env(), cwd=REPO, timeout=60)


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.5", "example.com"])
def test_a_non_loopback_host_is_refused_in_one_line_before_anything_starts(host, tmp_path):
    result = serve("--serve", "--host", host, "--port", "8123", "--state-dir", str(tmp_path / "state"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"loom-tui: --host {host} is not a loopback address")
    assert "ssh -L 8123:127.0.0.1:8123" in lines[0]
    assert not (tmp_path / "state").exists()  # refused before the state dir was touched


def test_port_and_host_need_serve_and_a_real_port():
    assert serve("--port", "9000").returncode == 2
    bad = serve("--serve", "--port", "70000")
    assert bad.returncode == 2 and "not a TCP port" in bad.stderr
