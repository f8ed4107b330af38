"""`loom jobs` and `loom canary --history N`: the read-only commands another host's console reads
(tui/remote_source.py) and an operator types. Real runs of a real job, a real probe of an agent
nobody runs, read back from the real store."""

from __future__ import annotations

import json
import secrets
import sys

import pytest
from conftest import run_loom

FAIL = "print('ERROR: upstream returned 503'); raise SystemExit(3)"


@pytest.fixture
def loom(tmp_path):
    tag = secrets.token_hex(4)
    config = tmp_path / "config.toml"
    logs = tmp_path / "logs"
    config.write_text(f"""
state_dir = "{tmp_path / 'state'}"
[agent]
tmux_socket = "loomtest-none-{tag}"
[[jobs]]
name = "nightly"
log = "{logs / 'nightly.log'}"
schedule = "every 1h"
[[jobs]]
name = "weekly"
log = "{logs / 'other.log'}"
""")

    def run(*args: str):
        return run_loom(*args, env={"LOOM_CONFIG": str(config)})

    return run


def test_loom_jobs_says_each_job_s_last_run_its_open_failures_and_when_it_is_due(loom):
    assert loom("run-job", "nightly", "--", sys.executable, "-c", FAIL).returncode == 3
    assert loom("sentinel", "scan", "--no-nudge").returncode == 0
    result = loom("jobs", "--json")
    assert result.returncode == 0, result.stderr
    nightly, never = json.loads(result.stdout)
    assert (nightly["name"], nightly["last_exit"], nightly["running"], nightly["schedule"]) == ("nightly", 3, False, "every 1h")
    assert nightly["open_items"] == 2  # the exit and the ERROR line
    assert nightly["last_start"] <= nightly["next_due"] and nightly["last_duration"] >= 0
    assert (never["last_exit"], never["last_start"], never["next_due"], never["open_items"]) == (None, None, None, 0)
    text = loom("jobs")
    assert text.returncode == 0, text.stderr
    first, second = text.stdout.splitlines()
    assert first.startswith("nightly") and "exit 3, started" in first and "2 open" in first and "next in" in first
    assert second.startswith("weekly") and "never ran" in second and "no schedule" in second


def test_canary_history_lists_the_probes_newest_first_and_sends_none(loom):
    for _ in range(2):
        loom("canary")  # nobody runs the agent's tmux: each probe fails to be typed, and is recorded
    result = loom("canary", "--history", "5", "--json")
    assert result.returncode == 0, result.stderr
    probes = json.loads(result.stdout)
    assert [p["id"] for p in probes] == sorted((p["id"] for p in probes), reverse=True) and len(probes) == 2
    assert all(p["result"] and p["sent_at"] and "nonce" not in p for p in probes), probes
    again = json.loads(loom("canary", "--history", "5", "--json").stdout)
    assert again == probes  # read, not sent
    assert len(json.loads(loom("canary", "--history", "1", "--json").stdout)) == 1
    lines = loom("canary", "--history", "5").stdout.splitlines()
    assert len(lines) == 2 and str(probes[0]["id"]) in lines[0]


@pytest.mark.parametrize("n", ["0", "-1", "1001"])
def test_a_history_of_no_probe_or_too_many_is_exit_2(loom, n):
    result = loom("canary", "--history", n)
    assert result.returncode == 2 and "--history takes 1 to 1000" in result.stderr, result.stderr


@pytest.mark.parametrize("words", [
    ["queue", "--witnessed", "9" * 20], ["queue", "--witnessed", "-1"], ["ledger", "tail", "-n", "9" * 20],
    ["ledger", "tail", "--before", "9" * 20], ["ledger", "tail", "--before", "0"],
    ["resolve", "9" * 20, "--note", "x"],
])
def test_a_number_the_store_cannot_take_is_exit_2_in_one_line(loom, words):
    # Past SQLite's largest integer it was a traceback (OverflowError) and exit 1.
    result = loom(*words)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "a whole number from" in result.stderr.strip().splitlines()[-1]
