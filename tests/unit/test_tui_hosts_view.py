"""The console's hosts view and a remote agent's keys, the parts that need no sshd: the rows
grouped under their host, an unreachable host's own line, untrusted words made printable, the
commands the keys send, the header's words, an unreachable host refusing a key with ssh's reason
(a real ssh to a port nothing listens on), and the view itself at 80×24 over such a host. The
real sshd is tests/e2e/test_tui_hosts.py's."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest
from harness import free_port
from rich.text import Text
from tui_state import NOW, populate, until, utc, write_config  # noqa: F401  (the fixture utc)

from loomtui.config import HostConfig
from loomtui.context import Context
from loomtui.errors import LoomError
from loomtui.hosts import ledger_view, reach, view
from loomtui.tui import remote_agent, remote_source
from loomtui.tui.app import LoomApp
from loomtui.tui.hosts_view import Chosen, HostsScreen, key_of, rows_of

pytestmark = pytest.mark.usefixtures("utc")

MAIN = view.AgentRow("main", "running", "ok", 5.0, 0, "", 3.0)


def test_each_hosts_agents_are_grouped_under_its_own_line():
    far = view.parse_status(json.dumps([
        {"name": "ops\x1b[2J", "state": "held", "canary": {"result": "miss", "age": 60},
         "queue": {"open": 2}, "hold": {"by": "operator", "reason": "[bold]deploy\x07"}, "supervisor": {},
         "heartbeat_push": {"hc": {"age": 40, "says": "fail", "sent": True, "why": "[red]ops exited"}}}]))
    views = [view.HostView("local", (MAIN,)), view.HostView("b", far),
             view.HostView("c", unreachable=reach.Unreachable(NOW - 180, "ssh: connect to host x: Connection refused")),
             view.HostView("d", error="loom exited 2: no such agent")]
    rows = rows_of(views, NOW)
    assert [key for key, _ in rows] == [key_of("local"), key_of("local", "main"), key_of("b"), key_of("b", far[0].name),
                                        key_of("c"), key_of("d")]
    plain = {key: [cell.plain for cell in cells] for key, cells in rows}
    assert all(isinstance(cell, Text) for _, cells in rows for cell in cells)
    assert plain[key_of("local")][-1] == "heartbeat 3s ago"
    assert plain[key_of("local", "main")] == ["  main", "running", "ok 5s ago", "", "none"]
    ops = plain[key_of("b", far[0].name)]
    assert "\x1b" not in ops[0] and ops[1:4] == ["held", "miss 1m ago", "2"]
    assert ops[4].startswith("operator: [bold]deploy") and "\x07" not in ops[4]
    # The host's push heartbeats on its own line, beside its supervisor's heartbeat: none there, so
    # nothing supervises its agents, and the line says so in red.
    assert plain[key_of("b")][4] == ("heartbeat none: loom supervise is not running · push hc: fail sent 40s ago: "
                                     "[red]ops exited")
    assert "red" in str(dict(rows)[key_of("b")][4].style) and "red" not in str(dict(rows)[key_of("local")][4].style)
    # A host nobody answers for: one line saying since when and why; no agent of it, dead or alive.
    assert plain[key_of("c")][0] == "c" and plain[key_of("c")][1:4] == ["", "", ""]
    assert plain[key_of("c")][4] == ("unreachable since 2026-11-18 11:03:40 (3m ago): "
                                     "ssh: connect to host x: Connection refused")
    assert plain[key_of("d")][4] == "reached, but its Loom did not answer: loom exited 2: no such agent"


def test_a_remote_agents_keys_are_its_hosts_own_commands():
    assert remote_agent.words("canary", "main") == ["canary", "--agent", "main"]
    recycle = remote_agent.words("recycle", "main", mode="fresh")
    assert recycle[:4] == ["recycle", "--fresh", "--agent", "main"] and recycle[4] == "--reason"
    assert remote_agent.words("hold", "main", reason="swap model", duration=1800.0) == \
        ["hold", "--for", "1800s", "--reason=swap model", "--agent", "main"]
    assert remote_agent.words("hold", "main", reason="x", duration=None) == ["hold", "--reason=x", "--agent", "main"]
    assert remote_agent.words("release", "main") == ["release", "--agent", "main"]
    # A line and a note go on the command's standard input, never among its words.
    assert remote_agent.words("inject", "main") == ["inject", "--stdin", "--agent", "main"]
    assert remote_agent.words("resolve", "main", item=7) == ["resolve", "7", "--note-stdin"]
    with pytest.raises(ValueError):
        remote_agent.words("attach", "main")


def test_the_header_says_plainly_which_host_and_that_it_is_remote():
    held = view.AgentRow("main", "held", None, None, 1, "operator: deploying", 2.0)
    text = remote_agent.header(Chosen("b", "main", held, NOW - 12), NOW).plain
    first, second, third = text.split("\n")
    assert first.startswith(" host b · agent main (remote)   held  read 12s ago")
    assert second == "canary no probe yet  queue 1  hold operator: deploying"
    assert third == "keys c r h i d a act on b over ssh · every tab is b's, memory too"
    assert all(len(line) <= 78 for line in (first, second, third))  # 80 columns less the header's padding
    # The host's `loom supervise` no longer beats: its state is what it last saw, and nothing on that
    # host would recover the agent. The header says so beside the state, in red.
    for unwatched in (replace(held, heartbeat_age=600.0), replace(held, heartbeat_age=None)):
        header = remote_agent.header(Chosen("b", "main", unwatched, NOW - 12), NOW)
        first = header.plain.split("\n")[0]
        assert first.startswith(" host b · agent main (remote)   held  unsupervised  read 12s ago")
        assert len(first) <= 78
        assert any("red" in str(span.style) and header.plain[span.start:span.end].strip() == "unsupervised"
                   for span in header.spans)
        assert remote_source.header_of(Chosen("b", "main", unwatched, NOW)).supervisor_level == "bad"
    assert remote_source.header_of(Chosen("b", "main", held, NOW)).supervisor_level == "ok"


def test_another_hosts_ledger_is_read_back_field_by_field_newest_first():
    lines = [json.dumps({"id": 7, "ts": 1.5, "kind": "canary", "source": "ssh", "cause": None,
                         "detail": {"result": "ok", "said": "\x1b]2;PWNED\x07"}, "hash": "ab", "agent": "main"}),
             json.dumps({"id": 9, "ts": 2, "kind": "k" * 500, "source": "t", "cause": "c", "detail": [1], "agent": "main"})]
    events = ledger_view.parse_page("\n".join(lines) + "\n\n")
    assert [e.id for e in events] == [9, 7]  # tail prints oldest first; a page is newest first
    assert len(events[0].kind) == 64 and events[0].detail == {"value": [1]} and events[0].hash == ""
    assert events[1].detail["said"] == "\x1b]2;PWNED\x07"  # data kept; the table shows it made printable
    for bad in ('{"id": true, "ts": 1, "kind": "k", "source": "s", "agent": "main"}',
                '{"id": 1, "ts": "now", "kind": "k", "source": "s", "agent": "main"}',
                '{"id": 1, "ts": 1, "kind": 3, "source": "s", "agent": "main"}',
                '{"id": 1, "ts": 1, "kind": "k", "source": "s"}', "[1]", "not json"):
        with pytest.raises(ValueError):
            ledger_view.parse_page(bad)
    many = "\n".join(json.dumps({"id": n, "ts": 1, "kind": "k", "source": "s", "agent": "a"})
                     for n in range(ledger_view.MAX_EVENTS + 50))
    assert len(ledger_view.parse_page(many)) == ledger_view.MAX_EVENTS
    assert ledger_view.tail_words(limit=300, agent="main", kinds=["a", "b"], before_id=40, text="x y") == \
        ["ledger", "tail", "--json", "-n", "300", "--agent", "main", "--kind=a", "--kind=b", "--before", "40", "--text=x y"]


def test_a_key_on_an_unreachable_host_is_refused_with_ssh_s_reason(tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text("")
    host = HostConfig.build({"name": "b", "ssh": "127.0.0.1", "connect_timeout": "5s",
                             "ssh_options": ["-F", "/dev/null", "-p", str(free_port()),
                                             "-o", f"UserKnownHostsFile={known}",
                                             "-o", "GlobalKnownHostsFile=none"]}, ("hosts", 0), None)
    outcome = remote_agent.run(host, tmp_path / "state", remote_agent.words("canary", "main"))
    assert not outcome.ok
    assert outcome.text.startswith("host b is unreachable: ssh: connect to host 127.0.0.1")
    assert "Connection refused" in outcome.text
    # Every tab's read says the same, and nothing of this machine's stands in for it.
    load = remote_source.RemoteSource(host, tmp_path / "state", Chosen("b", "main", MAIN, NOW)).load(NOW)
    assert load.chosen is None and load.snapshot.store_error.startswith("host b is unreachable: ssh: connect")
    assert (load.snapshot.host, load.snapshot.queue, load.snapshot.jobs, load.snapshot.canary) == ("b", [], [], [])
    assert load.snapshot.pane.state == "remote"
    assert load.snapshot.pane.why.startswith("agent main's pane on host b; host b is unreachable: ssh: connect")
    # The timeline of that host's agent says why it has nothing to show (the panel prints it).
    with pytest.raises(LoomError, match="host b is unreachable: ssh: connect to host 127.0.0.1"):
        remote_agent.RemoteEvents(host, tmp_path / "state").page(before_id=None, limit=10, kinds=None, text=None,
                                                                 agent="main")


def test_a_remote_action_that_failed_is_told_by_its_error_line():
    from loomtui.hosts.ssh import Reply

    typed = Reply("b", 75, "injected 12 characters (digest ab12)\n",
                  "loom: the line was typed, but the ledger could not record it (locked); do not send it again\n")
    outcome = remote_agent.outcome_of("b", typed)
    assert not outcome.ok and outcome.text.startswith("on host b: loom: the line was typed") \
        and "do not send it again" in outcome.text
    ok = remote_agent.outcome_of("b", Reply("b", 0, "canary ok in 2.0s\n", "a warning\n"))
    assert ok.ok and ok.text == "on host b: canary ok in 2.0s"
    assert remote_agent.outcome_of("b", Reply("b", 1, "", "")).text == "on host b: exit 1"
    assert remote_agent.outcome_of("b", Reply("b", 1, "only stdout\n", "")).text == "on host b: only stdout"


def footer(app) -> str:
    return [strip.text for strip in app.screen._compositor.render_strips()][-1]


def console_ctx(tmp_path, request, hosts: str) -> Context:
    socket = f"loomtest-hostsview-{request.node.name[-20:]}-absent"
    config = write_config(tmp_path, socket=socket, extra=hosts)
    ctx = Context.load(str(config), None, environ={})
    populate(ctx)
    return ctx


def test_the_hosts_view_at_80_columns_reads_an_unreachable_host_in_place(tmp_path, request):
    known = tmp_path / "known_hosts"
    known.write_text("")
    ctx = console_ctx(tmp_path, request, f'[[hosts]]\nname = "far"\nssh = "127.0.0.1"\nconnect_timeout = "5s"\n'
                                         f'ssh_options = ["-F", "/dev/null", "-p", "{free_port()}", '
                                         f'"-o", "UserKnownHostsFile={known}", '
                                         f'"-o", "GlobalKnownHostsFile=none"]\n')

    async def run():
        app = LoomApp(ctx, now=lambda: NOW, watch=False, refresh_every=3600)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.snapshot is not None, "a first snapshot")
            await until(pilot, lambda: "q Quit" in footer(app), "the footer drawn")
            assert "o Hosts" in footer(app), footer(app)
            await pilot.press("o")
            await until(pilot, lambda: isinstance(app.screen, HostsScreen) and app.screen.views is not None,
                        "the hosts read")
            await pilot.pause()
            lines = [strip.text for strip in app.screen._compositor.render_strips()]
            text = "\n".join(lines)
            assert lines[1].split()[:4] == ["host", "/", "agent", "state"]
            assert lines[2].split()[0] == "local" and lines[3].split()[0] == "main"
            assert any(line.split()[:1] == ["far"] for line in lines)
            assert "unreachable since" in text and "Connection refused" in text.replace("\n", " ")
            assert "…" not in text, text
            # A host's own line has nothing to act on: Enter there says so and stays.
            table = app.screen.query_one("#hosts-table")
            table.move_cursor(row=table.get_row_index(key_of("far")), animate=False)
            await pilot.press("enter")
            await until(pilot, lambda: any("choose an agent's row" in n.message for n in app._notifications),
                        "the view saying a host's line is not an agent")
            assert isinstance(app.screen, HostsScreen)
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is app.console_screen, "back to the console")
            assert app.console_screen.remote is None

    asyncio.run(run())


def test_without_hosts_the_key_is_not_offered_and_says_why(tmp_path, request):
    ctx = console_ctx(tmp_path, request, "")

    async def run():
        app = LoomApp(ctx, now=lambda: NOW, watch=False, refresh_every=3600)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.snapshot is not None, "a first snapshot")
            await until(pilot, lambda: "q Quit" in footer(app), "the footer drawn")
            assert "Hosts" not in footer(app), footer(app)
            await pilot.press("o")
            await until(pilot, lambda: "no [[hosts]] in the config" in app.console_screen.notices.text,
                        "the reason in the notice bar")
            assert app.screen is app.console_screen

    asyncio.run(run())


def test_attach_to_another_hosts_agent_says_when_ssh_s_control_dir_cannot_be_made(tmp_path, request):
    """`a` on a remote agent makes the state dir's ssh/ (the master's socket lives there) before
    it runs `ssh -t`: when that fails the console says so and keeps running."""
    ctx = console_ctx(tmp_path, request, '[[hosts]]\nname = "far"\nssh = "127.0.0.1"\n')
    (ctx.state_dir / "ssh").write_text("not a directory\n")

    async def run():
        app = LoomApp(ctx, now=lambda: NOW, watch=False, refresh_every=3600)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: app.snapshot is not None, "a first snapshot")
            app.console_screen.remote = Chosen("far", "main", MAIN, NOW)
            await pilot.press("a")
            await until(pilot, lambda: any(n.title == "attach" for n in app._notifications), "attach's word")
            said = [n.message for n in app._notifications if n.title == "attach"]
            assert said == [f"attach: {ctx.state_dir / 'ssh'}: File exists"], said
            assert app.is_running

    asyncio.run(run())
