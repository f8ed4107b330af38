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


def test_loom_status_json_keeps_its_keys(loom):
    data = json.loads(loom("status", "--json").stdout)
    assert set(data) == KEYS
    assert set(data["supervisor"]) == {"heartbeat_age", "pid"} and set(data["telegram"]) == {"outbox", "conflict"}
    assert set(data["agent"]) >= {"tmux", "why"} and set(data["ledger"]) == {"events"}


def test_every_reader_shows_the_same_moment(tmp_path):
    config = write_config(tmp_path, socket=f"loomtest-status-{tmp_path.name[-6:]}")
    ctx = Context.load(str(config), None, environ={})
    try:
        populate(ctx)
        status = status_mod.gather(ctx, now=NOW, look=False)
        data = status.as_json()
        assert set(data) == KEYS and data["agent"] is None
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
