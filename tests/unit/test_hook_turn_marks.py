"""The agent's turn marks as each canary tick reads them (hooks/turns.turn_marks): read whole once,
then only the events written since. Whatever is written or pruned in between, what a tick sees is
what a whole read would see, for each agent; a store reopened starts afresh. An event's time need
not rise with its id (it is its file's: a slow hook writes late), and a prune goes by the time."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from loomtui.hooks import turns
from loomtui.store import hook_events
from loomtui.store.db import Store
from loomtui.timing import Instant

EVENTS = [*hook_events.TURN_EVENTS, hook_events.TOOL, "PreCompact"]
RUNS = itertools.count()


def whole(store: Store, agent: str) -> list[tuple[int, object]]:
    return [(int(r["id"]), turns._mark(r)) for r in hook_events.turn_marks(store, agent, turns.MARKS)]


def write(store: Store, agent: str, event: str, ts: float) -> None:
    with store.write() as db:
        hook_events.insert_in(db, agent, Instant(ts, ts, "boot"), event, "s1", "startup", {"message": "m"})


@pytest.fixture
def store(tmp_path):
    kept = Store.in_dir(tmp_path)
    yield kept
    kept.close()


STEPS = st.lists(st.one_of(
    st.tuples(st.just("write"), st.sampled_from(["main", "ops"]), st.sampled_from(EVENTS), st.integers(1, 100)),
    st.tuples(st.just("prune"), st.sampled_from(["main", "ops"]), st.integers(0, 100)),
    st.tuples(st.just("look"), st.sampled_from(["main", "ops"])),
), max_size=80)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(STEPS)
def test_each_look_sees_what_a_whole_read_sees(tmp_path, steps):
    place = tmp_path / f"s{next(RUNS)}"  # a store of its own for each example
    place.mkdir()
    store = Store.in_dir(place)
    try:
        for step in steps:
            if step[0] == "write":  # at any time: a newer id may have an older time
                _, agent, event, ts = step
                write(store, agent, event, float(ts))
            elif step[0] == "prune":
                hook_events.prune(store, step[1], float(step[2]))
            assert turns.turn_marks(store, step[1]) == whole(store, step[1]), step
    finally:
        store.close()


def test_more_than_a_window_since_the_last_look_keeps_the_newest(store):
    write(store, "main", "Stop", 1.0)
    assert len(turns.turn_marks(store, "main")) == 1
    for n in range(turns.MARKS + 50):
        write(store, "main", "UserPromptSubmit", 2.0 + n)
    seen = turns.turn_marks(store, "main")
    assert len(seen) == turns.MARKS and seen == whole(store, "main")


def test_the_newest_pruned_and_its_id_given_to_the_next_event(store):
    write(store, "main", "UserPromptSubmit", 10.0)
    write(store, "main", "Stop", 1.0)  # the newest id, with the oldest time
    assert [i for i, _ in turns.turn_marks(store, "main")] == [1, 2]
    hook_events.prune(store, "main", 5.0)  # forgets id 2 only
    write(store, "main", "StopFailure", 20.0)  # SQLite gives it id 2 again
    assert turns.turn_marks(store, "main") == whole(store, "main")
    assert [m.event for _, m in turns.turn_marks(store, "main")] == ["UserPromptSubmit", "StopFailure"]


def test_a_store_reopened_reads_whole_again(tmp_path):
    first = Store.in_dir(tmp_path)
    write(first, "main", "Stop", 1.0)
    assert len(turns.turn_marks(first, "main")) == 1
    first.close()
    again = Store.in_dir(tmp_path)
    try:
        write(again, "main", "Stop", 2.0)
        assert [i for i, _ in turns.turn_marks(again, "main")] == [1, 2]
    finally:
        again.close()


@pytest.mark.parametrize("agent", ["main", "ops"])
def test_no_events_is_no_marks_and_then_the_first(store, agent):
    assert turns.turn_marks(store, agent) == []
    write(store, agent, "SessionStart", 1.0)
    assert turns.turn_marks(store, agent) == whole(store, agent) and len(whole(store, agent)) == 1


# -- turns.read: the turns made again only when what they are made of changed ---------------------

READ_STEPS = st.lists(st.one_of(
    st.tuples(st.just("write"), st.sampled_from(EVENTS), st.integers(1, 100)),
    st.tuples(st.just("prune"), st.integers(0, 100)),
    st.tuples(st.just("launch"), st.integers(1, 100)),
    st.tuples(st.just("ack"), st.integers(1, 100), st.integers(0, 30)),
    st.tuples(st.just("look"),),
), max_size=60)


def fresh_read(ctx) -> list:
    """What turns.read gives with nothing remembered from an earlier read."""
    turns._MADE.pop(ctx.store, None)
    turns._KEPT.pop(ctx.store, None)
    return turns.read(ctx)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(READ_STEPS)
# Only the latest tool use changed since the last read (no new turn mark): the open turn's last sign of life.
@example([("write", "UserPromptSubmit", 50), ("look",), ("write", "PostToolUse", 60)])
# Only an ack came: the probe that began the open turn closes it.
@example([("write", "UserPromptSubmit", 50), ("look",), ("ack", 45, 15)])
# Only a launch: the turn before it ended with the process.
@example([("write", "UserPromptSubmit", 50), ("look",), ("launch", 70)])
def test_each_read_gives_the_turns_a_read_from_nothing_gives(tmp_path, steps):
    from loomtui.agent.launches import LAUNCH_KEY
    from loomtui.agent.records import LaunchRecord
    from loomtui.canary.rules import OK, PENDING
    from loomtui.canary.runs import insert_run, settle_run
    from loomtui.context import Context

    place = tmp_path / f"r{next(RUNS)}"
    place.mkdir()
    config = place / "config.toml"
    config.write_text(f'state_dir = "{place / "state"}"\n[agent]\n'
                      'fresh_command = "claude --settings {hook_settings} --session-id {session_id}"\n'
                      'resume_command = "claude --settings {hook_settings} --resume {session_id}"\n')
    ctx = Context.load(str(config), None, environ={})
    twin = ctx.clone()  # a second connection: its memo is its own
    try:
        for step in steps:
            if step[0] == "write":
                write(ctx.store, ctx.agent, step[1], float(step[2]))
            elif step[0] == "prune":
                hook_events.prune(ctx.store, ctx.agent, float(step[1]))
            elif step[0] == "launch":
                at = float(step[1])
                with ctx.store.write() as db:
                    ctx.store.set_meta(ctx.store.agent_key(LAUNCH_KEY),
                                       LaunchRecord(at, at, "boot", "fresh", "s1", "exit").to_json(), db)
            elif step[0] == "ack":
                sent = float(step[1])
                run = insert_run(ctx, f"n{next(RUNS)}", "canary", PENDING, sent, sent + 60,
                                 sent=Instant(sent, sent, "boot"))
                settle_run(ctx, run, OK, ack_at=sent + step[2])
            seen = turns.read(twin)
            assert seen == fresh_read(ctx), step
    finally:
        twin.close()
        ctx.close()
