"""The real Claude Code CLI in stream-json mode, against the fake Messages API: the behaviour the
pump and the stream-json driver rely on (docs/STREAM.md, "Claude Code, as checked"), pinned so a
new CLI version that changes it fails here first."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import uuid
from pathlib import Path

import pytest
import fake_anthropic
from fake_anthropic import FakeAnthropic, claude_bin
from harness import wait_for

pytestmark = pytest.mark.e2e

STREAM = ["-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose"]
# Long enough that a CLI which was going to speak on its own would have; the checks that use it
# can only pass wrongly on a slow machine, never fail.
QUIET = 5.0


def canary(path: Path) -> str:
    return f"liveness check — run this one command and do not reply: touch {path}"


def line(text: str, **extra) -> str:
    return json.dumps({"type": "user", "message": {"role": "user", "content": text}, **extra})


class Cli:
    """One CLI process with pipes; stdout's events and stderr's lines collected by threads."""

    def __init__(self, home: Path, env: dict[str, str], *args: str) -> None:
        self.events: list[dict] = []
        self.raw: list[str] = []
        self.err: list[str] = []
        self.proc = subprocess.Popen([str(claude_bin()), *STREAM, *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                     cwd=home / "work")
        self._readers = [threading.Thread(target=self._out, daemon=True),
                         threading.Thread(target=self._err, daemon=True)]
        for reader in self._readers:
            reader.start()

    def _out(self) -> None:
        for text in self.proc.stdout:
            self.raw.append(text)
            try:
                self.events.append(json.loads(text))
            except ValueError:
                pass

    def _err(self) -> None:
        self.err.extend(self.proc.stderr)

    def send(self, text: str, **extra) -> None:
        self.proc.stdin.write(line(text, **extra) + "\n")
        self.proc.stdin.flush()

    def kinds(self) -> list[str]:
        return [f"{e['type']}/{e['subtype']}" if "subtype" in e else e["type"] for e in self.events]

    def results(self) -> list[dict]:
        return [e for e in self.events if e["type"] == "result"]

    def wait_results(self, n: int, timeout: float = 120) -> list[dict]:
        return wait_for(lambda: self.results() if len(self.results()) >= n else None, timeout,
                        what=f"{n} result events (have {self.kinds()}, stderr {self.err})")

    def finish(self, timeout: float = 60) -> int:
        """Close stdin (the CLI ends after its turn) and collect everything it wrote."""
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        status = self.proc.wait(timeout)
        for reader in self._readers:
            reader.join(10)
        return status

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        for reader in self._readers:
            reader.join(10)


@pytest.fixture
def fake():
    with FakeAnthropic() as served:
        yield served


@pytest.fixture
def cli(tmp_path, fake):
    """Start CLIs that share one home (one config dir, so their sessions); all killed by pid at the end."""
    home = tmp_path / "home"
    (home / "work").mkdir(parents=True)
    env = {"PATH": os.environ.get("PATH", ""), **fake.env(home)}
    started: list[Cli] = []

    def start(*args: str) -> Cli:
        process = Cli(home, env, *args)
        started.append(process)
        return process

    start.home = home
    yield start
    for process in started:
        process.kill()


def test_init_comes_with_each_turn_never_before_the_first_message_and_one_process_holds_the_session(cli, fake):
    session = str(uuid.uuid4())
    agent = cli("--session-id", session)
    with pytest.raises(AssertionError):
        wait_for(lambda: agent.raw or agent.proc.poll() is not None, QUIET, what="anything before a message")
    assert agent.raw == [] and fake.main_requests() == []
    agent.send("hello MARK-1")
    [first] = agent.wait_results(1)
    assert agent.kinds() == ["system/init", "assistant", "result/success"]
    init = agent.events[0]
    assert init["session_id"] == session and "Bash" in init["tools"] and init["claude_code_version"] == "2.1.332"
    assert first["is_error"] is False and first["result"] == "heard: hello MARK-1" and first["num_turns"] == 1
    assert first["permission_denials"] == [] and first["session_id"] == session
    agent.send("again MARK-2")
    agent.wait_results(2)
    # A fresh init opens every turn, not only the first.
    assert agent.kinds()[3:] == ["system/init", "assistant", "result/success"]
    assert agent.events[3]["session_id"] == session
    assert fake.main_requests()[-1].user_texts() == ["hello MARK-1", "again MARK-2"]
    assert "heard: hello MARK-1" in fake.main_requests()[-1].texts()
    assert agent.finish() == 0


def test_a_background_tasks_end_is_told_in_a_turn_the_cli_takes_by_itself(cli, fake):
    """The pump's `own turn` (pump/rules.py): a background task's events come whenever the task
    does, and its end is told to the model in a turn no line began, `init` to `result`."""
    agent = cli("--session-id", str(uuid.uuid4()), "--allowedTools", "Bash(sleep:*)")
    agent.send("in the background: sleep 1")
    agent.wait_results(2)
    kinds = agent.kinds()
    first = kinds.index("result/success")
    assert "system/task_started" in kinds[:first]
    after = kinds[first + 1:]
    # Its end, then its own turn: the task's events first, none of them an init.
    assert "system/task_notification" in after and after[-3:] == ["system/init", "assistant", "result/success"]
    assert after.index("system/task_notification") < after.index("system/init")
    assert [r.user_texts()[-1] for r in fake.main_requests()][:1] == ["in the background: sleep 1"]
    assert sum(1 for r in fake.main_requests() if fake_anthropic.is_notice(r)) == 1
    assert agent.finish() == 0


def test_a_background_task_that_ends_inside_another_turn_is_still_told_in_a_turn_of_its_own(cli, fake):
    """The task's end, told while another line's turn runs: its `task_notification` comes inside that
    turn, and the CLI still takes its own turn after that turn's result (the bridge keeps a task of
    the operator's told ended until that turn: telegram/bridge.py)."""
    agent = cli("--session-id", str(uuid.uuid4()), "--allowedTools", "Bash(sleep:*)")
    agent.send("in the background: sleep 6")  # long enough for its own line's turn to end first
    agent.wait_results(1)
    fake.slow = 20  # the next line's turn outlasts the task
    agent.send("hello there")
    agent.wait_results(2, timeout=240)
    fake.slow = 0
    agent.wait_results(3, timeout=240)
    kinds = agent.kinds()
    second, third = [i for i, k in enumerate(kinds) if k.startswith("result/")][1:3]
    inside = kinds[kinds.index("result/success") + 1:second]
    assert inside[0] == "system/init" and "system/task_notification" in inside
    assert kinds[second + 1:third + 1] == ["system/init", "assistant", "result/success"]
    assert agent.results()[1]["result"] == "heard: hello there"
    assert agent.results()[2]["result"] == "noted: a background task ended."
    assert agent.finish() == 0


def test_a_canary_runs_its_touch_through_bash_when_its_directory_is_added(cli, tmp_path):
    acks = tmp_path / "acks"
    acks.mkdir()
    agent = cli("--session-id", str(uuid.uuid4()), "--allowedTools", "Bash(touch:*)", "--add-dir", str(acks))
    agent.send(canary(acks / "nonce1"))
    [result] = agent.wait_results(1)
    assert (acks / "nonce1").exists()
    assert agent.kinds() == ["system/init", "assistant", "user", "assistant", "result/success"]
    [call] = agent.events[1]["message"]["content"]
    assert call["type"] == "tool_use" and call["name"] == "Bash" and call["input"]["command"] == f"touch {acks}/nonce1"
    [answer] = agent.events[2]["message"]["content"]
    assert answer["type"] == "tool_result" and answer["tool_use_id"] == call["id"] and answer["is_error"] is False
    assert result["is_error"] is False and result["permission_denials"] == [] and result["num_turns"] == 2
    assert agent.finish() == 0


def test_a_touch_outside_the_working_directories_is_denied_and_the_turn_still_succeeds(cli, tmp_path):
    # Bash(touch:*) alone does not cover a path outside the cwd and the added directories.
    acks = tmp_path / "acks"
    acks.mkdir()
    agent = cli("--session-id", str(uuid.uuid4()), "--allowedTools", "Bash(touch:*)")
    agent.send(canary(acks / "nonce2"))
    [result] = agent.wait_results(1)
    assert not (acks / "nonce2").exists()
    assert agent.kinds() == ["system/init", "assistant", "system/permission_denied", "user", "assistant",
                             "result/success"]
    denied = agent.events[2]
    call_id = agent.events[1]["message"]["content"][0]["id"]
    assert denied["tool_name"] == "Bash" and denied["tool_use_id"] == call_id
    [answer] = agent.events[3]["message"]["content"]
    assert answer["type"] == "tool_result" and answer["is_error"] is True
    assert result["is_error"] is False and result["subtype"] == "success"
    assert result["permission_denials"] == [{"tool_name": "Bash", "tool_use_id": call_id, "tool_input": {
        "command": f"touch {acks}/nonce2", "description": "Touch the ack file"}}]
    assert agent.finish() == 0


def test_resume_continues_the_session_and_says_nothing_until_a_message(cli, fake):
    session = str(uuid.uuid4())
    first = cli("--session-id", session)
    first.send("before MARK-1")
    first.wait_results(1)
    assert first.finish() == 0
    resumed = cli("--resume", session)
    with pytest.raises(AssertionError):
        wait_for(lambda: resumed.raw or resumed.proc.poll() is not None, QUIET, what="anything before a message")
    resumed.send("after MARK-2")
    [result] = resumed.wait_results(1)
    assert resumed.kinds() == ["system/init", "assistant", "result/success"]
    assert resumed.events[0]["session_id"] == session and result["session_id"] == session
    assert fake.main_requests()[-1].user_texts() == ["before MARK-1", "after MARK-2"]
    assert resumed.finish() == 0


def test_session_id_of_an_existing_session_is_refused(cli):
    session = str(uuid.uuid4())
    first = cli("--session-id", session)
    first.send("hello")
    first.wait_results(1)
    assert first.finish() == 0
    again = cli("--session-id", session)
    assert again.finish() == 1
    assert again.raw == [] and any(f"Session ID {session} is already in use" in e for e in again.err)


def test_resume_of_an_unknown_session_prints_an_error_result_and_exits_1_without_a_message(cli):
    unknown = str(uuid.uuid4())
    agent = cli("--resume", unknown)
    assert agent.proc.wait(60) == 1
    agent.finish()
    assert agent.kinds() == ["result/error_during_execution"]
    [result] = agent.events
    assert result["is_error"] is True and result["num_turns"] == 0 and result["session_id"] == unknown
    assert result["errors"] == [f"No conversation found with session ID: {unknown}"]


def test_a_line_that_is_not_json_ends_the_cli_with_status_1(cli):
    agent = cli("--session-id", str(uuid.uuid4()))
    agent.proc.stdin.write("not json\n")
    agent.proc.stdin.flush()
    assert agent.proc.wait(60) == 1
    agent.finish()
    assert agent.raw == [] and any("Error parsing streaming input line" in e for e in agent.err)


def test_messages_written_during_a_turn_are_queued_then_merged_into_one_turn_and_kept(cli, fake):
    session = str(uuid.uuid4())
    fake.slow = 3600
    agent = cli("--session-id", session)
    ids = [str(uuid.UUID(int=n, version=4)) for n in range(4)]
    agent.send("long L0", uuid=ids[0])
    wait_for(lambda: fake.main_requests(), 60, what="the long turn's request")
    for n in (1, 2, 3):
        agent.send(f"injected I{n}", uuid=ids[n])
    lifecycle = lambda: [(e["command_uuid"], e["state"]) for e in agent.events if e["type"] == "command_lifecycle"]  # noqa: E731
    wait_for(lambda: all((i, "queued") in lifecycle() for i in ids), 60, what="all four queued")
    assert agent.results() == []
    fake.slow = 0
    agent.wait_results(2)
    wait_for(lambda: all((i, "completed") in lifecycle() for i in ids), 60, what="all four completed")
    # Three lines, one user message and one result: the CLI joined them with newlines.
    assert [r["result"] for r in agent.results()] == ["heard: long L0", "heard: injected I1\ninjected I2\ninjected I3"]
    states = lifecycle()
    assert states.index((ids[0], "completed")) < min(states.index((i, "started")) for i in ids[1:])
    assert agent.finish() == 0
    resumed = cli("--resume", session)
    resumed.send("after R1")
    resumed.wait_results(1)
    assert fake.main_requests()[-1].user_texts() == ["long L0", "injected I1\ninjected I2\ninjected I3", "after R1"]
    assert resumed.finish() == 0


def session_file_text(home: Path, session: str) -> str:
    return "".join(p.read_text(encoding="utf-8") for p in (home / ".claude" / "projects").glob(f"*/{session}.jsonl"))


def test_a_turn_that_ended_is_kept_even_when_the_cli_is_killed_at_its_result(cli, fake):
    session = str(uuid.uuid4())
    agent = cli("--session-id", session)
    agent.send("first F0")
    agent.wait_results(1)
    agent.send("second S1")
    wait_for(lambda: len(agent.results()) == 2, 60, interval=0.001, what="the second result")
    agent.kill()
    assert agent.proc.returncode == -signal.SIGKILL
    resumed = cli("--resume", session)
    resumed.send("after R0")
    resumed.wait_results(1)
    assert fake.main_requests()[-1].user_texts() == ["first F0", "second S1", "after R0"]
    assert "heard: second S1" in fake.main_requests()[-1].texts()
    assert resumed.finish() == 0


def test_a_running_turn_killed_with_sigkill_is_kept_once_the_cli_wrote_it_down(cli, fake):
    # The CLI writes a turn's message to its session file a moment after sending the request; a
    # SIGKILL before that loses it (seen here within a few ms, never after half a second).
    session = str(uuid.uuid4())
    agent = cli("--session-id", session)
    agent.send("first F0")
    agent.wait_results(1)
    fake.silent = True
    agent.send("cut short K0")
    wait_for(lambda: fake.held(), 60, what="the turn's request held")
    wait_for(lambda: "cut short K0" in session_file_text(cli.home, session), 60, what="the message on disk")
    agent.kill()
    fake.silent = False
    resumed = cli("--resume", session)
    resumed.send("after R0")
    resumed.wait_results(1)
    assert fake.main_requests()[-1].user_texts() == ["first F0", "cut short K0", "after R0"]
    assert resumed.finish() == 0
