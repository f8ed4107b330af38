"""`loom doctor`: every check ok on a good setup with a running agent; a bad one fails, naming the check."""

from __future__ import annotations

import os
import re
import shlex
import sqlite3
import subprocess
import sys

import pytest
from conftest import REPO, run_loom

from loomtui.store.db import DB_NAME

pytestmark = pytest.mark.e2e

CHECKS = ["tmux", "config", "state dir", "store", "ledger", "cwd", "agent", "canary", "telegram", "memory", "simulation"]


def lines_by_check(stdout: str) -> dict[str, str]:
    """{check name: its line}; the status is the line's first word."""
    found = {}
    for line in stdout.splitlines():
        for name in CHECKS:
            if line[6:].startswith(name):
                found[name] = line
    return found


def status(line: str) -> str:
    return line.split()[0]


def test_a_good_setup_with_a_running_agent_passes_every_check(harness):
    harness.start()
    result = harness.loom("doctor")
    assert result.returncode == 0, result.stdout + result.stderr
    checks = lines_by_check(result.stdout)
    # On a machine booted with systemd a lingering line comes too (a warning when it is off).
    lines = [line for line in result.stdout.splitlines() if not line[6:].startswith("linger")]
    assert list(checks) == CHECKS and len(lines) == len(CHECKS), result.stdout
    assert all(status(line) == "ok" for line in checks.values()), result.stdout
    assert str(harness.config_path) in checks["config"]
    assert f"{harness.state_dir} is writable" in checks["state dir"]
    assert "integrity ok" in checks["store"]
    held = r"ok    simulation   storm, seeds 1\.\.4, 0\.5 days each: every invariant held \(\d+ steps\)"
    assert re.fullmatch(held, checks["simulation"]), checks["simulation"]
    events = len(harness.events())
    assert events > 0 and f"ledger intact: {events} events" in checks["ledger"]


def test_a_claude_command_without_the_canary_permissions_fails_the_canary_check(make_harness):
    bare = "claude --session-id {session_id}"
    harness = make_harness(sections={"agent": {"fresh_command": bare, "resume_command": "claude --resume {session_id}"}})
    result = harness.loom("doctor", env={"PATH": f"{CLAUDE_BIN}{os.pathsep}{os.environ.get('PATH', '')}"})
    assert result.returncode == 1, result.stdout + result.stderr
    checks = lines_by_check(result.stdout)
    assert status(checks["canary"]) == "FAIL"
    assert "agent.fresh_command lacks --add-dir and --allowedTools 'Bash(touch:*)'" in checks["canary"]
    assert "agent.resume_command lacks" in checks["canary"]
    assert [name for name, line in checks.items() if status(line) != "ok"] == ["canary"], result.stdout
    # Without Loom's hooks settings there is no dispatch witness: a warning, which fails nothing alone.
    [hooks] = [line for line in result.stdout.splitlines() if line[6:].startswith("hooks")]
    assert status(hooks) == "warn" and "agent.fresh_command and agent.resume_command lack --settings " \
        "{hook_settings}" in hooks, hooks


def test_an_unwritable_state_dir_fails_naming_the_path(harness):
    harness.state_dir.mkdir(mode=0o500, parents=True)
    command = [sys.executable, "-m", "loomtui", "doctor"]
    if os.geteuid() == 0:
        # root writes through permission bits; drop the capabilities that let it (as CI runs).
        command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--", *command]
    result = subprocess.run(command, capture_output=True, text=True, env=harness.env(), cwd=REPO, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    checks = lines_by_check(result.stdout)
    assert status(checks["state dir"]) == "FAIL" and str(harness.state_dir) in checks["state dir"]
    assert "Permission denied" in checks["state dir"] and "Traceback" not in result.stderr
    assert status(checks["tmux"]) == status(checks["config"]) == "ok"


def test_a_tampered_ledger_fails_naming_the_event(harness):
    harness.start()
    db = sqlite3.connect(harness.state_dir / DB_NAME, timeout=60, isolation_level=None)
    try:
        db.execute("UPDATE ledger SET source = 'someone' WHERE id = 1")
    finally:
        db.close()
    result = harness.loom("doctor")
    assert result.returncode == 1, result.stdout + result.stderr
    checks = lines_by_check(result.stdout)
    assert status(checks["ledger"]) == "FAIL" and "ledger broken at event 1" in checks["ledger"]
    assert status(checks["store"]) == "ok"


def readme_config() -> str:
    """The Claude Code configuration README.md gives under "Running it for real", as written there."""
    text = (REPO / "README.md").read_text().split("A configuration for Claude Code", 1)[1]
    return text.split("```toml\n", 1)[1].split("```", 1)[0]


CLAUDE_BIN = REPO / "tests" / "claude" / "node_modules" / ".bin"


def readmes_home(tmp_path):
    """A home as README leaves it: the agent's directory, the bot token in a 0600 file, Claude Code
    (the pinned CLI) on PATH. {env} for a loom run there."""
    home = tmp_path / "home"
    (home / "agent").mkdir(parents=True)
    token = home / ".config" / "loom" / "bot-token"
    token.parent.mkdir(parents=True)
    token.write_text("123456:not-a-real-token\n")
    token.chmod(0o600)
    return {"HOME": str(home), "PATH": f"{CLAUDE_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


def doctor(tmp_path, config_text: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    path = tmp_path / "loom.toml"
    path.write_text(config_text)
    result = run_loom("--config", str(path), "--state-dir", str(tmp_path / "state"), "doctor", timeout=300,
                      env=env if env is not None else readmes_home(tmp_path))
    return result, lines_by_check(result.stdout)


def test_readmes_config_on_a_machine_without_what_it_names_fails_one_line_each(tmp_path):
    """No `claude` on PATH, no ~/agent, a token file readable by all: three failures, each with its fix."""
    home = tmp_path / "bare"
    home.mkdir()
    token = home / ".config" / "loom" / "bot-token"
    token.parent.mkdir(parents=True)
    token.write_text("123456:not-a-real-token\n")
    token.chmod(0o644)
    result, _ = doctor(tmp_path, readme_config(), {"HOME": str(home), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 1, result.stdout + result.stderr
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert [line.split()[1] for line in failed] == ["cwd", "agent", "telegram"], result.stdout
    assert f"agent.cwd {home}/agent is not a directory" in failed[0]
    assert "runs 'claude', which is not on the agent's PATH" in failed[1]
    assert f"telegram.token_file {token}: mode 0644 is too open; run: chmod 600 {token}" in failed[2]
    assert "not-a-real-token" not in result.stdout + result.stderr


def test_readmes_claude_code_config_passes_the_simulation(tmp_path):
    result, checks = doctor(tmp_path, readme_config())
    assert result.returncode == 0, result.stdout + result.stderr
    assert list(checks) == CHECKS and all(status(line) == "ok" for line in checks.values()), result.stdout
    assert "every invariant held" in checks["simulation"]


FAST = '[canary]\nmisses_to_recycle = 1\nack_timeout = "5s"\n'


def test_a_config_that_recycles_busy_agents_fails_naming_the_invariant_and_the_replay(tmp_path):
    # README's config without the hooks, one missed probe enough to recycle and 5 s to answer one: a
    # busy agent is recycled (nothing tells a busy agent from a deaf one but waiting).
    unhooked = readme_config().replace("--settings {hook_settings} ", "")
    assert "{hook_settings}" not in unhooked
    result, checks = doctor(tmp_path, unhooked + FAST)
    assert result.returncode == 1, result.stdout + result.stderr
    assert [name for name, line in checks.items() if status(line) != "ok"] == ["simulation"], result.stdout
    path = tmp_path / "loom.toml"
    found = re.fullmatch(r"FAIL  simulation   invariant definitive_signal broke on seed (\d+) at (\S+) "
                         r"\(storm, 0\.5 days\): canary_failed relaunch without a definitive signal: the agent could "
                         r"hear \(busy or healthy\) and was recycled; "
                         r"replay with (loom sim --profile storm --seed \1 --days 0\.5 --config (\S+))",
                         checks["simulation"])
    assert found and found[4] == str(path), checks["simulation"]
    # The command it names replays the same violation, at the same simulated time.
    replay = run_loom(*shlex.split(found[3])[1:], timeout=300)
    assert replay.returncode == 1, replay.stdout + replay.stderr
    assert "VIOLATION definitive_signal at step " in replay.stdout and f"({found[2]}): canary_failed" in replay.stdout


def test_with_the_hooks_one_miss_to_recycle_recycles_no_busy_agent(tmp_path):
    # README's hooks and one missed probe enough to recycle: the misses typed into a busy turn do not
    # count (issue 26). The wait still covers an idle agent's answer: the simulated CLI's, under
    # load, takes up to 40 s, and a slow boot's up to half the ack timeout past the boot grace, when
    # the probe is typed (45 s missed a probe that was heard, on seed 3: one miss, one recycle).
    result, checks = doctor(tmp_path, readme_config() + '[canary]\nmisses_to_recycle = 1\nack_timeout = "90s"\n')
    assert result.returncode == 0, result.stdout + result.stderr
    assert "every invariant held" in checks["simulation"], checks["simulation"]
