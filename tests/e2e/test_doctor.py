"""`loom doctor`: every check ok on a good setup with a running agent; a bad one fails, naming the check."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest
from conftest import REPO

from loomtui.store.db import DB_NAME

pytestmark = pytest.mark.e2e

CHECKS = ["tmux", "config", "state dir", "store", "ledger", "canary"]


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
    events = len(harness.events())
    assert events > 0 and f"ledger intact: {events} events" in checks["ledger"]


def test_a_claude_command_without_the_canary_permissions_fails_the_canary_check(make_harness):
    bare = "claude --session-id {session_id}"
    harness = make_harness(sections={"agent": {"fresh_command": bare, "resume_command": "claude --resume {session_id}"}})
    result = harness.loom("doctor")
    assert result.returncode == 1, result.stdout + result.stderr
    checks = lines_by_check(result.stdout)
    assert status(checks["canary"]) == "FAIL"
    assert "agent.fresh_command lacks --add-dir and --allowedTools 'Bash(touch:*)'" in checks["canary"]
    assert "agent.resume_command lacks" in checks["canary"]
    assert [name for name, line in checks.items() if status(line) != "ok"] == ["canary"], result.stdout


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
