"""The process tree: walked from a root, deepest match wins, ambiguity is never 'missing'."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from harness import wait_for

from loomtui.agent import proctree
from loomtui.agent.proctree import MISSING, PRESENT, UNKNOWN

# A shell-like wrapper whose own command line also names the agent, then the agent, then its poller.
TREE = (
    "import subprocess, sys, time\n"
    "role, tag = sys.argv[1], sys.argv[2]\n"
    "if role == 'wrapper':\n"
    "    subprocess.Popen([sys.executable, '-c', sys.argv[3], 'agent', tag, sys.argv[3]]).wait()\n"
    "else:\n"
    "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', 'fake-poller', '--bot', tag])\n"
    "    time.sleep(600)\n"
)


@pytest.fixture
def tree(tmp_path):
    tag = f"tag{os.getpid()}x{time.monotonic_ns()}"
    proc = subprocess.Popen([sys.executable, "-c", TREE, "wrapper", tag, TREE, "runs agent"])
    try:
        wait_for(lambda: len(proctree.walk(proc.pid)[0]) == 3, what="three processes in the tree")
        yield proc, tag
    finally:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        proc.wait()


def test_inspect_finds_deepest_agent_and_poller(tree):
    proc, tag = tree
    found = proctree.inspect(proc.pid, rf"\bagent {tag}|runs agent", rf"fake-poller --bot {tag}")
    pids, parents = proctree.walk(proc.pid)
    assert found.agent == PRESENT
    assert found.agent_pid == pids[1] and parents[pids[1]] == proc.pid
    assert found.poller == PRESENT and found.poller_pids == (pids[2],)


def test_missing_only_after_a_clean_walk(tree):
    proc, tag = tree
    found = proctree.inspect(proc.pid, "no-such-agent", "no-such-poller")
    assert (found.agent, found.poller) == (MISSING, MISSING)
    assert proctree.inspect(proc.pid, "-c", "").poller == UNKNOWN  # no poller configured: not checked


def test_a_vanished_root_is_unknown():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    found = proctree.inspect(proc.pid, "anything", "anything")
    assert found.agent == UNKNOWN and found.poller == UNKNOWN and found.why


def test_foreign_pollers_are_outside_the_tree(tree):
    proc, tag = tree
    outsider = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "fake-poller", "--bot", tag])
    try:
        pids, _ = proctree.walk(proc.pid)
        foreign = proctree.foreign_pollers(rf"fake-poller --bot {tag}", set(pids))
        assert [pid for pid, _ in foreign] == [outsider.pid]
    finally:
        outsider.kill()
        outsider.wait()


def test_end_processes_kills_what_ignores_sigterm():
    stubborn = subprocess.Popen(
        [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE,
    )
    try:
        stubborn.stdout.readline()
        assert proctree.end_processes([stubborn.pid], grace=0.5) == []
        assert stubborn.wait(5) == -signal.SIGKILL  # it ignored SIGTERM, so it took the SIGKILL
    finally:
        stubborn.kill()
        stubborn.wait()


def test_walk_cost_does_not_touch_other_processes(tree):
    proc, _ = tree
    # The walk reads only the tree's own /proc entries: three processes, three cmdlines.
    pids, _ = proctree.walk(proc.pid)
    assert len(pids) == 3
