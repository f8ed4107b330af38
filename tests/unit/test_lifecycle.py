"""The agent's lifecycle stated once: the typed launch record (its stored JSON unchanged) and the
one pure function that says which state the agent is in, for `loom status`, the console and the
loops' boot-grace question."""

from __future__ import annotations

import json

import pytest

from loomtui.agent import lifecycle
from loomtui.agent.hold_rules import Hold
from loomtui.agent.records import LaunchRecord
from loomtui.timing import Instant

NOW = Instant(1_000_000.0, 500.0, "boot-a")


def test_a_launch_record_writes_the_bytes_the_relaunch_always_wrote():
    old = json.dumps({"ts": 1.5, "mono": 2.5, "boot": "b", "mode": "resume", "session_id": "s", "cause": "crash"})
    record = LaunchRecord(1.5, 2.5, "b", "resume", "s", "crash")
    assert record.to_json() == old and LaunchRecord.from_json(old) == record
    ready = record.readied(Instant(3.0, 4.0, "b"))
    assert ready.to_json() == json.dumps({**json.loads(old), "ready": {"ts": 3.0, "mono": 4.0, "boot": "b"}})
    assert LaunchRecord.from_json(ready.to_json()) == ready and ready.seen_ready
    assert ready.readied(Instant(9.0)) == ready  # the first sighting stays


def test_old_launch_records_still_read():
    bare = LaunchRecord.from_json('{"ts": 10, "mode": "fresh", "session_id": "s"}')  # before both clocks
    assert (bare.at, bare.mode, bare.cause, bare.ready) == (Instant(10.0), "fresh", "", None)
    marked = LaunchRecord.from_json('{"ts": 10, "ready": true}')  # a bare mark: ready, time unknown
    assert marked.seen_ready and marked.ready == Instant(10.0)
    assert LaunchRecord.from_json('{"ts": 10, "ready": {"ts": 12}}').ready == Instant(12.0)


def test_booting_is_inside_the_grace_and_not_yet_seen_ready():
    launched = LaunchRecord(NOW.wall - 5, NOW.mono - 5, NOW.boot)
    assert lifecycle.booting(launched, 30.0, NOW)
    assert not lifecycle.booting(launched, 5.0, NOW)  # the grace is over
    assert not lifecycle.booting(launched.readied(NOW), 30.0, NOW)
    assert not lifecycle.booting(None, 30.0, NOW)
    # Within one boot the monotonic clock decides: a wall clock stepped a day forward ends nothing.
    stepped = Instant(NOW.wall + 86400, NOW.mono, NOW.boot)
    assert lifecycle.booting(launched, 30.0, stepped)
    assert lifecycle.booting(launched, 30.0, NOW.wall)  # a bare wall time is measured by wall time


BOOTING = LaunchRecord(NOW.wall - 1, NOW.mono - 1, NOW.boot)
UP = {"tmux": "up", "process": "present"}
CEILING = Hold(NOW.wall - 60, "ceiling", "3 relaunches in 1h")
OPERATOR = Hold(NOW.wall - 60, "operator", "deploying", until=NOW.wall + 600, mono=NOW.mono - 60, boot=NOW.boot)
ENDED = Hold(NOW.wall - 700, "operator", "swap", until=NOW.wall - 100)


@pytest.mark.parametrize(("facts", "want"), [
    ({"tmux": None}, lifecycle.NOT_LOOKED),
    ({"tmux": "unknown"}, lifecycle.UNKNOWN),
    ({"tmux": "gone", "hold": CEILING}, lifecycle.GONE),
    ({**UP, "pane_dead": True, "hold": CEILING}, lifecycle.EXITED),
    ({**UP, "hold": CEILING, "launched": BOOTING}, lifecycle.HELD_CEILING),
    ({**UP, "hold": OPERATOR, "unwitnessed": True}, lifecycle.HELD_OPERATOR),
    ({**UP, "hold": ENDED}, lifecycle.RUNNING),  # a timed hold past its end holds nothing
    ({"tmux": "up", "process": "missing", "launched": BOOTING}, lifecycle.NO_PROCESS),
    ({"tmux": "up", "process": "unknown"}, lifecycle.PROCESS_UNKNOWN),
    ({"tmux": "up"}, lifecycle.PROCESS_UNKNOWN),  # no tree walked
    ({**UP, "launched": BOOTING, "unwitnessed": True}, lifecycle.BOOTING),
    ({**UP, "launched": BOOTING.readied(NOW), "unwitnessed": True}, lifecycle.UNWITNESSED),
    ({**UP, "unwitnessed": True}, lifecycle.UNWITNESSED),
    ({**UP, "launched": BOOTING}, lifecycle.BOOTING),
    (UP, lifecycle.RUNNING),
])
def test_one_state_from_the_facts_in_the_order_they_can_be_told(facts, want):
    assert lifecycle.agent_state(**facts, boot_grace=30.0, now=NOW) == want


def test_every_state_is_reachable_and_named_in_every_surface():
    from loomtui.report.status import STATE_WORDS
    from loomtui.tui.agents_view import STATE_CELLS

    assert set(STATE_WORDS) == set(lifecycle.STATES)
    assert set(STATE_CELLS) == set(lifecycle.STATES) - lifecycle.HELD  # the view shows the hold in a column
