"""The control-mode protocol's pure parts: reading one reply out of a stream that also carries
notifications, and saying an argv as one command line without changing what it means."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomtui.agent.tmux import (
    AgentPane,
    ControlLost,
    Result,
    TmuxError,
    TmuxGone,
    output_lines,
    quote_words,
    read_block,
    command_line,
    version_at_least,
    version_has_fix,
)


def reader(*lines: bytes):
    stream = iter(lines)
    return lambda: next(stream)


def test_a_reply_after_notifications_is_its_output():
    seen: list[bytes] = []
    ok, out = read_block(reader(b"%session-changed $0 agent", b"%window-renamed @1 x", b"%sessions-changed",
                                b"%begin 1796114212 270 1", b"0\t%0\t30535\t0", b"%end 1796114212 270 1",
                                b"%window-add @2"), seen.append)
    assert ok and out == [b"0\t%0\t30535\t0"]
    assert seen == [b"%session-changed $0 agent", b"%window-renamed @1 x", b"%sessions-changed"]


def test_an_error_reply_is_not_ok_and_carries_the_message():
    ok, out = read_block(reader(b"%begin 5 9 1", b"can't find session: nope", b"%error 5 9 1"))
    assert not ok and out == [b"can't find session: nope"]


def test_empty_output_and_empty_lines_are_kept_apart():
    assert read_block(reader(b"%begin 5 9 1", b"%end 5 9 1")) == (True, [])
    assert read_block(reader(b"%begin 5 9 1", b"", b"", b"%end 5 9 1")) == (True, [b"", b""])


def test_pane_text_that_looks_like_a_guard_or_a_notification_is_output():
    # An agent can print anything; only the guard with the same time, number and flags ends it.
    lines = [b"%end 5 8 1", b"%error 5 9 0", b"%end 5 9", b"%begin 6 10 1", b"%exit", b"%end 5 9 1 ",
             b"%window-renamed @1 x"]
    ok, out = read_block(reader(b"%begin 5 9 1", *lines, b"%end 5 9 1"))
    assert ok and out == lines


def test_exit_before_a_reply_means_the_client_is_gone():
    with pytest.raises(ControlLost, match="server exited"):
        read_block(reader(b"%sessions-changed", b"%exit server exited unexpectedly"))
    with pytest.raises(ControlLost):
        read_block(reader(b"%exit"))


def test_text_outside_a_reply_means_the_stream_is_out_of_step():
    with pytest.raises(ControlLost, match="out of step"):
        read_block(reader(b"left over from a reply cut short", b"%begin 5 9 1", b"%end 5 9 1"))


@given(st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b" ")), max_size=20),
       st.tuples(st.integers(0, 2**40), st.integers(0, 2**32), st.integers(0, 1)))
def test_any_output_comes_back_whole(lines, guard):
    begin = b"%d %d %d" % guard
    lines = [line for line in lines if line not in (b"%end " + begin, b"%error " + begin)]
    assert read_block(reader(b"%begin " + begin, *lines, b"%end " + begin)) == (True, lines)


def test_argv_said_in_single_quotes():
    fields = "#{pane_index}\t#{pane_id}\t#{pane_dead_status}"
    assert quote_words(["list-panes", "-F", fields, "-t", "=agent:0"]) == f"list-panes '-F' '{fields}' '-t' '=agent:0'"
    assert quote_words(["capture-pane", "-p", "-J", "-e", "-S", "-", "-t", "%3"]) is not None
    assert quote_words(["display-message", "-p", "$HOME ~ \\n é"]) == "display-message '-p' '$HOME ~ \\n é'"


@pytest.mark.parametrize("word", ["it's", "a;", ";", "two\nlines", "cr\r", "nul\x00", "esc\x1b", "del\x7f"])
def test_what_quotes_would_change_goes_the_plain_way(word):
    assert quote_words(["display-message", "-p", word]) is None


def test_output_lines_read_like_text_mode_subprocess_output():
    assert output_lines(b"a\r\nb\rc\n\n\n") == ["a", "b", "c"]
    assert output_lines(b"\n\n") == []
    assert output_lines(b"x\n\ny") == ["x", "", "y"]
    assert output_lines("h\u00e9llo".encode() + b"\xff") == ["h\u00e9llo\ufffd"]


@pytest.mark.parametrize("version,fixed", [
    ("tmux 3.3a\n", False), ("tmux 3.4", False), ("tmux 3.6a", False), ("tmux next-3.6", False),
    ("tmux 3.7", True), ("tmux 3.7b", True), ("tmux next-3.8", True), ("tmux 4.0", True), ("tmux 10.1", True),
    # master said next-3.7 from the 3.6 release (2025-11-26) until the fix (2026-04-13): not taken as 3.7
    ("tmux next-3.7", False), ("tmux next-4.1", True),
    ("tmux master", False), ("tmux openbsd-7.4", False), ("", False),
])
def test_control_mode_only_on_a_tmux_with_the_fix(version, fixed):
    # tmux < 3.7 crashes when a notification reaches a control client still connecting (issue 4980).
    assert version_has_fix(version) is fixed


@pytest.mark.parametrize("version,wanted,at_least", [
    ("tmux 3.0a\n", (3, 1), False), ("tmux 3.1", (3, 1), True), ("tmux 3.3a", (3, 1), True),
    ("tmux next-3.1", (3, 1), False), ("tmux next-3.2", (3, 1), True), ("tmux master", (3, 1), False),
    ("", (3, 1), False),
])
def test_a_version_is_at_least_another_only_when_it_says_so(version, wanted, at_least):
    assert version_at_least(version, wanted) is at_least


def test_a_command_line_for_source_file_cannot_carry_a_nul():
    # tmux ends the word at a \000: the value would be cut short, silently.
    assert command_line(["x", "a~b$c"]) == '"x" "a\\~b\\$c"\n'
    with pytest.raises(ValueError, match="NUL"):
        command_line(["set-environment", "A", "a\0b"])


@pytest.mark.parametrize("message", [
    "no server running on /tmp/tmux-0/x", "error connecting to /tmp/tmux-0/x (No such file or directory)",
    "can't find session: agent", "can't find pane: %3", "session not found: agent",
    # A client that reached a server while it was exiting (seen under load in CI).
    "server exited unexpectedly", "lost server",
])
def test_what_tmux_says_of_a_server_or_pane_that_is_not_there_is_gone(message):
    pane = AgentPane("nowhere-socket", "agent")
    with pytest.raises(TmuxGone):
        pane._check(Result(["tmux"], 1, [], [message]), "list-panes")


def test_any_other_tmux_failure_is_an_error_not_gone():
    pane = AgentPane("nowhere-socket", "agent")
    with pytest.raises(TmuxError) as raised:
        pane._check(Result(["tmux"], 1, [], ["unknown option -- Q"]), "list-panes")
    assert not isinstance(raised.value, TmuxGone)
