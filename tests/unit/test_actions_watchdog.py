"""The watchdog's hands are the actions module's: a foreign poller's reap, the socket repair and an
operator alert, reached from a trigger other than the watchdog, are recorded with that trigger as
their source, and admitted as its own (an operator's reap is never refused by a hold).
Real processes, a real store."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from loomtui import actions
from loomtui.context import Context
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
    assert [m.text for m in outbox.pending(ctx.store)] == [
        f"Loom: disk full ledger {e.id}:{e.hash}" for e in events]


def test_no_socket_repair_without_the_recorded_tmux_server(ctx):
    assert actions.repair_socket(ctx, source="cli") == "repair_socket: the tmux server is no longer running"
    assert ledger.tail(ctx.store, 20, kinds=["tmux_socket_repair"]) == []
