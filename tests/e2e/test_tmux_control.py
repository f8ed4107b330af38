"""The control-mode client end to end: real tmux on a private socket, the real demo agent.

It must answer exactly as one tmux process per query would, never hang a tick on a server that
does not answer, come back after the server or the client went, read replies between the
notifications tmux sends, and leave the agent's pane as it found it.
"""

from __future__ import annotations

import os
import shlex
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from harness import wait_for

from loomtui.agent import tmux
from loomtui.agent.driver import UNKNOWN, TmuxDriver
from loomtui.agent.tmux import (
    CONTROL_ENV,
    AgentPane,
    TmuxTimeout,
    close_control_clients,
    control_mode_safe,
    socket_path,
    tmux_binary,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def control_mode(monkeypatch):
    monkeypatch.setenv(CONTROL_ENV, "1")
    yield
    close_control_clients()


def plain(monkeypatch, fn):
    monkeypatch.setenv(CONTROL_ENV, "0")
    try:
        return fn()
    finally:
        monkeypatch.setenv(CONTROL_ENV, "1")


def answers(pane: AgentPane):
    results = [pane.server.cmd("list-sessions", "-F", "#{session_name}"),
               pane.server.cmd("list-panes", target="=nosuch:0"),
               pane.server.cmd("display-message", "-p", "#{pid} #{pane_width}x#{pane_height}", target=pane.target)]
    return (pane.info(), pane.capture(), pane.capture(history=True, ansi=True),
            [(r.returncode, r.stdout, r.stderr) for r in results])


def test_control_mode_answers_as_one_process_per_query_does(harness, monkeypatch):
    harness.start()
    assert harness.loom("inject", "héllo \t wörld 🚀").returncode == 0
    wait_for(lambda: "wörld" in harness.screen(), what="the line on screen")
    pane = AgentPane(harness.socket, "agent")
    before = plain(monkeypatch, lambda: answers(pane))
    assert pane.server.control_client() is None
    now = answers(pane)
    assert pane.server.control_client() is not None
    assert now == before
    assert "wörld" in now[1] and now[0] is not None and now[3][1][0] == 1


def test_the_control_client_neither_resizes_the_pane_nor_takes_its_output(harness):
    harness.start()
    pane = AgentPane(harness.socket, "agent")
    info = pane.info()
    client = pane.server.control_client()
    assert client is not None
    clients = harness.tmux("list-clients", "-F", "#{client_pid} #{client_flags}").stdout.split("\n")
    flags = next(line.split(" ", 1)[1] for line in clients if line.startswith(f"{client.pid} "))
    assert {"control-mode", "no-output", "ignore-size"} <= set(flags.split(","))
    assert (info.width, info.height) == (200, 50)
    # Without no-output tmux would keep every byte the agent writes until this client read it
    # (it reads replies only) and queue each reply behind them. A control client that set a size
    # (refresh-client -C) would resize the window to it.
    assert pane.info() == info and pane.server.control_client() is client
    assert harness.tmux("display-message", "-p", "-t", "=agent:0", "#{window_width}x#{window_height}").stdout \
        == "200x50\n"


def test_a_stopped_server_gives_tmux_timeout_and_the_client_comes_back(harness):
    harness.start()
    pane = AgentPane(harness.socket, "agent", timeout=1.0)
    expected = pane.info()
    first = pane.server.control_client()
    assert first is not None
    server = harness.server_pid()
    pool = ThreadPoolExecutor(2)
    os.kill(server, signal.SIGSTOP)
    try:
        # Asked through the client it had, the plain way, and through a client that must start.
        calls = [pool.submit(pane.info), pool.submit(pane.info)]
        for call in calls:
            with pytest.raises(TmuxTimeout, match="did not answer"):
                call.result(timeout=60)  # a bound on hanging, not on speed
        # And through a client that must connect to the stopped server: only on a tmux with the fix.
        # Without it (CONTROL_SAFE_FROM), the resumed server meets this connect and the first client's
        # detach at once, and that crashes it: a CI run under load lost the server so (3.3a).
        starting = AgentPane(harness.socket, "agent", timeout=1.0, env_drop=("ANOTHER_CLIENT",))
        if control_mode_safe(tmux_binary()):
            with pytest.raises(TmuxTimeout, match="did not answer"):
                pool.submit(starting.info).result(timeout=60)
        assert pane.server.control_client() is None and starting.server.control_client() is None
        assert TmuxDriver(harness.ctx().config).observe().tmux == UNKNOWN
    finally:
        os.kill(server, signal.SIGCONT)
        pool.shutdown()
    wait_for(lambda: pane.info() == expected, what="answers again",
             explain=lambda: f"server pid now {harness.server_pid()} (was {server})")
    again = wait_for(lambda: pane.info() == expected and pane.server.control_client(), what="a new control client")
    assert again is not first


def test_the_client_comes_back_after_the_server_restarts(harness):
    harness.start()
    pane = AgentPane(harness.socket, "agent")
    assert pane.info() is not None
    first = pane.server.control_client()
    assert first is not None
    harness.tmux("kill-server")
    wait_for(lambda: pane.info() is None, what="no server, said the plain way")
    assert pane.server.control_client() is None
    harness.start()
    fresh = wait_for(lambda: (info := pane.info()) is not None and not info.dead and pane.server.control_client(),
                     what="a control client on the new server")
    assert fresh is not first and pane.info().pane_pid == harness.pane_pid()


def test_a_killed_client_is_replaced_and_the_query_still_answered(harness):
    harness.start()
    pane = AgentPane(harness.socket, "agent")
    expected = pane.info()
    first = pane.server.control_client()
    os.kill(first.pid, signal.SIGKILL)
    assert pane.info() == expected
    wait_for(lambda: pane.info() == expected and pane.server.control_client() not in (None, first),
             what="a new control client")


def test_no_session_no_client_and_the_plain_way_answers(harness):
    harness.start()
    pane = AgentPane(harness.socket, "nosuch")
    assert pane.info() is None and pane.info() is None
    assert pane.server.control_client() is None
    with pytest.raises(Exception, match="can't find"):
        pane.capture()


def test_replies_are_read_between_notifications(harness):
    harness.start()
    pane = AgentPane(harness.socket, "agent")
    expected = pane.info()
    client = pane.server.control_client()
    stop = threading.Event()

    def churn() -> None:
        n = 0
        while not stop.is_set():
            harness.tmux("new-window", "-d", "-t", "=agent:1", "-n", f"w{n}", "sleep 60")
            harness.tmux("rename-window", "-t", "=agent:1", f"renamed{n}")
            harness.tmux("kill-window", "-t", "=agent:1")
            harness.tmux("new-session", "-d", "-s", "other", "sleep 60")
            harness.tmux("kill-session", "-t", "=other")
            n += 1

    thread = threading.Thread(target=churn)
    thread.start()
    try:
        looks = 0
        while client.notices < 50 or looks < 200:
            assert pane.info() == expected
            assert "demo agent" in pane.capture()
            looks += 1
            assert looks < 100_000, "no notifications came"
    finally:
        stop.set()
        thread.join(60)
    assert pane.server.control_client() is client  # never out of step, never restarted


def test_threads_share_one_client_and_each_gets_its_own_answer(harness):
    harness.start()
    pane = AgentPane(harness.socket, "agent")
    expected = pane.info()
    client = pane.server.control_client()
    panes = [AgentPane(harness.socket, "agent") for _ in range(4)]  # as the daemon's loops each build one

    def look(p: AgentPane) -> list[object]:
        return [(p.info(), "demo agent" in p.capture()) for _ in range(200)]

    with ThreadPoolExecutor(4) as pool:
        results = [r for part in pool.map(look, panes) for r in part]
    assert results == [(expected, True)] * 800
    assert pane.server.control_client() is client


def test_a_one_shot_command_starts_no_client(harness, monkeypatch):
    harness.start()
    monkeypatch.setenv(CONTROL_ENV, "0")
    pane = AgentPane(harness.socket, "agent")
    for _ in range(5):
        assert pane.info() is not None
    assert pane.server.control_client() is None
    monkeypatch.delenv(CONTROL_ENV)
    if not control_mode_safe(tmux_binary()):
        # This tmux crashes when a notification meets a connecting control client: by default none.
        for _ in range(5):
            assert pane.info() is not None
        assert pane.server.control_client() is None
        monkeypatch.setitem(tmux._safe, tmux_binary(), True)  # as a tmux with the fix would answer
    other = AgentPane(harness.socket, "agent", env_drop=("FRESH_CHANNEL",))
    assert other.info() is not None and other.capture()
    assert other.server.control_client() is None  # two queries: a `loom status` pays no client
    assert other.info() is not None
    assert other.server.control_client() is not None



# Pane text is untrusted: lines that imitate what list-panes and control mode print.
HOSTILE = ["2\t0\t%0\t4242\t0\t\t80\t24\t", "0\t%9\t1\t1\t0\t80\t24\t", "%begin 1 2 0", "%end 1 2 0",
           "%exit", "can't find pane: 0", "1", "", "0 %7 4242 1 0  80 24"]


def hostile_session(harness, name: str, panes: int = 1, *, dies: bool = False) -> AgentPane:
    """A session whose panes print HOSTILE (with `dies`, its one pane then exits 3 and stays, dead)."""
    text = harness.root / f"{name}.txt"
    text.write_text("\n".join(HOSTILE) + "\n")
    show = f"cat {shlex.quote(str(text))}; "
    assert harness.tmux("new-session", "-d", "-s", name, "-x", "120", "-y", "40", "exec sleep 600").returncode == 0
    window = f"={name}:0"
    assert harness.tmux("set-option", "-w", "-t", window, "remain-on-exit", "on").returncode == 0
    assert harness.tmux("respawn-pane", "-k", "-t", f"{window}.0",
                        show + ("exit 3" if dies else "exec sleep 600")).returncode == 0
    for _ in range(panes - 1):
        assert harness.tmux("split-window", "-d", "-t", window, show + "exec sleep 600").returncode == 0
    wait_for(lambda: all("can't find pane: 0" in harness.tmux("capture-pane", "-p", "-t", f"{window}.{n}").stdout
                         for n in range(panes)), what="the hostile text on screen")
    return AgentPane(harness.socket, name)


def apart(pane: AgentPane):
    """What a look must equal: info(), then capture() while the pane lives."""
    info = pane.info()
    return info, (pane.capture() if info is not None and not info.dead else None)


def test_a_look_answers_as_info_then_capture_do_on_both_paths(harness, monkeypatch):
    harness.start()
    panes = [AgentPane(harness.socket, "agent"), hostile_session(harness, "one"), hostile_session(harness, "two", 2),
             AgentPane(harness.socket, "nosuch")]
    expected = plain(monkeypatch, lambda: [apart(p) for p in panes])
    assert "%begin 1 2 0" in expected[1][1] and "can't find pane: 0" in expected[2][1]
    assert expected[2][0].pane_id != expected[1][0].pane_id and expected[3] == (None, None)
    processes = []
    real_run = tmux.subprocess.run

    def counted(argv, *args, **kwargs):
        processes.append(argv)
        return real_run(argv, *args, **kwargs)

    monkeypatch.setattr(tmux.subprocess, "run", counted)
    looked = plain(monkeypatch, lambda: [p.look() for p in panes])
    assert looked == expected
    assert len(processes) == len(panes)  # one tmux process per look, the two-pane window's too
    for p in panes[:3]:
        p.info()  # the control client starts
    assert all(p.server.control_client() is not None for p in panes[:3])
    del processes[:]
    assert [p.look() for p in panes] == expected
    assert len(processes) == 1  # only the session that has no control client asked the plain way


def test_a_look_at_a_dead_pane_gives_the_pane_and_no_screen_on_both_paths(harness, monkeypatch):
    harness.start()
    pane = hostile_session(harness, "dead", dies=True)
    info = wait_for(lambda: (i := pane.info()) is not None and i.dead and i, what="the pane dead")
    assert plain(monkeypatch, pane.look) == (info, None) == pane.look()
    driver = TmuxDriver(harness.ctx().config)
    facts = plain(monkeypatch, lambda: driver.observe(with_screen=True))
    assert facts.screen is not None and facts.screen == plain(monkeypatch, driver.screen)
    assert "demo agent" in facts.screen and facts.pane == plain(monkeypatch, driver.pane_info)
    assert driver.observe().screen is None


def test_a_look_at_a_stopped_server_gives_tmux_timeout_the_plain_way_too(harness, monkeypatch):
    harness.start()
    monkeypatch.setenv(CONTROL_ENV, "0")
    pane = AgentPane(harness.socket, "agent", timeout=1.0)
    expected = apart(pane)
    server = harness.server_pid()
    os.kill(server, signal.SIGSTOP)
    try:
        with pytest.raises(TmuxTimeout, match="did not answer"):
            pane.look()
    finally:
        os.kill(server, signal.SIGCONT)
    assert wait_for(lambda: pane.look() == expected, what="answers again")


def test_a_deleted_socket_reads_as_it_does_to_every_other_tmux_command(harness):
    # A connected client never looks at the socket's path again; the watchdog must still see a
    # socket a /tmp cleaner deleted (and repair it), as one tmux process per query sees it.
    harness.start()
    pane = AgentPane(harness.socket, "agent")
    expected = pane.info()
    first = pane.server.control_client()
    assert first is not None
    server = harness.server_pid()
    os.unlink(socket_path(harness.socket, dict(os.environ)))
    assert pane.info() is None and not pane.server_running()
    assert pane.server.control_client() is None
    os.kill(server, signal.SIGUSR1)  # tmux makes its socket again
    again = wait_for(lambda: pane.info() == expected and pane.server.control_client(), what="a client, new socket")
    assert again is not first
