"""The pump's small parts: the client's errors and status file, the line it writes, the pane's lines."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import unicodedata

import pytest
from conftest import REPO, loom_env

from loomtui.pump import client, render, runner

EVIL = "\x1b]0;owned\x07\x1b[31mred\x1b[2J\x9b31m\rover\x08\x00\u2028end"


def test_status_is_none_for_a_missing_half_written_or_odd_file(tmp_path):
    assert client.status(tmp_path) is None
    path = client.status_path(tmp_path)
    path.write_text('{"pid": 12, "turn": "id')
    assert client.status(tmp_path) is None
    path.write_text("[1, 2]")
    assert client.status(tmp_path) is None
    path.write_text('{"pid": 12, "turn": "idle"}')
    assert client.status(tmp_path) == {"pid": 12, "turn": "idle"}


def test_send_without_a_pump_is_a_one_line_error(tmp_path):
    with pytest.raises(client.PumpError, match="no pump is running: .*pump.sock does not exist"):
        client.send(tmp_path, "hello", origin="operator")


def test_a_socket_nobody_listens_on_is_named(tmp_path):
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(client.socket_path(tmp_path)))
    stale.close()       # the file stays, as a killed pump's does
    with pytest.raises(client.PumpError, match="no pump is listening on"):
        client.send(tmp_path, "hello", origin="operator")


def test_a_pump_that_never_answers_times_out(tmp_path):
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mute.bind(str(client.socket_path(tmp_path)))
    mute.listen(1)      # connections wait in the backlog, and no answer ever comes
    try:
        with pytest.raises(client.PumpError, match="did not answer within 0.2s"):
            client.send(tmp_path, "hello", origin="operator", timeout=0.2)
    finally:
        mute.close()


def test_a_message_longer_than_a_request_may_be_is_refused_before_sending(tmp_path):
    with pytest.raises(client.PumpError, match="message too long"):
        client.send(tmp_path, "x" * client.MAX_REQUEST, origin="operator")


def test_the_line_written_to_the_cli_is_one_ascii_json_line_of_claude_codes_input_shape():
    text = "line one\nline two \u2028 \x1b[31m é 🙂 \"quoted\""
    line = runner.user_line(text)
    assert line.endswith(b"\n") and line.count(b"\n") == 1 and line.isascii()
    assert json.loads(line) == {"type": "user", "message": {"role": "user", "content": [
        {"type": "text", "text": text}]}}


@pytest.mark.parametrize("returncode, code", [(0, 0), (1, 1), (4, 4), (-9, 137), (-15, 143), (-1, 129)])
def test_exit_status_follows_the_shells_convention(returncode, code):
    assert runner.exit_code(returncode) == code


def _safe(lines):
    for line in lines:
        assert not any(unicodedata.category(c) == "Cc" for c in line), repr(line)
    return lines


def test_every_piece_of_untrusted_text_is_made_safe_for_the_pane():
    shown = []
    shown += render.lines("in", {"seq": 1, "origin": EVIL, "ref": "", "text": EVIL})
    shown += render.lines("err", {"line": EVIL})
    shown += render.lines("out", {"raw": EVIL})
    shown += render.lines("out", {"event": {"type": "system", "subtype": "init", "session_id": EVIL, "model": EVIL}})
    shown += render.lines("out", {"event": {"type": "assistant", "message": {"content": [
        {"type": "text", "text": EVIL}, {"type": "tool_use", "name": EVIL, "input": {"command": EVIL}},
        {"type": "tool_use", "name": "Edit", "input": {"path": EVIL}}]}}})
    shown += render.lines("out", {"event": {"type": "user", "message": {"content": [
        {"type": "tool_result", "content": EVIL, "is_error": True},
        {"type": "tool_result", "content": [{"type": "text", "text": EVIL}]}]}}})
    shown += render.lines("out", {"event": {"type": "result", "is_error": True, "subtype": EVIL, "result": EVIL,
                                            "permission_denials": [{"tool_name": EVIL}, EVIL]}})
    shown += render.lines("out", {"event": {"type": "system", "subtype": "permission_denied", "tool_name": EVIL,
                                            "message": EVIL}})
    shown += render.lines("pump", {"what": "started", "pid": 1, "cli_pid": 2, "argv": [EVIL]})
    shown += render.lines("pump", {"what": "write_failed", "seq": 3, "error": EVIL})
    shown += render.lines("pump", {"what": "not_kept", "seq": 3, "error": EVIL})
    shown += render.lines("pump", {"what": "queued", "seq": 3, "position": 1, "origin": EVIL})
    shown += render.lines("pump", {"what": "unread", "seqs": EVIL, "set_aside": EVIL})
    shown += render.lines("pump", {"what": "write_failed", "seq": EVIL, "error": EVIL, "kept": True})
    assert len(_safe(shown)) == 19
    assert any("]0;owned[31mred[2J31m over" in line for line in shown)


def test_numbers_and_nesting_past_what_python_holds_give_the_pane_a_line_not_an_error():
    # Each raised out of render.lines, which the pump's loop calls for every record: the pump died.
    huge = int("9" * 400)  # any JSON number parses; no float holds this one
    assert render.lines("out", {"event": {"type": "result", "is_error": False, "duration_ms": huge}}) == ["result ok"]
    deep: object = {}
    for _ in range(5000):
        deep = [deep]
    [line] = render.lines("out", {"event": {"type": "assistant", "message": {"content": [
        {"type": "tool_use", "name": "Read", "input": {"x": deep}}]}}})
    assert line.startswith("? a record the pane cannot show (RecursionError")


def test_a_result_whose_denials_are_not_a_list_is_shown_without_them():
    # `permission_denials: 1` raised a TypeError out of render.lines: the pump's loop ended, and
    # the CLI (the agent) with it.
    for odd in (1, True, 2.5, "Bash", {"tool_name": "Bash"}, None):
        assert render.lines("out", {"event": {"type": "result", "is_error": False,
                                              "permission_denials": odd}}) == ["result ok"]
    # Whatever else a record holds, the pane gets a line, never an error.
    assert render.lines("out", {"event": {"type": "result", "is_error": True, "subtype": "x",
                                          "errors": ["a", 1], "result": 7}}) == ["result error: x"]


def test_no_bidi_control_from_untrusted_text_reaches_the_pane():
    # U+202E (right-to-left override) and the isolates reorder what the terminal shows: a tool call
    # could read as another command than it is. text.sanitize let them through.
    bidi = "rm -rf \u202e/ fdp\u202c \u2066x\u2069 \u2067y\u2069 \u2068z\u2069 \u202b\u202a\u200f\u200e\ud800"
    shown: list[str] = []
    shown += render.lines("in", {"seq": 1, "origin": "telegram", "ref": "", "text": bidi})
    shown += render.lines("err", {"line": bidi})
    shown += render.lines("out", {"raw": bidi})
    shown += render.lines("out", {"event": {"type": "assistant", "message": {"content": [
        {"type": "text", "text": bidi}, {"type": "tool_use", "name": bidi, "input": {"command": bidi}}]}}})
    shown += render.lines("out", {"event": {"type": "result", "is_error": True, "subtype": bidi, "result": bidi}})
    assert len(shown) == 7
    for line in shown:
        assert not any(unicodedata.category(c) in ("Cc", "Cf", "Cs") for c in line), repr(line)
        assert "rm -rf \ufffd/ fdp\ufffd" in line or "rm -rf" not in line


def test_the_pane_lines_read_like_a_conversation():
    assert render.lines("in", {"origin": "operator", "text": "hi\nthere"}) == ["you › hi", "      there"]
    assert render.lines("in", {"origin": "telegram", "text": "yo"}) == ["telegram › yo"]
    assert render.lines("out", {"event": {"type": "assistant", "message": {"content": [
        {"type": "text", "text": "ok"}, {"type": "tool_use", "name": "Bash", "input": {"command": "touch /tmp/a"}},
        {"type": "tool_use", "name": "Read", "input": {"file_path": "/x"}}]}}}) == [
        "assistant › ok", "tool: Bash(touch /tmp/a)", 'tool: Read({"file_path": "/x"})']
    assert render.lines("out", {"event": {"type": "result", "subtype": "success", "is_error": False,
                                          "duration_ms": 1500, "permission_denials": [{"tool_name": "Bash"}]}}) == [
        "result ok (1.5s)", "  denied: Bash"]
    assert render.lines("out", {"event": {"type": "result", "subtype": "error_during_execution", "is_error": True,
                                          "result": "boom"}}) == ["result error: error_during_execution", "  boom"]
    assert render.lines("out", {"event": {"type": "result", "subtype": "error_during_execution", "is_error": True,
                                          "errors": ["No conversation", 3, "found"]}}) == [
        "result error: error_during_execution", "  No conversation; found"]
    assert render.lines("out", {"event": {"type": "system", "subtype": "permission_denied", "tool_name": "Bash",
                                          "message": "needs approval"}}) == ["  denied: Bash: needs approval"]
    assert render.lines("pump", {"what": "cli_exit", "status": 1, "signal": None}) == [
        "— the CLI exited with status 1"]
    long = "\n".join(str(i) for i in range(100))
    block = render.lines("out", {"event": {"type": "assistant", "message": {"content": [
        {"type": "text", "text": long}]}}})
    assert len(block) == render.LINES_MAX + 1 and block[-1].endswith("… 60 more lines")
    assert render.lines("out", {"event": {"type": "stream_event"}}) == []


def test_loom_pump_loads_no_config_models_store_or_heavy_libraries(tmp_path):
    """The pump starts in every relaunch and must outlive the supervisor: it stands on the stdlib."""
    code = ("import json, runpy, sys\n"
            "sys.argv = ['loom', 'pump', '--state-dir', sys.argv[1], '--', sys.executable, '-c', 'pass']\n"
            "try:\n"
            "    runpy.run_module('loomtui', run_name='__main__', alter_sys=True)\n"
            "except SystemExit as exc:\n"
            "    code = exc.code\n"
            "print(json.dumps([code, sorted(sys.modules)]), file=sys.stderr)\n")
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path / "state")], capture_output=True, text=True,
                            env=loom_env(), cwd=REPO, timeout=120)
    code, modules = json.loads(result.stderr.strip().splitlines()[-1])
    assert code == 0
    tops = {m.split(".")[0] for m in modules}
    assert not tops & {"pydantic", "watchfiles", "psutil", "textual", "rich", "telegram",
                       "platformdirs", "httpx"}
    assert not {m for m in modules if m.startswith(("loomtui.store", "loomtui.actions", "loomtui.daemon",
                                                      "loomtui.config", "loomtui.context", "loomtui.agent"))}
