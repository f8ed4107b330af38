"""The agent control plane end to end: real tmux on a private socket, the real demo agent."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

import pytest
from conftest import REPO
from harness import wait_for

from loomtui import actions
from loomtui.text import sanitize

pytestmark = pytest.mark.e2e

INJECTOR = """
import sys
from loomtui.context import Context
from loomtui import actions
ctx = Context.load(sys.argv[1], None)
proc = sys.argv[2]
failures = 0
for i in range(int(sys.argv[3])):
    tag = f"p{proc}-m{i:03d}"
    variant = i % 6
    if variant == 0:
        text = f"-leading dash {tag}"
    elif variant == 1:
        text = f"trailing semicolon {tag};"
    elif variant == 2:
        text = f"$(id > /tmp/loom-pwned-{tag}) `id` ${{HOME}} {tag}"
    elif variant == 3:
        text = f"quotes \\"double\\" 'single' {tag} \\\\ backslash"
    elif variant == 4:
        text = f"[/bold] [bold]markup[/] [link=x] {tag} ünïcødé 日本語 🚀"
    else:
        text = f"long {tag} " + "é" * 400 + "x" * 1600
    result = actions.inject(ctx, text, source=f"test-{proc}")
    failures += not result.ok
    print(text, flush=True)
sys.exit(1 if failures else 0)
"""


def test_hostile_injections_from_four_processes_arrive_whole_once(harness):
    session_id = harness.start()
    procs = [
        harness.popen("-c", INJECTOR, str(harness.config_path), str(k), "50", stdout=subprocess.PIPE, text=True)
        for k in range(4)
    ]
    sent = []
    for proc in procs:
        out, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0
        sent.extend(out.splitlines())
    assert len(sent) == 200
    got = wait_for(lambda: (t := harness.transcript(session_id)) and len(t) >= 200 and t, 120,
                   what="200 messages in the transcript")
    assert Counter(got) == Counter(sent)
    assert all(len(t) >= 2000 for t in got if t.startswith("long "))
    assert not [p for p in os.listdir("/tmp") if p.startswith("loom-pwned-")]
    events = harness.events("inject")
    assert len(events) == 200 and all(e["detail"]["ok"] for e in events)
    # The ledger holds length and digest, never the text.
    assert not any("semicolon" in str(e) or "markup" in str(e) for e in events)


@pytest.mark.incident("resuming_a_stranger")
def test_fresh_resume_fresh_and_failed_resume(harness):
    first = harness.start()
    ctx = harness.ctx()
    assert actions.inject(ctx, "remember the blue door", source="test").ok
    wait_for(lambda: "remember the blue door" in harness.transcript(first), what="first turn recorded")
    old_agent = harness.agent_pid()

    result = harness.loom("recycle", "--resume", "--reason", "carry on")
    assert result.returncode == 0, result.stderr
    assert harness.pinned() == first
    wait_for(lambda: "resumed: 2 earlier turns" in harness.screen(), what="earlier turns shown after resume")
    assert "remember the blue door" in harness.screen()
    wait_for(lambda: harness.agent_pid() not in (None, old_agent), what="a new agent process")

    result = harness.loom("recycle", "--fresh")
    assert result.returncode == 0, result.stderr
    second = harness.pinned()
    assert second != first
    wait_for(lambda: f"session {second}" in harness.screen(), what="the fresh session on screen")
    assert harness.transcript(second) == []
    assert "remember the blue door" not in harness.screen()

    for path in (harness.data_dir / "sessions").iterdir():
        path.unlink()
    result = harness.loom("recycle", "--resume")
    assert result.returncode == 0, result.stderr
    assert "after the resume failed" in result.stdout
    failed = harness.events("resume_failed")
    assert len(failed) == 1 and failed[0]["detail"]["session"] == second
    relaunches = harness.events("relaunch")
    assert [(e["cause"], e["detail"]["mode"]) for e in relaunches[-2:]] == [
        ("operator_resume", "resume"), ("resume_failed", "fresh")]
    third = harness.pinned()
    assert third not in (first, second)
    wait_for(lambda: f"session {third}" in harness.screen(), what="the fallback fresh session running")
    assert harness.loom("ledger", "verify").returncode == 0


@pytest.mark.incident("garbled_replay")
def test_pane_killed_during_injection_types_nowhere_else(harness):
    session_id = harness.start()
    decoy_file = harness.root / "decoy.txt"
    assert harness.tmux("new-session", "-d", "-s", "decoy", f"cat > {decoy_file}").returncode == 0
    ctx = harness.ctx()
    results = []
    stop = threading.Event()

    def keep_injecting():
        i = 0
        while not stop.is_set() and i < 2000:
            results.append((f"message {i}", actions.inject(ctx, f"message {i}", source="test")))
            i += 1

    thread = threading.Thread(target=keep_injecting)
    thread.start()
    try:
        wait_for(lambda: len(results) >= 15, what="some injections done")
        assert harness.tmux("kill-session", "-t", "=agent").returncode == 0
        wait_for(lambda: any(not r.ok for _, r in results), what="a failed injection")
    finally:
        stop.set()
        thread.join(60)
    failed = [r for _, r in results if not r.ok]
    assert failed and all(r.error for r in failed)
    ok_texts = [text for text, r in results if r.ok]
    events = harness.events("inject")
    assert sum(not e["detail"]["ok"] for e in events) == len(failed)
    assert all("error" in e["detail"] for e in events if not e["detail"]["ok"])
    transcript = harness.transcript(session_id)
    # Everything reported delivered arrived exactly once; nothing reached the decoy pane.
    assert Counter(transcript)[ok_texts[0]] == 1
    assert set(ok_texts[:-1]) <= set(transcript)
    assert decoy_file.read_text() == ""
    assert harness.loom("ledger", "verify").returncode == 0


def test_a_paste_into_a_pane_that_died_types_nothing_and_the_server_lives(harness):
    # tmux 3.3a's server crashes when pasting into a dead pane; the agent may die between any
    # look and the paste (a probe typed the moment a new agent is ready meets this race).
    from loomtui.agent.tmux import AgentPane

    harness.start()
    assert harness.loom("inject", "/exit0").returncode == 0
    wait_for(lambda: harness.pane_pid() is None, what="the pane dead")
    pane = AgentPane(harness.socket, "agent")
    info = pane.info()
    assert info is not None and info.dead
    pane.paste(info.pane_id, "typed into nobody", "loom-test-buffer")
    assert harness.server_pid() is not None and pane.info().dead
    assert "loom-test-buffer" not in harness.tmux("list-buffers").stdout


def test_a_line_asked_while_the_pane_was_not_live_is_not_typed_into_the_pane_there_later(harness):
    # The agent crashed (or tmux timed out on the one look) as the line was asked; while it waited
    # for inject.lock the watchdog relaunched the agent, holding the lock. The line then went into
    # the new agent as it booted (it could answer a start-up dialog): the check that the pane was
    # the one asked of was skipped when there had been none. The driver port here answers the ask
    # as a dead pane would; the pane there by the line's turn is the live demo agent.
    from loomtui.agent import drivers

    session_id = harness.start()
    ctx = harness.ctx()
    real = drivers.of(ctx)

    class AskedWhileDead(type(real)):
        def pane_pid(self) -> int | None:
            return None

    ctx.driver = AskedWhileDead(ctx.config, ctx.agent_dir)
    result = actions.inject(ctx, "meant for the agent that died", source="test")
    assert not result.ok and "not live when this was asked" in result.error, result
    ctx.driver = None
    assert actions.inject(ctx, "meant for the agent there now", source="test").ok
    wait_for(lambda: "meant for the agent there now" in harness.transcript(session_id), what="the second line")
    assert "meant for the agent that died" not in harness.transcript(session_id)


def test_missing_tmux_binary_is_a_clear_error(harness):
    bare_path = os.path.dirname(sys.executable)
    for args in (["inject", "hello"], ["recycle", "--fresh"]):
        result = harness.loom(*args, env={"PATH": bare_path})
        assert result.returncode != 0
        assert "tmux" in result.stderr and "not found" in result.stderr
        assert "Traceback" not in result.stderr


def test_inject_into_no_agent_fails_and_is_recorded(harness):
    result = harness.loom("inject", "anyone there?")
    assert result.returncode == 1
    assert "does not exist" in result.stderr
    events = harness.events("inject")
    assert len(events) == 1 and events[0]["detail"]["ok"] is False


def test_a_line_typed_while_another_process_locks_the_store_is_typed_once_and_said_so(harness):
    # The store locked past its busy timeout (a backup, an sqlite3 shell) between the typing and its
    # record: the line is in the pane, and `loom inject` must not read as "not sent" (exit 1 would
    # invite the retry that types it twice). It exits 75 and says not to send it again.
    import sqlite3

    session = harness.start()
    blocker = sqlite3.connect(harness.state_dir / "loom.db", isolation_level=None, timeout=30)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # writers wait; readers, and the typing, go on
        done = harness.loom("inject", "remember LOCKED-STORE-LINE")
    finally:
        blocker.close()
    assert done.returncode == 75, done.stderr
    assert "injected 26 characters" in done.stdout
    assert "the line was typed, but the ledger could not record it" in done.stderr
    assert "do not send it again" in done.stderr and "locked" in done.stderr
    wait_for(lambda: "remember LOCKED-STORE-LINE" in harness.transcript(session), 30, what="the line reached the agent")
    assert harness.transcript(session).count("remember LOCKED-STORE-LINE") == 1
    assert [e for e in harness.events("inject") if e["detail"].get("length") == 26] == []  # nothing invented


def test_the_agent_tree_is_found_from_the_pane(harness):
    harness.start()
    from loomtui.agent.driver import UP, TmuxDriver
    from loomtui.agent.proctree import PRESENT

    ctx = harness.ctx()
    facts = wait_for(lambda: (f := TmuxDriver(ctx.config).observe()).tree and f.tree.poller == PRESENT and f,
                     what="agent and poller seen")
    assert facts.tmux == UP
    assert facts.tree.agent == PRESENT and facts.tree.agent_pid == harness.agent_pid()
    assert set(facts.tree.poller_pids) <= set(harness.poller_pids())


@pytest.mark.parametrize(
    "text,expected",
    [("a\nb", "a b"), ("a\r\nb", "a b"), ("tab\there", "tab here"), ("bell\x07", "bell"), ("esc\x1b[31mred", "esc[31mred"),
     ("-dash;", "-dash;"), ("c1\x9bx", "c1x"), ("zwj 👩\u200d💻", "zwj 👩\u200d💻")],
)
def test_sanitize(text, expected):
    assert sanitize(text) == expected


@pytest.mark.incident("confident_false_detector")
def test_a_hung_tmux_server_is_unknown_not_gone(harness):
    import signal as sig

    from loomtui.agent.driver import UNKNOWN, TmuxDriver

    harness.start()
    ctx = harness.ctx()
    server = harness.server_pid()
    os.kill(server, sig.SIGSTOP)
    try:
        facts = TmuxDriver(ctx.config).observe()
        assert facts.tmux == UNKNOWN and "did not answer" in facts.why
        result = actions.inject(ctx, "hello?", source="test")
        assert not result.ok and "did not answer" in result.error
    finally:
        os.kill(server, sig.SIGCONT)
    assert TmuxDriver(ctx.config).observe().tmux == "up"


def test_an_agent_that_dies_at_once_is_a_failed_relaunch(make_harness):
    dying = f"{sys.executable} -c 'print(\"config error: no API key\"); raise SystemExit(4)' {{session_id}}"
    harness = make_harness(sections={"agent": {"fresh_command": dying}})
    result = harness.loom("recycle", "--fresh")
    assert result.returncode == 1
    assert "exited at once" in result.stderr and "no API key" in result.stderr
    [died] = harness.events("launch_died")
    assert died["detail"]["mode"] == "fresh" and "no API key" in died["detail"]["screen_tail"]


@pytest.mark.incident("garbled_replay")
def test_text_waiting_through_a_relaunch_is_not_typed_into_the_new_agent(harness):
    from loomtui.agent.driver import TmuxDriver
    from loomtui.agent.inject import inject
    from loomtui.store import locks

    harness.start()
    ctx = harness.ctx()
    results = []
    # The real driver, told to say when the injection has looked at the pane it means to type into.
    driver = TmuxDriver(ctx.config)
    looked, pane_pid = threading.Event(), driver.pane_pid

    def pane_pid_seen():
        pid = pane_pid()
        looked.set()
        return pid

    driver.pane_pid = pane_pid_seen
    lock = locks.hold(harness.state_dir, locks.INJECT, timeout=5)  # as a relaunch holds it
    try:
        waiting = threading.Thread(target=lambda: results.append(
            inject(ctx, "meant for the old one", source="test", driver=driver)))
        waiting.start()
        assert looked.wait(60), "the injection never looked at the pane"
        old = harness.pane_pid()
        # The pane changes hands while the text waits (what a relaunch does under the lock).
        assert harness.tmux("respawn-pane", "-k", "-t", "=agent:0.0", "cat").returncode == 0
        wait_for(lambda: harness.pane_pid() not in (None, old), what="a new pane process")
    finally:
        lock.release()
    waiting.join(60)
    [result] = results
    assert not result.ok and "relaunched while this waited" in result.error
    assert "meant for the old one" not in harness.screen()


def test_the_agents_environment_never_reaches_a_process_argument(make_harness, tmp_path, monkeypatch):
    # agent.env holds an API key as often as not; as `respawn-pane -e KEY=VALUE` words, any local
    # user reading /proc/PID/cmdline during a relaunch read it. A tmux first on PATH that writes
    # down its arguments, then runs the real one, sees every tmux process Loom starts.
    secret = "sk-test-" + "7" * 24
    root = tmp_path / "h0"  # make_harness's first
    env = {"LOOM_DEMO_DATA": str(root / "demo-data"), "LOOM_DEMO_BOT": "bot-env", "PYTHONPATH": str(REPO),
           "ANTHROPIC_API_KEY": secret, "QUOTED": "a'b\"c $HOME ;\nd", "TILDE": "~nosuchuser/x ~/y"}
    harness = make_harness(sections={"agent": {"env": env}})
    real = shutil.which("tmux")
    bin_dir, log = tmp_path / "bin", tmp_path / "tmux-argv.log"
    bin_dir.mkdir()
    (bin_dir / "tmux").write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{log}'\nexec '{real}' \"$@\"\n")
    (bin_dir / "tmux").chmod(0o755)
    result = harness.loom("recycle", "--fresh", "--reason", "env", env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert result.returncode == 0, result.stderr
    assert "respawn" in log.read_text() or "source-file" in log.read_text()
    assert secret not in log.read_text()
    pid = wait_for(harness.agent_pid, 30, what="the agent")
    environ = dict(item.split("=", 1) for item in
                   Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0") if "=" in item)
    assert environ["ANTHROPIC_API_KEY"] == secret and environ["QUOTED"] == "a'b\"c $HOME ;\nd"
    assert environ["TILDE"] == "~nosuchuser/x ~/y"  # no home directory put in, no syntax error

    # A tmux before 3.1 reads no stdin for `source-file -`: the line goes through a private file,
    # still never an argument. Its version, as this process knows it, said to be 3.0a.
    from loomtui.agent import tmux as tmux_mod

    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setitem(tmux_mod._versions, tmux_mod.tmux_binary(), "tmux 3.0a\n")
    before = harness.agent_pid()
    ctx = harness.ctx()
    assert actions.recycle(ctx, "fresh", source="cli", reason="old tmux").ok
    pid = wait_for(lambda: harness.agent_pid() not in (None, before) and harness.agent_pid(), 30, what="the agent again")
    assert secret not in log.read_text() and "source-file /" in log.read_text()
    environ = dict(item.split("=", 1) for item in
                   Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0") if "=" in item)
    assert environ["ANTHROPIC_API_KEY"] == secret and environ["TILDE"] == "~nosuchuser/x ~/y"
    assert not list(Path(tempfile.gettempdir()).glob("loom-tmux-*.conf"))  # removed at once


@pytest.mark.parametrize("parent", ["waits", "passes_on_sigterm"])
def test_the_agents_own_recycle_run_inside_its_pane_relaunches_it(make_harness, tmp_path, parent):
    """With `agent.may_hold` the agent may relaunch itself: its `loom recycle` runs inside the pane
    whose tree the relaunch ends. Ended first (children first), it left the agent running, the
    relaunch recorded but never made, and a fresh one's pin on a session never launched. Now the
    command is spared its own signal, and the hangup of the pane's closing; and the SIGTERM a
    parent ended by the relaunch passes on to its children (a tool runner ending what it ran)."""
    import shlex

    harness = make_harness(sections={"agent": {"may_hold": True}})
    old = harness.start()
    out = tmp_path / "recycle.out"
    recycle = shlex.join([sys.executable, "-m", "loomtui", "recycle", "--fresh", "--reason", "from inside"])
    # The agent's shell, as its Bash tool runs a command: in its pane, with its session's variables.
    shell = f"{recycle} > {shlex.quote(str(out))} 2>&1; sleep 600"
    if parent == "passes_on_sigterm":
        shell = (f"{recycle} > {shlex.quote(str(out))} 2>&1 & child=$!; "
                 'trap \'kill -TERM "$child"\' TERM; wait "$child"; wait "$child"; sleep 600')
    swapped = harness.tmux("respawn-pane", "-k", "-e", f"LOOM_SESSION_ID={old}", "-e", f"LOOM_CONFIG={harness.config_path}",
                           "-e", f"PYTHONPATH={REPO}", "-t", "=agent:0.0", "sh -c " + shlex.quote(shell))
    assert swapped.returncode == 0, swapped.stderr
    wait_for(lambda: "relaunched" in (out.read_text() if out.exists() else ""), 90, what="the recycle's outcome")
    new = harness.pinned()
    assert new != old
    wait_for(lambda: harness.agent_pid() is not None, 30, what="the fresh agent in the pane")
    relaunches = harness.events("relaunch")
    assert relaunches[-1]["cause"] == "operator_fresh" and relaunches[-1]["detail"]["new_session"] == new
    assert relaunches[-1]["detail"]["evidence"]["actor"] == "agent"
    assert not [e for e in harness.events("relaunch_failed") if e["id"] > relaunches[-1]["id"]]
    assert "start" in harness.transcript(new, role="meta")
