"""The agent's turn marks as each canary tick reads them (hooks/turns.turn_marks): read whole once,
then only the events written since. Whatever is written or pruned in between, what a tick sees is
what a whole read would see, for each agent; a store reopened starts afresh. An event's time need
not rise with its id (it is its file's: a slow hook writes late), and a prune goes by the time."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
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
