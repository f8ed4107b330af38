"""The console's conversation view (stream-json driver): what it reads and how it shows it."""

from __future__ import annotations

import os

from loomtui.pump import transcript
from loomtui.tui import transcript_view
from loomtui.tui.agent_panel import render_pane
from loomtui.tui.snapshot import PaneView

EVIL = "\x1b]0;owned\x07\x1b[31mred[/bold] [link=x]y[/link]\x1b[2J"


def _write(path, *records):
    w = transcript.Writer(path)
    for dir, data in records:
        w.append(dir, **data)
    w.close()


def _turn(path, text="hello", answer="hi there", origin="operator"):
    _write(path,
           ("in", {"seq": 1, "origin": origin, "ref": "", "text": text}),
           ("out", {"event": {"type": "system", "subtype": "init", "session_id": "s-1"}}),
           ("out", {"event": {"type": "assistant", "message": {"content": [
               {"type": "text", "text": answer},
               {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "touch /tmp/x"}}]}}}),
           ("out", {"event": {"type": "user", "message": {"content": [
               {"type": "tool_result", "tool_use_id": "t1", "content": "", "is_error": False}]}}}),
           ("out", {"event": {"type": "result", "subtype": "success", "is_error": False, "result": answer,
                              "duration_ms": 1500, "permission_denials": []}}))


def test_a_turn_reads_as_who_said_what(tmp_path):
    path = transcript.path_in(tmp_path)
    _turn(path, origin="telegram")
    found = transcript_view.entries(list(transcript.read(path)))
    assert [(e.who, e.origin) for e in found] == [
        ("you", "telegram"), ("pump", ""), ("assistant", ""), ("tool", ""), ("tool result", ""), ("result", "")]
    assert found[0].text == "hello" and found[2].text == "hi there"
    assert "touch /tmp/x" in found[3].text
    assert found[5].text == "turn ended: success in 1.5s" and not found[5].error
    shown = transcript_view.render(found).plain
    assert "you (telegram) › hello" in shown and "assistant › hi there" in shown


def test_errors_denials_stderr_and_exit_stand_out(tmp_path):
    path = transcript.path_in(tmp_path)
    _write(path,
           ("out", {"event": {"type": "result", "subtype": "error_during_execution", "is_error": True,
                              "permission_denials": [{"tool_name": "Bash", "tool_input": {}}]}}),
           ("err", {"line": "No conversation found with session ID: x"}),
           ("out", {"raw": "not json at all"}),
           ("pump", {"what": "cli_exit", "status": 1}))
    found = transcript_view.entries(list(transcript.read(path)))
    assert [(e.who, e.error) for e in found] == [
        ("result", True), ("stderr", True), ("output", False), ("pump", True)]
    assert "denied: Bash" in found[0].text
    assert '"status": 1' in found[3].text


def test_a_record_of_an_odd_shape_is_one_line_and_the_follower_goes_past_it(tmp_path):
    # `permission_denials` a number: the view raised on it, at every look, and the console's whole
    # refresh stopped there for good.
    path = transcript.path_in(tmp_path)
    _write(path,
           ("out", {"event": {"type": "result", "subtype": "success", "permission_denials": 3}}),
           ("out", {"event": {"type": "assistant", "message": {"content": 5}}}),
           ("out", {"event": {"type": "user", "message": {"content": [{"type": "tool_result", "content": {"x": 1}}]}}}))
    follower = transcript_view.Follower(path)
    found = follower.look()
    assert found[0].who == "result" and not found[0].error
    _turn(path, text="after")
    assert [e.text for e in follower.look() if e.who == "you"] == ["after"]


def test_untrusted_text_is_never_markup_nor_an_escape_sequence(tmp_path):
    path = transcript.path_in(tmp_path)
    _turn(path, text=EVIL, answer=EVIL, origin=EVIL)  # the origin too: the console never checked it
    view = PaneView("up", conversation=tuple(transcript_view.entries(list(transcript.read(path)))))
    body = render_pane(view)
    assert "\x1b" not in body.plain and "\x07" not in body.plain
    assert "[/bold] [link=x]y[/link]" in body.plain  # shown as written, not interpreted
    assert not any(span.style and "link" in str(span.style) for span in body.spans)


def test_a_huge_tool_output_is_clipped(tmp_path):
    path = transcript.path_in(tmp_path)
    _write(path, ("out", {"event": {"type": "user", "message": {"content": [
        {"type": "tool_result", "content": [{"type": "text", "text": "x" * 50_000}]}]}}}))
    (entry,) = transcript_view.entries(list(transcript.read(path)))
    assert len(entry.text) < transcript_view.MAX_CHARS + 100 and "more characters" in entry.text


def test_the_follower_reads_what_was_appended_and_starts_over_on_a_new_file(tmp_path):
    path = transcript.path_in(tmp_path)
    follower = transcript_view.Follower(path)
    assert follower.look() == ()
    _turn(path, text="first")
    assert [e.text for e in follower.look() if e.who == "you"] == ["first"]
    with open(path, "a") as fh:
        fh.write('{"ts": 1, "dir": "in", "seq": 2, "text": "half')   # still being written
    assert [e.text for e in follower.look() if e.who == "you"] == ["first"]
    with open(path, "a") as fh:
        fh.write(' done"}\n')
    assert [e.text for e in follower.look() if e.who == "you"] == ["first", "half done"]
    os.replace(_other(tmp_path), path)                          # a new transcript in its place
    assert [e.text for e in follower.look() if e.who == "you"] == ["second"]
    path.write_text("")                                          # cut short
    assert follower.look() == ()


def _other(tmp_path):
    other = tmp_path / "other.jsonl"
    _turn(other, text="second")
    return other


def test_the_follower_starts_near_the_end_of_a_long_transcript(tmp_path, monkeypatch):
    path = transcript.path_in(tmp_path)
    monkeypatch.setattr(transcript_view.Follower, "TAIL_BYTES", 4096)
    for i in range(200):
        _turn(path, text=f"message {i}")
    seen = [e.text for e in transcript_view.Follower(path).look() if e.who == "you"]
    assert seen and seen[-1] == "message 199" and "message 0" not in seen
