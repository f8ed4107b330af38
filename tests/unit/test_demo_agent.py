"""The demo agent's session rules match Claude Code's: unknown resume fails, ids are not reused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

from conftest import REPO, loom_env
from harness import wait_for


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


def test_a_resumed_long_turn_is_cut_at_a_word_and_marked(tmp_path):
    sid = str(uuid.uuid4())
    words = " ".join(f"word{i:03d}" for i in range(60))  # 479 characters
    assert agent(tmp_path, "--session-id", sid, input=words + "\n").returncode == 0
    resumed = agent(tmp_path, "--resume", sid, input="")
    [line] = [x for x in resumed.stdout.splitlines() if x.startswith("> word000")]
    assert line.endswith(" …") and len(line) <= 2 + 200
    assert line[2:-2].split() == words.split()[:len(line[2:-2].split())]  # whole words only


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


# Stream-json mode: Claude Code's print mode, with the same switches.

STREAM = ["-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose"]


def user(text):
    return json.dumps({"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": text}]}}) + "\n"


def events(result):
    return [json.loads(line) for line in result.stdout.splitlines()]


def stream(data, *args, messages=(), flags=STREAM):
    return agent(data, *args, *flags, input="".join(user(m) for m in messages))


def test_stream_mode_answers_each_message_with_claude_code_shaped_events(tmp_path):
    sid = str(uuid.uuid4())
    # Loom appends the flags after the configured command's own; any order is taken.
    result = agent(tmp_path, "--verbose", "--output-format", "stream-json", "--session-id", sid, "-p",
                   "--input-format", "stream-json", input=user("hello") + user("again!"))
    assert result.returncode == 0, result.stderr
    init, *rest = events(result)
    assert (init["type"], init["subtype"], init["session_id"]) == ("system", "init", sid)
    # Another init starts each turn, as Claude Code's do.
    assert [(e["type"], e.get("subtype"), e.get("session_id")) for e in rest] == [
        ("system", "init", sid), ("assistant", None, sid), ("result", "success", sid)] * 2
    assert rest[1]["message"]["content"] == [{"type": "text", "text": "heard you (5 characters)"}]
    result_event = rest[2]
    assert {k: result_event[k] for k in ("subtype", "is_error", "result", "num_turns", "permission_denials")} == {
        "subtype": "success", "is_error": False, "result": "heard you (5 characters)", "num_turns": 1,
        "permission_denials": []}
    assert isinstance(result_event["duration_ms"], int)
    assert rest[5]["result"] == "heard you (6 characters)"


def test_stream_mode_takes_its_own_flag_and_string_content(tmp_path):
    line = json.dumps({"type": "user", "message": {"role": "user", "content": "plain string"}}) + "\n"
    other = json.dumps({"type": "control_response", "response": {}}) + "\n"
    result = agent(tmp_path, "--stream-json", "--session-id", str(uuid.uuid4()), input=other + line)
    assert result.returncode == 0
    assert [e["type"] for e in events(result)] == ["system", "system", "assistant", "result"]
    assert events(result)[-1]["result"] == "heard you (12 characters)"


def test_a_line_that_is_not_json_ends_stream_mode_with_status_1(tmp_path):
    result = agent(tmp_path, "--session-id", str(uuid.uuid4()), *STREAM, input="not json\n" + user("never"))
    assert result.returncode == 1 and [e["type"] for e in events(result)] == ["system"]
    assert "Error parsing streaming input line: 'not json'" in result.stderr


def test_stream_mode_runs_the_canary_through_a_bash_tool_call(tmp_path):
    target = tmp_path / "acks" / "nonce 1"
    target.parent.mkdir()
    sid = str(uuid.uuid4())
    line = f"liveness check — run this one command and do not reply: touch '{target}'"
    result = stream(tmp_path, "--session-id", sid, messages=[line])
    assert result.returncode == 0 and target.exists()
    _, _, call, answer, done = events(result)
    (block,) = call["message"]["content"]
    assert (block["type"], block["name"], block["input"]) == ("tool_use", "Bash", {"command": f"touch '{target}'"})
    (tool_result,) = answer["message"]["content"]
    assert (answer["type"], tool_result["type"], tool_result["tool_use_id"], tool_result["is_error"]) == (
        "user", "tool_result", block["id"], False)
    assert (done["type"], done["is_error"]) == ("result", False)
    turns = [json.loads(t) for t in (tmp_path / "sessions" / f"{sid}.jsonl").read_text().splitlines()]
    assert [t["text"] for t in turns if t["role"] == "tool"] == [f"touch {target}"]


def test_stream_mode_session_rules_print_to_stderr(tmp_path):
    unknown = str(uuid.uuid4())
    result = stream(tmp_path, "--resume", unknown)
    assert result.returncode == 1
    assert result.stderr.strip() == f"No conversation found with session ID: {unknown}"
    # And an error result, as Claude Code 2.1 writes before it exits.
    (failed,) = events(result)
    assert {k: failed[k] for k in ("type", "subtype", "is_error", "session_id", "errors")} == {
        "type": "result", "subtype": "error_during_execution", "is_error": True, "session_id": unknown,
        "errors": [f"No conversation found with session ID: {unknown}"]}
    sid = str(uuid.uuid4())
    assert stream(tmp_path, "--session-id", sid, messages=["hello"]).returncode == 0
    again = stream(tmp_path, "--session-id", sid)
    assert again.returncode == 1 and f"Session ID {sid} is already in use" in again.stderr


def test_a_stream_conversation_resumes_in_either_mode(tmp_path):
    sid = str(uuid.uuid4())
    assert stream(tmp_path, "--session-id", sid, messages=["hello"]).returncode == 0
    resumed = stream(tmp_path, "--resume", sid, messages=["more"])
    assert events(resumed)[0] == {**events(resumed)[0], "type": "system", "subtype": "init", "session_id": sid}
    interactive = agent(tmp_path, "--resume", sid, input="")
    assert "resumed: 4 earlier turns" in interactive.stdout and "more" in interactive.stdout


def test_stream_mode_fault_switches(tmp_path):
    crash = stream(tmp_path, "--session-id", str(uuid.uuid4()), messages=["/crash", "never read"])
    assert crash.returncode == 1 and "Error: simulated crash" in crash.stderr
    assert [e["type"] for e in events(crash)] == ["system", "system"]
    bye = stream(tmp_path, "--session-id", str(uuid.uuid4()), messages=["/exit0", "never read"])
    assert bye.returncode == 0 and [e["type"] for e in events(bye)] == ["system", "system", "assistant", "result"]
    assert events(bye)[-1]["result"] == "bye"
    failing = stream(tmp_path, "--session-id", str(uuid.uuid4()), messages=["/error-result"])
    assert {k: events(failing)[-1][k] for k in ("type", "subtype", "is_error")} == {
        "type": "result", "subtype": "error_during_execution", "is_error": True}
    slow = stream(tmp_path, "--session-id", str(uuid.uuid4()), messages=["/slow 0.1"])
    assert [e["type"] for e in events(slow)] == ["system", "system", "assistant", "assistant", "result"]
    assert events(slow)[-1]["result"] == "done after 0.1s"
    say = stream(tmp_path, "--session-id", str(uuid.uuid4()), messages=["/say \x1b[31mred\nline two"])
    assert events(say)[-1]["result"] == "\x1b[31mred\nline two"
    # A long turn calls a tool every BUSY_TOOL_EVERY (2 s) seconds and once more at its end.
    busy = stream(tmp_path, "--session-id", str(uuid.uuid4()), messages=["/busy 2.5"])
    calls = [e for e in events(busy) if e["type"] == "assistant" and e["message"]["content"][0]["type"] == "tool_use"]
    assert len(calls) == 2 and calls[0]["message"]["content"][0]["name"] == "Bash"
    assert events(busy)[-1]["result"] == "done after 2.5s"


def test_a_modal_in_stream_mode_is_a_permission_denial(tmp_path):
    for switch in ("/modal", "/deny"):
        result = stream(tmp_path, "--session-id", str(uuid.uuid4()), messages=[switch])
        _, _, call, denied, refusal, text, done = events(result)
        tool_id = call["message"]["content"][0]["id"]
        assert {k: denied[k] for k in ("type", "subtype", "tool_name", "tool_use_id")} == {
            "type": "system", "subtype": "permission_denied", "tool_name": "Bash", "tool_use_id": tool_id}
        assert refusal["message"]["content"][0]["is_error"] is True
        assert text["message"]["content"][0]["type"] == "text"
        assert (done["is_error"], [d["tool_name"] for d in done["permission_denials"]]) == (False, ["Bash"])
        assert done["permission_denials"][0]["tool_use_id"] == tool_id


def test_stream_mode_late_acks_and_the_poller(tmp_path):
    acks = tmp_path / "acks"
    acks.mkdir()
    sid = str(uuid.uuid4())
    probes = [f"liveness check — run this one command and do not reply: touch {acks / n}" for n in "ab"]
    result = agent(tmp_path, "--session-id", sid, *STREAM, "--bot", "b1",
                   input="".join(user(m) for m in ["/late-acks 1 0.1", *probes, "/kill-poller", "/kill-poller"]))
    assert result.returncode == 0 and all((acks / n).exists() for n in "ab")
    turns = [json.loads(line) for line in (tmp_path / "sessions" / f"{sid}.jsonl").read_text().splitlines()]
    assert [t["text"] for t in turns if t["role"] in ("fault", "tool")] == [
        "late ack by 0.1s", f"touch {acks / 'a'}", f"touch {acks / 'b'}"]
    answers = [e["result"] for e in events(result) if e["type"] == "result"]
    assert answers[0] == "the next 1 acks will be 0.1s late"
    assert answers[3].startswith("killed my poller ") and answers[4] == "no poller to kill"


def _silent_after(tmp_path, sid, marker, proc):
    """Once the session file shows `marker`, the agent has reached its silence: nothing more comes."""
    session = tmp_path / "sessions" / f"{sid}.jsonl"
    wait_for(lambda: session.exists() and marker in session.read_text(), 30, what=marker)
    assert proc.poll() is None
    os.set_blocking(proc.stdout.fileno(), False)
    return proc.stdout.read() or b""


def _popen(tmp_path, *args):
    return subprocess.Popen([sys.executable, "-m", "loomtui.demo.agent", "--data-dir", str(tmp_path), "--bot", "",
                             *args, *STREAM], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=loom_env(), cwd=REPO)


def test_a_wedge_in_stream_mode_stops_answering_and_a_poisoned_session_hangs_on_resume(tmp_path):
    sid = str(uuid.uuid4())
    proc = _popen(tmp_path, "--session-id", sid)
    try:
        proc.stdin.write((user("/poison") + user("hello")).encode())
        proc.stdin.flush()
        seen = _silent_after(tmp_path, sid, '"poison"', proc)
        assert [json.loads(line)["type"] for line in seen.splitlines()] == ["system", "system"]
    finally:
        proc.kill()
        proc.wait(timeout=30)
    again = _popen(tmp_path, "--resume", sid)
    try:
        # No `init` at all: a resume that hangs, as `--resume` sometimes does.
        assert _silent_after(tmp_path, sid, "hung on resume", again) == b""
    finally:
        again.kill()
        again.wait(timeout=30)


def test_stream_mode_refuses_an_incomplete_set_of_flags(tmp_path):
    sid = ["--session-id", str(uuid.uuid4())]
    cases = [(["-p", "--input-format", "stream-json"], "requires output-format=stream-json"),
             (["-p", "--input-format", "stream-json", "--output-format", "stream-json"], "requires --verbose"),
             (["-p"], "needs --input-format stream-json")]
    for flags, message in cases:
        result = agent(tmp_path, *sid, *flags)
        assert result.returncode == 1 and message in result.stderr, flags
