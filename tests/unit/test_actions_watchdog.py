"""The watchdog's hands are the actions module's: a foreign poller's reap, the socket repair and an
operator alert, reached from a trigger other than the watchdog, are recorded with that trigger as
their source, and admitted as its own (an operator's reap is never refused by a hold). Also what
the actions record without a pane to type into: the socket repair (a real process standing for
the recorded tmux server, sent a real SIGUSR1), a claim with the agent's session, the operator's
triggers counted as fired for their loop, and what a release says of a timed hold.
Real processes, a real store."""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import sys

import pytest

from loomtui import actions, clock
from loomtui.actors import Actor
from loomtui.agent import holds, launches, proctree
from loomtui.context import Context
from loomtui.sentinel import queue
from loomtui.sentinel.queue_rules import Failure
from loomtui.store import counters, ledger, outbox


@pytest.fixture
def ctx(tmp_path):
    c = Context.load(None, str(tmp_path / "state"), environ={})
    yield c
    c.close()


@pytest.fixture
def poller():
    proc = subprocess.Popen([sys.executable, "-c", "import time; print(1, flush=True); time.sleep(600)",
                             "fake-poller"], stdout=subprocess.PIPE)
    proc.stdout.readline()  # running, not just forked
    yield proc
    proc.kill()
    proc.wait()


def test_a_reap_from_the_cli_is_recorded_as_the_clis_and_a_hold_refuses_only_the_watchdogs(ctx, poller):
    assert actions.reap_foreign(ctx, poller.pid, source="cli", still_foreign=lambda: False) is None
    actions.hold(ctx, "deploying", None, source="cli")
    refused = actions.reap_foreign(ctx, poller.pid, source="watchdog")
    assert refused == f"foreign poller {poller.pid} left alone: a hold is in force"
    assert poller.poll() is None and ledger.tail(ctx.store, 20, kinds=["foreign_poller_reaped"]) == []
    assert actions.reap_foreign(ctx, poller.pid, source="cli") == f"reaped foreign poller {poller.pid}"
    assert poller.wait(10) == -signal.SIGTERM
    [event] = ledger.tail(ctx.store, 20, kinds=["foreign_poller_reaped"])
    assert event.source == "cli" and event.detail["pid"] == poller.pid and event.detail["ok"]
    assert event.detail["name"] != "?"
    [refusal] = ledger.tail(ctx.store, 20, kinds=["refused"])
    assert refusal.source == "watchdog" and refusal.detail["action"] == "reap"
    fired = [c for c in counters.read(ctx.store, "loom_fire_total") if c.labels == {"loop": "watchdog", "source": "cli"}]
    assert [c.value for c in fired] == [1.0]


def test_an_alert_from_the_cli_is_the_clis_and_each_goes_out_once(ctx):
    assert actions.alert(ctx, "disk full", source="cli") == "operator alerted: disk full"
    actions.alert(ctx, "disk full", source="cli")
    events = ledger.tail(ctx.store, 20, kinds=["operator_alert"])
    assert [(e.source, e.detail["note"]) for e in events] == [("cli", "disk full")] * 2
    # One agent: no name before it; the alert's own event, the ledger's head, goes with it.
    assert [(m.text, m.dedupe_key) for m in outbox.pending(ctx.store)] == [
        (f"Loom: disk full ledger {e.id}:{e.hash}", f"alert-{e.id}") for e in events]


def test_no_socket_repair_without_the_recorded_tmux_server(ctx):
    assert actions.repair_socket(ctx, source="cli") == "repair_socket: the tmux server is no longer running"
    assert ledger.tail(ctx.store, 20, kinds=["tmux_socket_repair"]) == []


T0 = 1_800_000_000.0
# Stands for the tmux server: says when it got SIGUSR1 (what makes a tmux server recreate its socket).
SERVER = ("import signal, sys, time\n"
          "signal.signal(signal.SIGUSR1, lambda *a: (print('usr1', flush=True)))\n"
          "print('up', flush=True)\n"
          "time.sleep(600)\n")


@pytest.fixture
def server():
    proc = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"  # its handler is in place
    yield proc
    proc.kill()
    proc.wait()


def record_server(ctx, pid, started):
    ctx.store.set_meta(ctx.store.agent_key(launches.PROCS_KEY),
                       json.dumps({"pane_pid": None, "pane_started": None, "server_pid": pid, "server_started": started}))


def fired(ctx):
    return {tuple(sorted(c.labels.items())): c.value for c in counters.read(ctx.store, "loom_fire_total")}


def test_the_socket_repair_signals_the_recorded_server_and_records_it(ctx, server):
    record_server(ctx, server.pid, proctree.start_time(server.pid))
    assert actions.repair_socket(ctx, source="cli") == f"asked tmux server {server.pid} to recreate its socket"
    assert server.stdout.readline().strip() == "usr1"
    [event] = ledger.tail(ctx.store, 10, kinds=["tmux_socket_repair"])
    assert (event.source, event.detail) == ("cli", {"server_pid": server.pid})
    assert fired(ctx) == {(("loop", "watchdog"), ("source", "cli")): 1.0}
    assert [c.name for c in counters.read(ctx.store, "loom_fire_total")] == ["loom_fire_total"]
    actions.repair_socket(ctx, source="watchdog")  # the loop's own: counted by the loop, not here
    assert server.stdout.readline().strip() == "usr1"
    assert fired(ctx) == {(("loop", "watchdog"), ("source", "cli")): 1.0}


def test_no_repair_of_a_process_that_only_has_the_recorded_pid(ctx, server):
    record_server(ctx, server.pid, proctree.start_time(server.pid) - 1000)  # the pid reused since
    assert actions.repair_socket(ctx, source="cli") == "repair_socket: the tmux server is no longer running"
    assert ledger.tail(ctx.store, 10, kinds=["tmux_socket_repair"]) == []
    server.kill()
    server.wait()
    assert server.stdout.read() == ""  # it never got the signal


def test_a_hold_refuses_the_watchdogs_reap_and_records_its_cause(ctx, server):
    actions.hold(ctx, "deploying", None, source="cli")
    assert actions.reap_foreign(ctx, server.pid, source="watchdog") == (
        f"foreign poller {server.pid} left alone: a hold is in force")
    [refusal] = ledger.tail(ctx.store, 10, kinds=["refused"])
    assert (refusal.source, refusal.cause, refusal.detail["action"]) == ("watchdog", "foreign_poller", "reap")
    assert server.poll() is None and fired(ctx) == {}
    actions.release(ctx, source="cli")
    sleeper = subprocess.Popen(["sleep", "600"])  # named unlike this test's own process
    try:
        assert actions.reap_foreign(ctx, sleeper.pid, source="watchdog", grace=10.0) == (
            f"reaped foreign poller {sleeper.pid}")
        assert sleeper.wait(10) == -signal.SIGTERM
    finally:
        sleeper.kill()
        sleeper.wait()
    [reaped] = ledger.tail(ctx.store, 10, kinds=["foreign_poller_reaped"])
    assert (reaped.source, reaped.detail) == ("watchdog", {"pid": sleeper.pid, "name": "sleep", "ok": True})


def test_a_claim_carries_the_agents_session_and_counts_as_the_sentinels(ctx):
    with ctx.store.write() as db:
        item = queue.insert(db, Failure("backup", "exit", "exit code 1", "run 1 exited 1"), "/dev/null", T0)
    claimed, changed = actions.resolve(ctx, item.id, "fixed the script", source="cli", session_id="s-7")
    assert changed and claimed.claimed_session == "s-7" and claimed.claimed_by == "cli"
    [claim] = ledger.tail(ctx.store, 10, kinds=["queue_claim"])
    assert claim.detail["session"] == "s-7" and claim.detail["item"] == item.id
    assert fired(ctx) == {(("loop", "sentinel"), ("source", "cli")): 1.0}


def test_releasing_a_timed_hold_says_what_was_left_and_a_lapsed_one_is_recorded_as_expired(ctx):
    actions.hold(ctx, "deploying", 3600.0, source="cli")
    change = actions.release(ctx, source="tui")
    assert change.released and 3500.0 < change.as_json()["hold"]["remaining"] <= 3600.0
    an_hour_ago = clock.wall() - 3600.0
    holds.place(ctx, by="operator", reason="lapsed", until=an_hour_ago + 60, source="cli", now=an_hour_ago)
    change = actions.release(ctx, source="tui")
    assert change.action == "none" and change.describe() == "nothing was held"
    cleared = ledger.tail(ctx.store, 10, kinds=["hold_cleared"])
    assert [(e.source, e.detail["how"], e.detail["reason"]) for e in cleared] == [
        ("tui", "release", "deploying"), ("tui", "expired", "lapsed")]


def test_a_refused_nudge_typed_nothing_and_a_refused_dialog_press_pressed_nothing(ctx):
    actions.hold(ctx, "deploying", None, source="cli")
    result = actions.nudge(ctx, "item 1", source="sentinel", detail={"item": 1})
    assert (result.ok, result.length, result.digest, result.event_id) == (False, 0, "", 0)
    pressed = actions.dismiss_modal(ctx, ["Enter"], source="watchdog", detail={"match": "trust"})
    assert (pressed.ok, pressed.length, pressed.digest, pressed.event_id, pressed.refused) == (False, 0, "", 0, "hold")
    assert pressed.error == "refused: held by the operator: deploying (until released)"


def test_a_line_typed_where_no_pane_listens_is_recorded_with_who_typed_it(tmp_path):
    config = tmp_path / "config.toml"  # typed the real way, to a tmux socket no server listens on
    config.write_text(f'[agent]\ntmux_socket = "loomtest-nopane-{secrets.token_hex(4)}"\n')
    ctx = Context.load(str(config), str(tmp_path / "state"), environ={})
    try:
        asked = actions.inject(ctx, "hello", source="telegram", detail={"chat": 7})
        mine = actions.inject(ctx, "mine", source="cli", actor=Actor("agent", session="s-1", agent="main"))
        nudged = actions.inject(ctx, "item 1", source="sentinel", kind="queue_nudge", detail={"item": 1})
        assert not (asked.ok or mine.ok or nudged.ok)
        events = {e.id: e for e in ledger.tail(ctx.store, 20)}
        first, second, third = events[asked.event_id], events[mine.event_id], events[nudged.event_id]
        assert (first.kind, first.source, first.detail["chat"], first.detail["actor"]) == ("inject", "telegram", 7,
                                                                                            "telegram")
        assert (second.kind, second.detail["actor"], second.detail["actor_session"]) == ("inject", "agent", "s-1")
        assert (third.kind, third.detail["item"], "actor" in third.detail) == ("queue_nudge", 1, False)
    finally:
        ctx.close()
