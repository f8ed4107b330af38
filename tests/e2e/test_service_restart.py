"""The agent outlives its supervisor: a daemon killed with SIGKILL leaves the agent running and the
next one adopts it without a relaunch; under systemd the tmux server starts in a unit of its own
(through systemd-run), so `systemctl --user restart loom` and a crash leave the agent alone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from harness import wait_for
from test_supervise import FAST, Daemon, relaunches

from loomtui.agent import tmux
from loomtui.daemon import service
from loomtui.store import heartbeats
from loomtui.store.db import Store

pytestmark = pytest.mark.e2e


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_killed_supervisor_leaves_the_agent_and_the_next_adopts_it(make_harness):
    harness = make_harness(sections=FAST)
    harness.start()
    daemon = Daemon(harness)
    daemon.settle()
    agent, server = wait_for(harness.agent_pid, what="the agent"), harness.server_pid()
    starts, launched = harness.agent_starts(), len(relaunches(harness))
    daemon.kill()  # kill -9: no cleanup of any kind runs
    assert alive(agent) and alive(server)
    again = Daemon(harness)
    again.settle()
    # Adopted: the same process in the same pane, no relaunch recorded, no second start.
    assert harness.agent_pid() == agent and harness.server_pid() == server and alive(agent)
    assert harness.agent_starts() == starts and len(relaunches(harness)) == launched
    assert again.heartbeat()["pid"] == again.proc.pid
    assert again.stop() == 0
    assert alive(agent)  # a clean stop leaves it too: supervision ends, the agent does not


# -- the tmux server in a unit of its own ---------------------------------------------------------

# systemd-run's part, played by a stand-in where there is no user manager to ask: record the
# options, then run the command the way the manager would, with only the variables --setenv named
# (their values from this process's environment, as systemd-run takes them) and HOME.
STAND_IN = """#!{python}
import json, os, sys
argv = sys.argv[1:]
cut = argv.index("--")
options, command = argv[:cut], argv[cut + 1:]
with open({record!r}, "a") as fh:
    fh.write(json.dumps(options) + "\\n")
if {fail!r}:
    print("Failed to connect to bus: No medium found", file=sys.stderr)
    sys.exit(1)
env = {{"HOME": os.environ.get("HOME", "/")}}
for option in options:
    if option.startswith("--setenv="):
        name = option.split("=", 1)[1]
        if name in os.environ:
            env[name] = os.environ[name]
pid = os.fork()
if pid == 0:
    os.setsid()  # the manager's child, not ours: its own session
    os.execve(command[0], command, env)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def stand_in(root: Path, fail: bool = False) -> tuple[Path, Path]:
    bindir, record = root / "bin", root / "systemd-run.jsonl"
    bindir.mkdir(parents=True)
    script = bindir / "systemd-run"
    script.write_text(STAND_IN.format(python=sys.executable, record=str(record), fail=fail))
    script.chmod(0o755)
    return bindir, record


def calls(record: Path) -> list[list[str]]:
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


def test_the_tmux_server_is_started_through_systemd_run_with_names_not_values(make_harness, tmp_path):
    harness = make_harness(sections=FAST)
    bindir, record = stand_in(tmp_path / "fake")
    path = f"{bindir}:{os.environ['PATH']}"
    env = {tmux.UNIT_ENV: tmux.UNIT_ENV_VALUE, "PATH": path, "LOOM_TELEGRAM_TOKEN": "sekrit-123"}
    result = harness.loom("recycle", "--fresh", "--reason", "start", env=env)
    assert result.returncode == 0, result.stderr
    wait_for(lambda: "> " in harness.screen(), 30, what="the demo agent's prompt")
    [options] = calls(record)
    assert options[:2] == ["--user", "--quiet"] and "--property=Type=forking" in options
    assert f"--unit={tmux.unit_name(harness.socket)}" in options
    assert "--setenv=PATH" in options and "--setenv=LOOM_TELEGRAM_TOKEN" not in options
    assert "sekrit" not in record.read_text()
    # The server has the daemon's environment, less the bot's token.
    assert harness.tmux("show-environment", "-g", "PATH").stdout.strip() == f"PATH={path}"
    assert "sekrit" not in harness.tmux("show-environment", "-g").stdout
    # A server that is running already is not started again: only a new session in it.
    assert harness.tmux("new-session", "-d", "-s", "keep").returncode == 0
    assert harness.tmux("kill-session", "-t", "=agent").returncode == 0
    assert harness.loom("recycle", "--fresh", "--reason", "again", env=env).returncode == 0
    wait_for(lambda: "> " in harness.screen(), 30, what="the agent in a new session of the same server")
    assert len(calls(record)) == 1


def test_a_systemd_run_that_fails_is_named_and_nothing_starts(make_harness, tmp_path):
    harness = make_harness(sections=FAST)
    bindir, record = stand_in(tmp_path / "fake", fail=True)
    env = {tmux.UNIT_ENV: tmux.UNIT_ENV_VALUE, "PATH": f"{bindir}:{os.environ['PATH']}"}
    result = harness.loom("recycle", "--fresh", "--reason", "start", env=env)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert tmux.unit_name(harness.socket) in result.stderr and "Failed to connect to bus" in result.stderr
    assert harness.server_pid() is None and len(calls(record)) == 1


# -- a real user systemd ----------------------------------------------------------------------

def no_user_systemd() -> str | None:
    """Why there is no user manager to test against, or None."""
    if not shutil.which("systemctl") or not shutil.which("systemd-run"):
        return "systemctl or systemd-run is not installed"
    try:
        out = subprocess.run(["systemctl", "--user", "is-system-running"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"systemctl --user did not answer: {exc}"
    state = out.stdout.strip()
    if state in ("running", "degraded"):
        return None
    return f"no user systemd manager here (systemctl --user is-system-running: {state or out.stderr.strip()})"


def systemctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemctl", "--user", *args], capture_output=True, text=True, timeout=60)


def main_pid(unit: str) -> int:
    out = systemctl("show", "-p", "MainPID", "--value", unit).stdout.strip()
    return int(out) if out.isdigit() else 0


@pytest.mark.skipif(no_user_systemd() is not None, reason=str(no_user_systemd()))
def test_the_agent_survives_systemctl_restart_and_a_crash_of_the_unit(make_harness):
    harness = make_harness(sections=FAST)
    ctx = harness.ctx()
    name = f"loom-test-{harness.tag}.service"
    runtime = Path(os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}") / "systemd" / "user"
    runtime.mkdir(parents=True, exist_ok=True)
    unit = runtime / name
    unit.write_text(service.systemd_unit(ctx))
    tmux_unit = tmux.unit_name(harness.socket)

    def beat_of(pid: int):
        try:
            with Store.in_dir(harness.state_dir) as store:
                beat = heartbeats.read(store).get("supervisor")
        except Exception:
            return None
        return beat if beat and pid and beat["pid"] == pid else None

    try:
        assert systemctl("daemon-reload").returncode == 0
        started = systemctl("start", name)
        assert started.returncode == 0, started.stderr
        first = wait_for(lambda: main_pid(name), 60, what="the daemon's pid")
        wait_for(lambda: beat_of(first), 60, what="a heartbeat from the unit's daemon")
        env = {tmux.UNIT_ENV: tmux.UNIT_ENV_VALUE}
        assert harness.loom("recycle", "--fresh", "--reason", "start", env=env).returncode == 0
        agent = wait_for(harness.agent_pid, 60, what="the agent")
        assert systemctl("is-active", tmux_unit).stdout.strip() == "active"
        starts = harness.agent_starts()

        assert systemctl("restart", name).returncode == 0
        second = wait_for(lambda: main_pid(name) not in (0, first) and main_pid(name), 60, what="a new daemon")
        wait_for(lambda: beat_of(second), 60, what="the restarted daemon's heartbeat")
        assert alive(agent) and harness.agent_pid() == agent

        assert systemctl("kill", "--signal=KILL", name).returncode == 0  # a crash: Restart=always
        third = wait_for(lambda: main_pid(name) not in (0, second) and main_pid(name), 90, what="a restart")
        wait_for(lambda: beat_of(third), 60, what="the new daemon's heartbeat")
        assert alive(agent) and harness.agent_pid() == agent and harness.agent_starts() == starts
    finally:
        systemctl("stop", name)
        systemctl("stop", tmux_unit)
        unit.unlink(missing_ok=True)
        systemctl("daemon-reload")
