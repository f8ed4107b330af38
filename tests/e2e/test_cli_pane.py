"""`loom pane`: the agent's pane read, never typed into: its screen and scrollback as JSON (what
another host's console reads over ssh) or as printable lines; a pane that is not there says why,
exit 1. Against the real demo agent in tmux."""

from __future__ import annotations

import json

import pytest
from harness import wait_for

pytestmark = pytest.mark.e2e


def test_the_pane_as_json_and_as_lines(make_harness):
    h = make_harness()
    session = h.start()
    typed = h.loom("inject", "remember \x1b[31mRED\x1b[0m and -DASHED")  # controls stripped on the way in
    assert typed.returncode == 0, typed.stderr
    wait_for(lambda: any("-DASHED" in line for line in h.transcript(session)), 30, what="the line in the transcript")
    injected = len(h.events("inject"))
    looked = h.loom("pane", "--json", "--lines", "100")
    assert looked.returncode == 0, looked.stderr
    doc = json.loads(looked.stdout)
    assert doc["state"] == "up" and doc["why"] == "" and "demo agent" in doc["text"] and "-DASHED" in doc["text"]
    assert session in doc["text"]
    text = h.loom("pane")
    assert text.returncode == 0 and "-DASHED" in text.stdout
    assert all(c.isprintable() for line in text.stdout.splitlines() for c in line)
    assert len(h.events("inject")) == injected  # read, nothing typed


def test_no_pane_is_said_with_exit_1(make_harness):
    h = make_harness()  # never started: no tmux server on its socket
    looked = h.loom("pane", "--json")
    assert looked.returncode == 0 and json.loads(looked.stdout)["state"] == "gone"
    text = h.loom("pane")
    assert text.returncode == 1 and text.stderr.startswith("loom: the agent's pane is gone: "), text.stderr


@pytest.mark.parametrize("lines", ["-1", "5001"])
def test_a_scrollback_out_of_bounds_is_exit_2(make_harness, lines):
    result = make_harness().loom("pane", "--lines", lines)
    assert result.returncode == 2 and "pane --lines takes 0 to 5000" in result.stderr, result.stderr
