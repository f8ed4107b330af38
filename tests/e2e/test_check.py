"""`loom check` end to end: the real command against a real store, agent and supervisor, one exit
code per state as monitoring plugins read them (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN)."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest
from harness import wait_for

pytestmark = pytest.mark.e2e

FAST = {"watchdog": {"interval": "1s", "exit_check": "300ms", "backoff_base": "300ms", "backoff_max": "1s"}}


def check(harness) -> tuple[int, str]:
    result = harness.loom("check")
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and result.stderr == "", (result.stdout, result.stderr)
    return result.returncode, lines[0]


def until(harness, code: int, what: str) -> str:
    """The check's line once it exits `code` (the supervisor needs a tick or two to see a change)."""
    seen: list[tuple[int, str]] = []

    def got():
        seen.append(check(harness))
        return seen[-1][1] if seen[-1][0] == code else None

    try:
        return wait_for(got, 90, what=what)
    except AssertionError:
        raise AssertionError(f"{what}: last {seen[-1:]}") from None


def test_each_state_has_its_exit_code(make_harness):
    harness = make_harness(sections=FAST)
    code, line = check(harness)  # nothing started: no agent, no supervisor
    assert code == 2 and line.startswith("LOOM CRITICAL - agent down") and "no supervisor heartbeat" in line

    harness.start()
    log = open(harness.root / "supervise.log", "w")
    daemon = harness.popen("-m", "loomtui", "supervise", stdout=log, stderr=subprocess.STDOUT)
    try:
        line = until(harness, 0, "OK with the agent up and the supervisor beating")
        assert line.startswith("LOOM OK - main ") and "supervisor heartbeat" in line and "| agents=1 down=0" in line

        assert harness.loom("hold", "--for", "1h", "--reason", "upgrading | the box").returncode == 0
        line = until(harness, 1, "WARNING while the operator holds it")
        assert "agent held: upgrading / the box" in line and line.count("|") == 1
        assert harness.loom("release").returncode == 0
        until(harness, 0, "OK again after the release")

        server = harness.server_pid()
        os.kill(server, signal.SIGSTOP)  # tmux stops answering: nothing is known of the agent
        try:
            line = until(harness, 3, "UNKNOWN while tmux does not answer")
            assert "agent: tmux did not answer" in line
        finally:
            os.kill(server, signal.SIGCONT)
        until(harness, 0, "OK once tmux answers again")

        # An agent added to the config after the daemon started (it read its config once): the
        # daemon has no watchdog for it, and `loom check` says so rather than OK.
        text = harness.config_path.read_text().replace("[agent]\n", '[[agents]]\nname = "main"\n', 1)
        text = text.replace("[[agent.modals]]", "[[agents.modals]]")
        later = harness.root / "later.toml"
        later.write_text(text + f'[[agents]]\nname = "beta"\ntmux_socket = "{harness.socket}"\nsession = "beta"\n')
        result = harness.loom("--config", str(later), "check")
        assert result.returncode == 2 and "agent beta is not supervised" in result.stdout, result.stdout
        assert "agent main is not supervised" not in result.stdout
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(30)
    line = until(harness, 2, "CRITICAL once the supervisor's heartbeat is stale")
    assert "supervisor heartbeat" in line and "loom supervise is not running" in line


def test_an_unreadable_state_dir_is_unknown_and_a_bad_config_exits_2(harness, tmp_path):
    harness.state_dir.mkdir(parents=True, exist_ok=True)
    (harness.state_dir / "loom.db").write_bytes(b"this is not a database" * 100)
    result = harness.loom("check")
    assert result.returncode == 3 and result.stdout.startswith("LOOM UNKNOWN - "), (result.stdout, result.stderr)
    bad = tmp_path / "bad.toml"
    bad.write_text("[canary]\nack_timout = '5s'\n")
    result = harness.loom("--config", str(bad), "check")
    assert result.returncode == 2 and "canary.ack_timout: unknown key" in result.stderr
