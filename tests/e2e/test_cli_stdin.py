"""`loom inject --stdin` and `loom resolve ID --note-stdin`: the line and the note read from standard
input, so no process list shows them (the console sends them so over ssh, tests/e2e/test_tui_hosts.py).
Against the real demo agent in tmux and a real job's queue item."""

from __future__ import annotations

import json
import sys

import pytest
from harness import wait_for

pytestmark = pytest.mark.e2e

FAIL = "print('ERROR: upstream returned 503'); raise SystemExit(3)"


def test_a_line_on_standard_input_is_typed_into_the_agent_s_pane(make_harness):
    h = make_harness()
    session = h.start()
    typed = h.loom("inject", "--stdin", input="remember -STDIN-LINE;\n")  # a leading dash, a trailing ;
    assert typed.returncode == 0, typed.stderr
    wait_for(lambda: "remember -STDIN-LINE;" in h.transcript(session), 30, what="the line in the transcript")
    [event] = h.events("inject")[-1:]
    assert "STDIN-LINE" not in json.dumps(event)  # its length and digest only, as for words


@pytest.mark.parametrize("args, stdin, says", [
    (["--stdin"], "", "nothing on standard input"),
    (["--stdin"], "   \n", "nothing on standard input"),
    (["--stdin"], "one\ntwo\n", "one line on standard input"),
    (["--stdin", "words"], "a line\n", "one of the two"),
    ([], "", "one of the two"),
])
def test_no_line_two_lines_or_both_ways_is_exit_2_and_types_nothing(make_harness, args, stdin, says):
    h = make_harness()  # never started: nothing could be typed anyway, and nothing is tried
    result = h.loom("inject", *args, input=stdin)
    assert result.returncode == 2 and says in result.stderr, result.stderr
    # Refused before any store is opened: nothing recorded, nothing typed.
    assert result.stderr.count("\n") == 1 and not (h.state_dir / "loom.db").exists()


def test_too_much_on_standard_input_is_refused():
    from conftest import run_loom

    result = run_loom("inject", "--stdin", input="x" * (64 * 1024 + 1))
    assert result.returncode == 2 and "longer than 65536 bytes" in result.stderr, result.stderr


def test_a_note_on_standard_input_claims_the_item(make_harness, tmp_path):
    h = make_harness(jobs=[{"name": "nightly", "log": str(tmp_path / "jobs" / "nightly.log"), "schedule": "every 1h"}])
    assert h.loom("run-job", "nightly", "--", sys.executable, "-c", FAIL).returncode == 3
    assert h.loom("sentinel", "scan", "--no-nudge").returncode == 0
    first = json.loads(h.loom("queue", "--json").stdout)["items"][0]
    note = "rotated the token\nand re-ran it by hand"
    done = h.loom("resolve", str(first["id"]), "--note-stdin", input=note + "\n")
    assert done.returncode == 0, done.stderr
    items = {i["id"]: i for i in json.loads(h.loom("queue", "--json").stdout)["items"]}
    # As a note given in words: one line (its newline a space, as the claims module cleans every note).
    assert items[first["id"]]["state"] == "claimed" and items[first["id"]]["note"] == note.replace("\n", " ")
    both = h.loom("resolve", str(first["id"]), "--note", "x", "--note-stdin", input="y\n")
    assert both.returncode == 2 and "not allowed with" in both.stderr
