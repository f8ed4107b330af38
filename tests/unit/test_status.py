"""The one status model: `loom status --json` keeps its keys, and the console header, Telegram's
/status and `loom status` read the same values from it."""

from __future__ import annotations

import json

from tui_state import NOW, populate, write_config

from loomtui.context import Context
from loomtui.report import status as status_mod
from loomtui.telegram.commands import format_status
from loomtui.tui.snapshot import PaneView, header_from

# The keys `loom status --json` has printed since the first release: scripts rely on them.
KEYS = {"state_dir", "config", "pinned_session", "ledger", "supervisor", "heartbeats", "last_events", "telegram",
        "agent", "canary", "queue", "hold", "last_launch"}
# Keys added since, beside the old ones: the last relaunch and whether a canary ack witnessed it; the
# memory replica's lag (null without memory.remote).
ADDED = {"relaunch", "replica"}


def test_loom_status_json_keeps_its_keys(loom):
    data = json.loads(loom("status", "--json").stdout)
    assert set(data) == KEYS | ADDED and data["relaunch"] is None and data["replica"] is None
    # The supervisor's `stale_after` came later: this host's own rule for a beat too old, what another
    # host's `loom hosts` judges its heartbeat by.
    assert set(data["supervisor"]) == {"heartbeat_age", "pid", "stale_after"}
    assert data["supervisor"]["stale_after"] == 15.0 and set(data["telegram"]) == {"outbox", "conflict"}
    assert set(data["agent"]) >= {"tmux", "why"} and set(data["ledger"]) == {"events"}


def test_every_reader_shows_the_same_moment(tmp_path):
    config = write_config(tmp_path, socket=f"loomtest-status-{tmp_path.name[-6:]}")
    ctx = Context.load(str(config), None, environ={})
    try:
        populate(ctx)
        status = status_mod.gather(ctx, now=NOW, look=False)
        data = status.as_json()
        assert set(data) == KEYS | ADDED and data["agent"] is None
        assert data["pinned_session"] == status.pinned_session and status.pinned_session
        assert data["queue"] == status.queue and status.unresolved == status.queue["open"] + status.queue["claimed"]
        header = header_from(status, PaneView("up", "", ""), ctx.config)
        assert header.pinned == status.pinned_session
        assert header.open_items == status.unresolved
        assert header.held == (status.hold is not None)
        assert header.unsent == status.outbox["pending"] + status.outbox["failed"]
        text = format_status(status)
        assert f"pinned session: {status.pinned_session}" in text
        assert f"queue: {status.queue['open']} open, {status.queue['claimed']} claimed" in text
        assert f"ledger: {status.ledger_events} events" in text
        last = status.canary_settled
        assert last is not None and header.canary.startswith(last.result) and f"canary: {last.result}" in text
    finally:
        ctx.close()


def test_an_unwitnessed_relaunch_is_shown_as_such_until_an_ack_of_its_launch(tmp_path):
    from loomtui.canary import runs as canary_runs
    from loomtui.store import ledger

    config = write_config(tmp_path, socket=f"loomtest-status-{tmp_path.name[-6:]}")
    ctx = Context.load(str(config), None, environ={})
    try:
        populate(ctx)
        # populate's last relaunch was heard from again (an ack written before acks named their
        # launch); this one, after every ack, is a claim.
        assert status_mod.gather(ctx, now=NOW, look=False).relaunch.witnessed
        relaunch = ledger.append(ctx.store, "relaunch", source="watchdog", cause="crash",
                                 detail={"mode": "resume", "old_session": "s", "new_session": "s"}, ts=NOW - 5)
        status = status_mod.gather(ctx, now=NOW, look=False)
        claim = status.relaunch
        assert claim is not None and claim.event == relaunch.id and not claim.witnessed and status.unwitnessed
        assert "UNWITNESSED" in claim.describe(NOW) and status.as_json()["relaunch"]["witnessed"] is False
        look = status_mod.AgentLook("up", pane={"pane_pid": 1, "dead": False}, tree={"process": "present", "pid": 2},
                                    claim=claim.describe(NOW))
        assert "UNWITNESSED" in look.describe()

        run = canary_runs.insert_run(ctx, "n-witness", "canary", canary_runs.PENDING, NOW - 3, NOW + 100)
        assert canary_runs.settle_run(ctx, run, canary_runs.OK, ack_at=NOW - 2)
        status = status_mod.gather(ctx, now=NOW, look=False)
        assert status.relaunch.witnessed and not status.unwitnessed
        data = status.as_json()["relaunch"]
        assert data["witnessed"] is True and data["witness_event"] > relaunch.id
        assert "witnessed by a canary ack" in status.relaunch.describe(NOW)

        # A relaunch whose launch failed is not a claim waiting for a witness: it failed.
        again = ledger.append(ctx.store, "relaunch", source="watchdog", cause="crash", detail={"mode": "resume"})
        ledger.append(ctx.store, "launch_died", source="watchdog", cause="crash", detail={})
        status = status_mod.gather(ctx, now=NOW, look=False)
        assert status.relaunch.event == again.id and status.relaunch.failed and not status.unwitnessed
    finally:
        ctx.close()
