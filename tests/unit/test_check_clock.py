"""`loom check` times an unwitnessed relaunch on the monotonic clock the relaunch's ledger event
kept, within a boot: by wall time, a clock stepped back an hour hid a relaunch unwitnessed past
its bound, and one stepped ahead warned at once."""

from __future__ import annotations

import time

from loomtui import clock
from loomtui.store import ledger
from loomtui.store.db import Store


def test_a_relaunch_unwitnessed_for_twenty_minutes_warns_whatever_the_wall_clock_says(state_dir, loom):
    state_dir.mkdir(mode=0o700)
    store = Store.in_dir(state_dir)
    try:
        # Recorded 20 minutes ago by the monotonic clock, "just now" by a wall clock stepped back since.
        ledger.append(store, "relaunch", source="watchdog", cause="crash", ts=time.time(),
                      detail={"mode": "resume", "mono": clock.monotonic() - 1200, "boot": clock.boot_id()})
    finally:
        store.close()
    result = loom("check")
    assert "relaunched 20m ago and no canary has acked since" in result.stdout, result.stdout + result.stderr


def test_a_heartbeat_row_that_is_no_json_is_a_verdict_not_a_traceback(state_dir, loom):
    # The store is writable by the agent's user: a beat whose detail is not JSON made `loom check`
    # die with a traceback and exit 1 (WARNING to a monitor), and `loom status` with it.
    state_dir.mkdir(mode=0o700)
    store = Store.in_dir(state_dir)
    try:
        with store.write() as db:
            db.execute("INSERT INTO heartbeats(name, ts, pid, detail) VALUES ('supervisor', ?, 1, '{not json')",
                       (time.time(),))
    finally:
        store.close()
    result = loom("check")
    assert "Traceback" not in result.stderr and result.returncode in (0, 1, 2, 3), result.stdout + result.stderr
    assert result.stdout.startswith("LOOM ") and len(result.stdout.splitlines()) == 1, result.stdout
    status = loom("status")
    assert status.returncode == 0 and "Traceback" not in status.stderr, status.stdout + status.stderr
