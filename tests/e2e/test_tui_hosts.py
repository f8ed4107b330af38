"""Issue 28's must-show for the console over several hosts, at 80×24: host a's console (its own
demo agent) with host b reached through a real sshd (tests/sshd.py) and host c that nothing
answers for. The hosts view groups each host's agents under it and reads c as unreachable, never as
a dead agent; Enter on b's agent makes it the keys' agent, the header says so plainly, and the
canary key probes b's agent through b's own Loom: b's ledger records the probe with source ssh,
and a's agent is not probed. Every tab is then b's, read through b's own commands: its queue item,
its job, its probe, its pane; back on a's agent, a's again."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest
from harness import free_port
from sshd import REMOTE_LOOM, add_host, kill_masters
from test_tui import screen_text, until

from loomtui.config import LOCAL_HOST
from loomtui.store.ledger import Event
from loomtui.tui.app import LoomApp
from loomtui.tui.hosts_view import HostsScreen, key_of
from loomtui.tui.modals import PromptScreen
from loomtui.tui.queue_panel import QueuePanel
from loomtui.tui.timeline_panel import TimelinePanel

pytestmark = pytest.mark.e2e


async def choose(pilot, app, host: str, agent: str) -> None:
    """Enter on `agent` of `host` in the hosts view open on the console: it is the keys' agent."""
    table = app.screen.query_one("#hosts-table")
    table.move_cursor(row=table.get_row_index(key_of(host, agent)), animate=False)
    await pilot.press("enter")
    await until(pilot, lambda: app.screen is app.console_screen and app.console_screen.remote is not None,
                30, what=f"{host}'s agent chosen")


def table_text(app) -> list[str]:
    """The hosts view's lines as drawn at 80 columns, the title and footer left out."""
    return screen_text(app).splitlines()[1:-1]


FAIL = "print('ERROR: upstream returned 503'); raise SystemExit(3)"


def test_the_console_over_two_hosts_probes_bs_agent_through_bs_loom(make_harness, sshd, tmp_path):
    a = make_harness()
    b = make_harness(jobs=[{"name": "b-nightly", "log": str(tmp_path / "b-jobs" / "nightly.log"), "schedule": "every 1h"}])
    client = sshd.client_config()
    add_host(a.config_path, "b", ssh="b", ssh_options=["-F", str(client)], loom=REMOTE_LOOM,
             config=str(b.config_path), state_dir=str(b.state_dir), connect_timeout="10s", timeout="60s",
             command_timeout="120s")
    # c: the same client config, a port nothing listens on (ssh's -p wins over the file's Port).
    add_host(a.config_path, "c", ssh="c", ssh_options=["-F", str(client), "-p", str(free_port())], loom=REMOTE_LOOM,
             config=str(b.config_path), state_dir=str(b.state_dir), connect_timeout="10s", timeout="60s")
    try:
        a.start(), b.start()
        # b's job fails: two items in b's queue (the exit and the ERROR line), none in a's.
        assert b.loom("run-job", "b-nightly", "--", sys.executable, "-c", FAIL).returncode == 3
        assert b.loom("sentinel", "scan", "--no-nudge").returncode == 0
        a_canaries, b_canaries = len(a.events("canary")), len(b.events("canary"))
        ctx = a.ctx()
        resolved: list = []  # the item of b's resolved from the console

        async def run():
            app = LoomApp(ctx, watch=False)
            async with app.run_test(size=(80, 24)) as pilot:
                await until(pilot, lambda: app.snapshot is not None, 60, what="the console's first snapshot")
                await pilot.press("o")
                await until(pilot, lambda: isinstance(app.screen, HostsScreen) and app.screen.views is not None,
                            120, what="every host read in the hosts view")
                view = app.screen
                hosts = {hv.host: hv for hv in view.views}
                assert list(hosts) == [LOCAL_HOST, "b", "c"]
                assert [r.name for r in hosts[LOCAL_HOST].agents] == ["main"]
                assert hosts["b"].unreachable is None and [r.name for r in hosts["b"].agents] == ["main"]
                assert hosts["c"].unreachable is not None and hosts["c"].agents == ()
                await pilot.pause()
                drawn = table_text(app)
                text = "\n".join(drawn)
                # Grouped: each host's line, then its agents; c's line says since when, whole.
                firsts = [line[:14].strip() for line in drawn if line[:14].strip()]
                assert firsts[1:6] == [LOCAL_HOST, "main", "b", "main", "c"], drawn
                assert "unreachable since" in text and "Connection refused" in text.replace("\n", " "), text
                # Nothing cut at 80 columns: no ellipsis, no line wider than the screen.
                assert "…" not in text and all(len(line) <= 80 for line in drawn), text
                await choose(pilot, app, "b", "main")
                await until(pilot, lambda: "host b · agent main (remote)" in screen_text(app), 30,
                            what="the header saying the selection is remote")
                header = screen_text(app).splitlines()[:3]
                assert all("…" not in line for line in header[:2]), header
                # Every tab is b's, read through b's own Loom, and the pane is b's agent's screen.
                console = app.console_screen
                await until(pilot, lambda: console.snapshot is not None and console.snapshot.host == "b"
                            and console.snapshot.jobs, 120, what="b's tabs read over ssh")
                assert console.snapshot.pane.state == "up" and console.snapshot.pane.text.strip(), console.snapshot.pane
                assert [j.name for j in console.snapshot.jobs] == ["b-nightly"]
                assert console.snapshot.jobs[0].last_exit == 3 and console.snapshot.jobs[0].open_items == 2
                await pilot.press("3")
                await until(pilot, lambda: sorted(i.kind for i in console.query_one(QueuePanel)._items.values())
                            == ["exit", "line"], 30, what="b's queue items on the Queue tab")
                await until(pilot, lambda: "b-nightly" in screen_text(app), 30, what="b's job on the Queue tab")
                await pilot.press("4")
                await until(pilot, lambda: "exit 3" in screen_text(app), 30, what="b's job's last run on the Fleet tab")
                await pilot.press("c")
                await until(pilot, lambda: any(x == "canary" for x, _, _ in app.outcomes), 180,
                            what="the remote canary's outcome")
                action, said, ok = app.outcomes[-1]
                assert ok and said.startswith("on host b: "), app.outcomes[-1]
                await until(pilot, lambda: "canary · main on b" in app.console_screen.notices.text, 30,
                            what="the outcome in the notice bar")
                # The header's row read again from b after the action: the probe's ack.
                await until(pilot, lambda: "canary ok " in screen_text(app), 60, what="b's ack in the header")
                # And b's Canary tab has it, by ssh.
                await until(pilot, lambda: any(p.source == "ssh" and p.result == "ok" for p in console.snapshot.canary),
                            60, what="b's probe on the Canary tab")
                await pilot.press("2")
                await until(pilot, lambda: "ssh" in screen_text(app), 30, what="the probe drawn on the Canary tab")
                # The timeline is b's ledger, read through b's `loom ledger tail --json`: the probe
                # that came over ssh is there (a's ledger has none).
                await pilot.press("6")
                timeline = app.console_screen.query_one(TimelinePanel)
                timeline.action_toggle_mode()

                def bs_probe() -> bool:
                    return any(isinstance(e, Event) and (e.kind, e.source, e.agent) == ("canary", "ssh", "main")
                               for e in timeline._rows.values())

                await until(pilot, bs_probe, 120, what="b's probe in the timeline")
                await until(pilot, lambda: "events of main on host b" in screen_text(app), 30,
                            what="the timeline saying whose events it shows")
                # A line typed into b's agent goes over ssh on the host's standard input.
                await pilot.press("i")
                await until(pilot, lambda: isinstance(app.screen, PromptScreen), 30, what="the inject prompt")
                await pilot.press(*"hello from a", "enter")
                await until(pilot, lambda: any(x == "inject" and ok for x, _, ok in app.outcomes), 120,
                            what="the remote inject's outcome")
                # And b's first queue item resolved from its Queue tab, the note on standard input too.
                await pilot.press("3")
                await until(pilot, lambda: console.query_one(QueuePanel).selected is not None, 30,
                            what="a queue item of b's selected")
                chosen_item = console.query_one(QueuePanel).selected
                resolved.append(chosen_item)
                await pilot.press("d")
                await until(pilot, lambda: isinstance(app.screen, PromptScreen), 30, what="the resolve prompt")
                await pilot.press(*"rotated the upstream token", "enter")
                await until(pilot, lambda: any(x == "resolve" and ok for x, _, ok in app.outcomes), 120,
                            what="the remote resolve's outcome")
                await until(pilot, lambda: any(i.id == chosen_item.id and i.state == "claimed"
                                               for i in console.snapshot.queue), 60, what="b's item claimed, read back")
                # The line typed over ssh shows in b's pane, read over ssh (a's agent never had it).
                await until(pilot, lambda: "hello from a" in console.snapshot.pane.text, 60,
                            what="the typed line in b's pane, read back")
                # Attach is b's own `loom attach` over ssh with a terminal (a test has none: the notice
                # says the command; tests/e2e/test_hosts_ssh.py runs it in a real one).
                await pilot.press("a")
                await until(pilot, lambda: "attach needs a real terminal; run: ssh " in
                            app.console_screen.notices.text, 30, what="attach's command for b")
                assert "-t" in app.console_screen.notices.text and " attach --agent main" in \
                    app.console_screen.notices.text
                # The hold key both ways, from the hold b last reported: placed, then released.
                await pilot.press("h")
                await until(pilot, lambda: isinstance(app.screen, PromptScreen), 30, what="the hold prompt")
                await pilot.press(*"10m swapping the model", "enter")
                await until(pilot, lambda: "hold operator" in screen_text(app), 120, what="b's hold in the header")
                await pilot.press("h")
                await until(pilot, lambda: isinstance(app.screen, PromptScreen), 30, what="the release prompt")
                await pilot.press(*"release", "enter")
                await until(pilot, lambda: "hold none" in screen_text(app), 120, what="b's hold released")
                # The one local agent again: the header is this machine's, and no row of b's is left
                # in a panel for a key to act on here (b's item ids are b's).
                await pilot.press("n")
                assert not console.query_one(QueuePanel)._items and (console.snapshot is None or console.snapshot.host == "")
                await until(pilot, lambda: app.console_screen.remote is None
                            and "(remote)" not in screen_text(app), 30, what="back to a's agent")
                # And the timeline a's own again.
                await until(pilot, lambda: timeline._rows and not bs_probe()
                            and "on host b" not in screen_text(app), 60, what="a's timeline again")
                # Every tab a's again: a's queue has nothing, a's pane is drawn.
                await until(pilot, lambda: console.snapshot is not None and console.snapshot.host == ""
                            and not console.snapshot.queue and console.snapshot.pane.state != "remote", 60,
                            what="a's own tabs again")
                await pilot.press("q")

        asyncio.run(run())
        placed, cleared = b.events("hold_placed"), b.events("hold_cleared")
        assert [(e["source"], e["detail"]["reason"]) for e in placed] == [("ssh", "swapping the model")], placed
        assert [e["source"] for e in cleared] == ["ssh"], cleared
        assert not a.events("hold_placed")
        probes = b.events("canary")[b_canaries:]
        assert [(e["agent"], e["source"]) for e in probes] == [("main", "ssh")], probes
        assert len(a.events("canary")) == a_canaries
        [typed] = b.events("inject")[-1:]
        assert typed["source"] == "ssh" and "hello from a" not in str(typed), typed  # length and digest only
        assert not a.events("inject") and not a.events("queue_claim")
        [claim] = b.events("queue_claim")
        assert claim["source"] == "ssh" and claim["detail"]["item"] == resolved[0].id, claim
        items = {i["id"]: i for i in json.loads(b.loom("queue", "--json").stdout)["items"]}
        assert items[resolved[0].id]["note"] == "rotated the upstream token"
    finally:
        kill_masters(a.state_dir)
