"""Holds: the pure rules (what is active, what is refused, how it reads) and the stored record
with its ledger events, on a real store."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomtui.agent import hold_rules as rules
from loomtui.agent import holds
from loomtui.agent.hold_rules import GUARDED, Hold
from loomtui.context import Context
from loomtui.store import counters, ledger

T0 = 1_800_000_000.0
times = st.floats(min_value=0, max_value=4e9, allow_nan=False)
maybe_until = st.one_of(st.none(), times)
holds_st = st.builds(Hold, since=times, by=st.sampled_from(["ceiling", "operator"]), reason=st.text(min_size=1),
                     until=maybe_until).filter(lambda h: h.until is None or h.until > h.since)  # as Loom places them


@given(holds_st, times)
def test_a_hold_is_active_until_its_end_and_never_after(hold, now):
    assert rules.active(hold, now) == (hold.until is None or now < hold.until)
    assert rules.expired(hold, now) == (not rules.active(hold, now))
    left = rules.remaining(hold, now)
    assert (left is None) == (hold.until is None)
    assert left is None or left >= 0


@given(holds_st, times, st.sampled_from(sorted(GUARDED)), st.booleans())
def test_only_automatic_actions_are_refused_and_only_while_active(hold, now, action, automatic):
    assert rules.refuses(hold, action, automatic=automatic, now=now) == (automatic and rules.active(hold, now))
    assert not rules.refuses(None, action, automatic=True, now=now)


def test_an_unguarded_action_is_a_bug_not_a_silent_yes():
    with pytest.raises(ValueError, match="probe"):
        rules.refuses(None, "probe", automatic=True, now=T0)


@given(holds_st, st.lists(st.tuples(st.sampled_from(sorted(GUARDED)), st.sampled_from(["crash", "exit", ""]))))
def test_each_kind_of_refusal_is_noted_once(hold, refusals):
    firsts = []
    for action, cause in refusals:
        if rules.first_refusal(hold, action, cause):
            firsts.append((action, cause))
        hold = rules.noting(hold, action, cause)
    assert len(firsts) == len(set(firsts)) == len(set(refusals))
    assert Hold.from_record(json.loads(json.dumps(hold.record()))) == hold


def test_the_ceilings_old_record_reads_as_a_ceiling_hold_until_released():
    old = {"ts": T0, "cause": "crash", "reasons": ["5 relaunches in 1h"]}
    hold = Hold.from_record(old)
    assert (hold.by, hold.reason, hold.until, hold.cause) == ("ceiling", "5 relaunches in 1h", None, "crash")
    assert rules.describe(hold, T0 + 10) == "held at the ceiling: 5 relaunches in 1h (until released)"


def test_describe_says_who_why_and_time_left():
    hold = Hold(T0, "operator", "deploying", T0 + 1800)
    assert rules.describe(hold, T0 + 600) == "held by the operator: deploying (20m left)"
    quota = Hold(T0, "harness", "the model's quota is spent", None, cause="rate_limit")
    assert rules.describe(quota, T0) == "held by the harness (rate_limit): the model's quota is spent (until released)"
    agent = Hold(T0, "operator", "a long migration", None, actor="agent")
    assert rules.describe(agent, T0) == "held by the agent: a long migration (until released)"


def test_the_ceilings_oldest_records_read_whole_and_write_back_as_written():
    # The ceiling's first records had neither `by` nor `reason`: their reasons joined, or a word.
    joined = Hold.from_record({"ts": T0, "reasons": ["6 relaunches in 1h", "fuse blown"]})
    assert (joined.by, joined.reason) == ("ceiling", "6 relaunches in 1h; fuse blown")
    bare = Hold.from_record({"ts": T0})
    assert (bare.by, bare.reason, bare.since) == ("ceiling", "held at the ceiling", T0)
    assert Hold.from_record({}).since == 0.0  # no time at all: as old as can be, never a time to come
    # A `by` no Loom writes (a hand-edited record) reads as the ceiling's: the hold stays in force.
    assert Hold.from_record({"ts": T0, "by": "someone"}).by == "ceiling"
    # Written back: the ceiling's record keeps its reasons list (an older Loom reads that), an
    # operator's has none; the clocks only where they were read.
    ceiling = Hold(T0, "ceiling", "6 relaunches in 1h", mono=50.0, boot="b1").record()
    assert ceiling["reasons"] == ["6 relaunches in 1h"] and (ceiling["mono"], ceiling["boot"]) == (50.0, "b1")
    operator = Hold(T0, "operator", "deploying").record()
    assert "reasons" not in operator and "mono" not in operator and "boot" not in operator


def test_a_refusal_already_noted_leaves_the_hold_as_it_is():
    hold = rules.noting(Hold(T0, "operator", "x"), "relaunch", "crash")
    assert rules.noting(hold, "relaunch", "crash") is hold
    assert rules.noting(hold, "nudge", "queue_item").refused == ("relaunch:crash", "nudge:queue_item")


@pytest.fixture
def ctx(tmp_path):
    c = Context.load(None, str(tmp_path / "state"), environ={})
    yield c
    c.close()


def kinds(ctx):
    return [(e.kind, e.detail) for e in ledger.tail(ctx.store, 50)]


def test_place_release_and_the_ledger(ctx):
    hold = holds.place(ctx, by="operator", reason="deploying", until=T0 + 60, source="cli", now=T0)
    assert holds.current(ctx, T0 + 59) == hold and holds.current(ctx, T0 + 60) is None
    released = holds.release(ctx, source="cli", how="release", now=T0 + 5)
    assert released == hold and holds.stored(ctx) is None
    assert holds.release(ctx, source="cli", how="release", now=T0 + 6) is None
    assert [k for k, _ in kinds(ctx)] == ["hold_placed", "hold_cleared"]
    assert kinds(ctx)[1][1] == {"by": "cli", "how": "release", "held_by": "operator", "reason": "deploying",
                                "actor": "cli"}


def test_a_timed_hold_expires_once_and_a_replaced_one_is_not_expired(ctx):
    holds.place(ctx, by="operator", reason="a", until=T0 + 60, source="cli", now=T0)
    assert holds.expire(ctx, source="watchdog", now=T0 + 30) is None
    assert holds.expire(ctx, source="watchdog", now=T0 + 61) is not None
    assert holds.expire(ctx, source="canary", now=T0 + 62) is None
    assert [d.get("how") for k, d in kinds(ctx) if k == "hold_cleared"] == ["expired"]
    holds.place(ctx, by="operator", reason="b", until=None, source="cli", now=T0 + 100)
    assert holds.release(ctx, source="x", how="expired", now=T0 + 10_000) is None
    assert holds.current(ctx, T0 + 10_000).reason == "b"


def test_refusals_are_counted_every_time_and_recorded_once_per_kind(ctx):
    holds.place(ctx, by="operator", reason="deploying", until=None, source="cli", now=T0)
    for _ in range(3):
        holds.refused(ctx, action="relaunch", cause="crash", loop="watchdog", source="watchdog", now=T0 + 1)
    holds.refused(ctx, action="reap", cause="foreign_poller", loop="watchdog", source="watchdog", now=T0 + 2)
    refusals = [d for k, d in kinds(ctx) if k == "refused"]
    assert [(d["action"], d["reason"]) for d in refusals] == [("relaunch", "hold"), ("reap", "hold")]
    admitted = {tuple(sorted(c.labels.items())): c.value for c in counters.read(ctx.store, "loom_admit_total")}
    assert admitted == {(("decision", "refused"), ("loop", "watchdog"), ("reason", "hold")): 4.0}


def test_an_unreadable_record_still_holds(ctx):
    ctx.store.set_meta(holds.KEY, "{not json")
    hold = holds.current(ctx, T0)
    assert hold is not None and "unreadable" in hold.reason
    assert holds.release(ctx, source="cli", how="release", now=T0) is not None and holds.stored(ctx) is None


def test_the_tally_flushes_histograms_as_prometheus_keeps_them(ctx):
    tally = counters.Tally()
    for value in (0.001, 0.2, 3.0):
        tally.observe("loom_tick_duration_seconds", {"loop": "canary"}, value)
    tally.add("loom_fire_total", {"loop": "canary", "source": "tick"}, 3)
    tally.flush(ctx.store)
    assert tally.flush(ctx.store) == 0
    got = {(c.name, c.labels.get("le")): c.value for c in counters.read(ctx.store, "loom_")}
    assert got[("loom_tick_duration_seconds_bucket", "0.005")] == 1
    assert got[("loom_tick_duration_seconds_bucket", "0.5")] == 2
    assert got[("loom_tick_duration_seconds_bucket", "+Inf")] == 3
    assert got[("loom_tick_duration_seconds_count", None)] == 3
    assert got[("loom_tick_duration_seconds_sum", None)] == pytest.approx(3.201)
    assert got[("loom_fire_total", None)] == 3
