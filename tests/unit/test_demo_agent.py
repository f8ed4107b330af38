"""The demo agent's session rules match Claude Code's: unknown resume fails, ids are not reused."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

from conftest import REPO, loom_env


def agent(data, *args, input=""):
    return subprocess.run([sys.executable, "-m", "loomtui.demo.agent", "--data-dir", str(data), "--bot", "", *args],
                          input=input, capture_output=True, text=True, env=loom_env(), cwd=REPO, timeout=30)


def test_resume_of_unknown_session(tmp_path):
    result = agent(tmp_path, "--resume", str(uuid.uuid4()))
    assert result.returncode == 1
    assert "No conversation found" in result.stdout


def test_session_id_in_use_is_refused(tmp_path):
    sid = str(uuid.uuid4())
    assert agent(tmp_path, "--session-id", sid, input="hello\n").returncode == 0
    again = agent(tmp_path, "--session-id", sid)
    assert again.returncode == 1 and "already in use" in again.stdout
    resumed = agent(tmp_path, "--resume", sid, input="")
    assert resumed.returncode == 0
    assert "resumed: 2 earlier turns" in resumed.stdout and "hello" in resumed.stdout


def test_canary_instruction_is_run(tmp_path):
    target = tmp_path / "acks" / "nonce123"
    target.parent.mkdir()
    sid = str(uuid.uuid4())
    line = f"liveness check — run this one command and do not reply: touch {target}\n"
    assert agent(tmp_path, "--session-id", sid, input=line).returncode == 0
    assert target.exists()


def test_fault_switches_exit_codes(tmp_path):
    assert agent(tmp_path, "--session-id", str(uuid.uuid4()), input="/crash\n").returncode == 1
    assert agent(tmp_path, "--session-id", str(uuid.uuid4()), input="/exit0\nnever read\n").returncode == 0


def test_late_acks_delay_exactly_the_next_probes(tmp_path):
    acks = tmp_path / "acks"
    acks.mkdir()
    sid = str(uuid.uuid4())
    probes = "".join(f"liveness check — run this one command and do not reply: touch {acks / n}\n" for n in "abc")
    assert agent(tmp_path, "--session-id", sid, input="/late-acks 2 0.1\n" + probes).returncode == 0
    assert all((acks / n).exists() for n in "abc")
    turns = [json.loads(line) for line in (tmp_path / "sessions" / f"{sid}.jsonl").read_text().splitlines()]
    tools = [t["text"] for t in turns if t["role"] in ("fault", "tool")]
    # The delay comes before each of the first two acks, never before the third.
    assert tools == ["late ack by 0.1s", f"touch {acks / 'a'}", "late ack by 0.1s", f"touch {acks / 'b'}",
                     f"touch {acks / 'c'}"]
