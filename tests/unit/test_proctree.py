"""The process tree: walked from a root, deepest match wins, ambiguity is never 'missing'."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest
from harness import wait_for

from loomtui import platform
from loomtui.agent import kill, proctree
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


def exec_done(root: int) -> bool:
    """Three processes, and the poller past its exec: until then a forked child's command line is
    still its parent's (make test-stress once saw the poller read as missing in that moment)."""
    pids, _ = proctree.walk(root)
    return len(pids) == 3 and b"fake-poller" in proctree._read_cmdline(pids[2])


@pytest.fixture
def tree(tmp_path):
    tag = f"tag{os.getpid()}x{time.monotonic_ns()}"
    proc = subprocess.Popen([sys.executable, "-c", TREE, "wrapper", tag, TREE, "runs agent"])
    try:
        wait_for(lambda: exec_done(proc.pid), what="three processes in the tree, each past its exec")
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


FORKS = (
    "import os, sys, time\n"
    "if os.fork() == 0:\n"
    "    time.sleep(600)  # a fork that never execs: its command line is its parent's\n"
    "time.sleep(600)\n"
)


def test_a_fork_of_the_agent_with_its_command_line_is_not_the_agent():
    tag = f"tag{os.getpid()}x{time.monotonic_ns()}"
    agent = subprocess.Popen([sys.executable, "-c", FORKS, "agent", tag])
    try:
        wait_for(lambda: len(proctree.walk(agent.pid)[0]) == 2, what="the agent and its fork")
        found = proctree.inspect(agent.pid, rf"\bagent {tag}")
        pids, parents = proctree.walk(agent.pid)
        fork = next(p for p in pids if p != agent.pid)
        assert found.cmdlines[fork] == found.cmdlines[agent.pid]  # the same command line, one level down
        assert found.agent == PRESENT and found.agent_pid == agent.pid
    finally:
        for child in psutil.Process(agent.pid).children(recursive=True):
            child.kill()
        agent.kill()
        agent.wait()


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
        # Just after exec the kernel shows an empty command line for a moment.
        wait_for(lambda: tag.encode() in proctree._read_cmdline(outsider.pid), what="the outsider's command line")
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
        assert kill.end_processes([stubborn.pid], grace=0.5) == []
        assert stubborn.wait(5) == -signal.SIGKILL  # it ignored SIGTERM, so it took the SIGKILL
    finally:
        stubborn.kill()
        stubborn.wait()



def test_end_processes_never_signals_its_own_process():
    # A `loom recycle` the agent runs from its own pane is in the tree the relaunch ends.
    assert kill.end_processes([os.getpid()], grace=0.1) == []

# Deaf to SIGTERM, and says so once it is.
DEAF = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(600)"


def test_a_process_ended_last_outlives_the_rest_and_ends_by_itself(tmp_path):
    """Both deaf to SIGTERM: the first is killed after `grace`; the one ended `last` (a pump that
    records what its CLI left unread) sees it gone, writes its record and exits by itself."""
    first = subprocess.Popen([sys.executable, "-c", DEAF], stdout=subprocess.PIPE)
    witness = ("import signal, sys, time, psutil\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint(1, flush=True)\n"
               "def gone(p):\n    try:\n        return p.status() == psutil.STATUS_ZOMBIE\n"
               "    except psutil.NoSuchProcess:\n        return True\n"
               "first = psutil.Process(int(sys.argv[1]))\nwhile not gone(first):\n    time.sleep(0.02)\n"
               "open(sys.argv[2], 'w').write('saw it gone')\n")
    record = tmp_path / "record"
    last = subprocess.Popen([sys.executable, "-c", witness, str(first.pid), str(record)], stdout=subprocess.PIPE)
    try:
        first.stdout.readline()
        last.stdout.readline()
        assert kill.end_processes([first.pid, last.pid], grace=0.5, last=[last.pid], last_grace=120) == []
        assert first.wait(5) == -signal.SIGKILL
        assert last.wait(5) == 0
        assert record.read_text() == "saw it gone"
    finally:
        for proc in (first, last):
            proc.kill()
            proc.wait()


def test_a_process_ended_last_that_never_ends_is_killed_after_its_own_grace():
    first = subprocess.Popen([sys.executable, "-c", DEAF], stdout=subprocess.PIPE)
    last = subprocess.Popen([sys.executable, "-c", DEAF], stdout=subprocess.PIPE)
    try:
        first.stdout.readline()
        last.stdout.readline()
        assert kill.end_processes([first.pid, last.pid], grace=0.5, last=[last.pid], last_grace=0.5) == []
        assert (first.wait(5), last.wait(5)) == (-signal.SIGKILL, -signal.SIGKILL)
    finally:
        for proc in (first, last):
            proc.kill()
            proc.wait()


def test_walk_cost_does_not_touch_other_processes(tree):
    proc, _ = tree
    # The walk reads only the tree's own /proc entries: three processes, three cmdlines.
    pids, _ = proctree.walk(proc.pid)
    assert len(pids) == 3


# -- the machine-wide scan for foreign pollers, straight from /proc ------------------------------

SCAN = ("import json, sys; sys.path.insert(0, sys.argv[1]); from loomtui.agent import proctree; "
        "proctree._PROC = sys.argv[2]; print(json.dumps(proctree.foreign_pollers(sys.argv[3], set())))")


def fake_proc(root, entries: dict[str, bytes | None | str]):
    """A /proc look-alike: bytes are a cmdline, None a process gone before its cmdline was read,
    "dir" a cmdline that cannot be read as a file, "denied" one its permission bits close."""
    for name, cmdline in entries.items():
        (root / name).mkdir()
        if cmdline == "dir":
            (root / name / "cmdline").mkdir()
        elif cmdline == "denied":
            (root / name / "cmdline").write_bytes(b"fake-poller\0--bot\0secret\0")
            (root / name / "cmdline").chmod(0)
        elif cmdline is not None:
            (root / name / "cmdline").write_bytes(cmdline)
    (root / "self").symlink_to("101")
    return root


@pytest.mark.skipif(not platform.current().proc_files, reason="the scan of /proc's files (the portable one is psutil's)")
def test_foreign_scan_passes_over_vanished_unreadable_and_kernel_entries(tmp_path):
    from conftest import REPO

    root = fake_proc(tmp_path, {
        "101": b"python3\0-c\0x\0fake-poller\0--bot\0tok\0",
        "102": None,  # gone
        "103": b"",  # a kernel thread (or a zombie): no command line
        "104": "denied",
        "105": "dir",
        "106": b"sleep\x00600\x00",
        "107": b"fake-poller --bot \xff\xfe set by the process itself, no NULs",
    })
    command = [sys.executable, "-c", SCAN, str(REPO), str(root), r"fake-poller --bot \S+"]
    if os.geteuid() == 0:  # root reads anything: drop the capability that lets it
        command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--", *command]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    import json

    assert json.loads(result.stdout) == [[101, "python3 -c x fake-poller --bot tok"],
                                         [107, "fake-poller --bot \ufffd\ufffd set by the process itself, no NULs"]]


def test_foreign_scan_skips_a_process_that_ended_after_the_listing(monkeypatch):
    tag = f"tag{os.getpid()}x{time.monotonic_ns()}"
    gone = subprocess.Popen([sys.executable, "-c", "pass", "fake-poller", "--bot", tag])
    gone.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "fake-poller", "--bot", tag])
    try:
        wait_for(lambda: tag.encode() in proctree._read_cmdline(live.pid), what="the poller's command line")
        monkeypatch.setattr(proctree, "_pids", lambda: [gone.pid, live.pid, 2, 1])
        assert [pid for pid, _ in proctree.foreign_pollers(f"fake-poller --bot {tag}", set())] == [live.pid]
    finally:
        live.kill()
        live.wait()


@pytest.mark.parametrize("pattern", [r"fake-poller --bot {tag}", r"(?i)fake-poller --bot {tag}", r"[f]\S+ --bot {tag}",
                                     r"--bot\s{tag}$"])
def test_foreign_scan_from_proc_finds_what_psutil_finds(pattern):
    tag = f"tag{os.getpid()}x{time.monotonic_ns()}"
    pattern = pattern.format(tag=tag)
    argvs = [["fake-poller", "--bot", tag]] * 3 + [["FAKE-Poller", "--BOT", tag.upper()]] * 2
    ours = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", *argv]) for argv in argvs]
    try:
        wait_for(lambda: all(b"--" in proctree._read_cmdline(p.pid) for p in ours), what="their command lines")
        skip = {ours[0].pid}
        mine = {p.pid for p in ours}
        old = [(pid, line) for pid, line in proctree._foreign_pollers_psutil(re.compile(pattern), skip | {os.getpid()})
               if pid in mine]
        new = [(pid, line) for pid, line in proctree.foreign_pollers(pattern, skip) if pid in mine]
        assert sorted(new) == sorted(old) and len(new) == (4 if "(?i)" in pattern else 2)
    finally:
        for p in ours:
            p.kill()
            p.wait()


def test_zombie_state_and_alive_as_read_proc():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    started = wait_for(lambda: proctree.start_time(child.pid), what="its start time")
    wait_for(lambda: proctree.is_zombie(child.pid), what="the child a zombie (not reaped yet)")
    assert not proctree.alive_as(child.pid, started)
    child.wait()
    assert not proctree.is_zombie(child.pid)
    assert proctree.alive_as(os.getpid(), proctree.start_time(os.getpid()))
    assert not proctree.alive_as(os.getpid(), 1.0)


def test_alive_as_owns_a_live_process_and_disowns_a_dead_one():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        started = wait_for(lambda: proctree.start_time(child.pid), what="its start time")
        assert proctree.alive_as(child.pid, started)
    finally:
        child.kill()
        child.wait()
    assert proctree.start_time(child.pid) is None
    assert not proctree.alive_as(child.pid, started)
    assert not proctree.alive_as(child.pid, None) and not proctree.alive_as(None, started)


def test_alive_as_disowns_another_process_holding_the_pid():
    # What a reused pid looks like to the check: the pid runs, but its start is not the one recorded.
    first = subprocess.Popen([sys.executable, "-c", "pass"])
    first_started = wait_for(lambda: proctree.start_time(first.pid), what="the first process's start")
    first.wait()
    later = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        wait_for(lambda: (proctree.start_time(later.pid) or 0) > first_started, what="the later process's start")
        assert proctree.alive_as(later.pid, proctree.start_time(later.pid))
        assert not proctree.alive_as(later.pid, first_started)
    finally:
        later.kill()
        later.wait()


# Inside a pid namespace of its own, the next pid can be chosen (ns_last_pid): the very pid of a
# process that ended is handed to a new one, and the identity recorded for the first must not own it.
REUSE = """
import subprocess, sys
from loomtui.agent import proctree

def spawn():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])

def ticks():
    probe = subprocess.Popen([sys.executable, "-c", "pass"])
    started = proctree.start_time(probe.pid)
    probe.wait()
    return started

first = spawn()
pid, first_started = first.pid, proctree.start_time(first.pid)
assert proctree.alive_as(pid, first_started)
first.kill()
first.wait()
while (ticks() or 0) <= first_started:  # the clock has moved on before the pid is handed out again
    pass
with open("/proc/sys/kernel/ns_last_pid", "w") as fh:
    fh.write(str(pid - 1))
second = spawn()
assert second.pid == pid, (second.pid, pid)
print(proctree.alive_as(pid, first_started), proctree.alive_as(pid, proctree.start_time(pid)))
second.kill()
second.wait()
"""


def test_alive_as_disowns_a_process_given_the_same_pid_again(tmp_path):
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True) \
        if sys.platform.startswith("linux") and os.path.exists("/usr/bin/unshare") else None
    if probe is None or probe.returncode != 0:
        pytest.skip("needs unshare and the right to make a pid namespace (Linux, root)")
    out = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", REUSE],
                         capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]


def test_what_a_dead_session_leader_left_is_found_and_a_live_holder_of_its_number_is_a_stranger(tmp_path):
    pid_file = tmp_path / "child"
    # A session leader that starts a child and exits; the child runs on in its session.
    leader = subprocess.Popen([sys.executable, "-c", f"""import subprocess
child = subprocess.Popen(["sleep", "600"])
open({str(pid_file)!r}, "w").write(str(child.pid))
import time; time.sleep(600)
"""], start_new_session=True)
    child = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), 30, what="the child's pid"))
    try:
        # The leader lives: its number is its own, whatever runs in its session (nothing "left").
        assert proctree.left_in_session(leader.pid) == []
        leader.kill()
        leader.wait(timeout=30)
        assert proctree.left_in_session(leader.pid) == [child]
        assert proctree.environ(child) is not None and proctree.environ(child).get("PATH") == os.environ.get("PATH")
        assert proctree.environ(2**22 + 11) is None
    finally:
        os.kill(child, signal.SIGKILL)
