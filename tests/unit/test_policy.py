"""The recovery policy: every cause, the fuse, the ceiling, backoff, holds, and clock jumps."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loomtui.agent.policy import (
    CAUSES,
    FRESH,
    HOLD,
    OPERATOR,
    RELAUNCH,
    RESUME,
    WAIT,
    Limits,
    Relaunch,
    Situation,
    age,
    backoff,
    counted,
    decide,
    limits_from,
)
from loomtui.timing import Instant
from loomtui.config import parse_config

L = Limits(fuse_window=900, fuse_count=3, ceiling_window=3600, ceiling_count=6, backoff_base=5, backoff_max=300)
BOOT = "boot-a"


def at(t: float) -> Instant:
    return Instant(wall=1_000_000 + t, mono=t, boot=BOOT)


def r(t: float, cause: str = "crash", mode: str = RESUME, old: str = "s1", new: str = "s1") -> Relaunch:
    return Relaunch(at(t), cause, mode, old, new)


@pytest.mark.parametrize(
    "cause,mode",
    [("crash", RESUME), ("exit", RESUME), ("tmux_gone", RESUME), ("poller_missing", RESUME), ("canary_failed", RESUME),
     ("preventive", FRESH), ("resume_failed", FRESH), ("operator_resume", RESUME), ("operator_fresh", FRESH)],
)
def test_cause_table(cause, mode):
    d = decide(Situation(cause, "s1"), L, at(10_000))
    assert (d.action, d.mode) == (RELAUNCH, mode)
    assert d.reasons


def test_every_cause_is_in_the_table():
    assert set(CAUSES) == {"crash", "exit", "tmux_gone", "poller_missing", "canary_failed", "preventive",
                           "resume_failed", "operator_resume", "operator_fresh"}
    with pytest.raises(ValueError):
        decide(Situation("bogus", "s1"), L, at(0))


def test_no_pinned_session_goes_fresh():
    assert decide(Situation("crash", None), L, at(0)).mode == FRESH


def test_a_session_recycled_for_canary_failed_goes_fresh_next_time():
    s = Situation("canary_failed", "s1", (r(0, "canary_failed"),), canary_recycled=frozenset({"s1"}))
    d = decide(s, L, at(2000))
    assert d.mode == FRESH and "canary_failed" in " ".join(d.reasons)
    # ... and for any other automatic cause too: it is never resumed again.
    assert decide(Situation("crash", "s1", (r(0, "canary_failed"),), canary_recycled=frozenset({"s1"})),
                  L, at(2000)).mode == FRESH
    # A different pinned session is resumed as usual.
    assert decide(Situation("canary_failed", "s2", canary_recycled=frozenset({"s1"})), L, at(2000)).mode == RESUME


def test_fuse_forces_fresh():
    history = (r(0), r(100), r(200))
    d = decide(Situation("crash", "s1", history), L, at(800))
    assert d.action == RELAUNCH and d.mode == FRESH and "fuse" in " ".join(d.reasons)
    # Outside the fuse window the same history resumes.
    assert decide(Situation("crash", "s1", history), L, at(1200)).mode == RESUME


def test_backoff_grows_and_caps():
    assert [backoff(n, L.backoff_base, L.backoff_max) for n in range(0, 9)] == [0, 5, 10, 20, 40, 80, 160, 300, 300]
    d = decide(Situation("crash", "s1", (r(0),)), L, at(3))
    assert d.action == WAIT and d.wait == pytest.approx(2)
    assert decide(Situation("crash", "s1", (r(0),)), L, at(5)).action == RELAUNCH
    d = decide(Situation("crash", "s1", (r(0), r(10))), L, at(15))
    assert d.action == WAIT and d.wait == pytest.approx(5)


def test_ceiling_holds_and_escalates():
    history = tuple(r(t) for t in (0, 500, 1000, 1500, 2000, 2500))
    d = decide(Situation("crash", "s1", history), L, at(3000))
    assert d.action == HOLD and d.escalate
    held = decide(Situation("crash", "s1", history, held=True), L, at(3000))
    assert held.action == HOLD and not held.escalate
    # Even long after, a hold stays until an operator acts.
    assert decide(Situation("crash", "s1", (), held=True), L, at(99_999)).action == HOLD


@pytest.mark.parametrize("cause", OPERATOR)
def test_operator_always_acts_and_starts_a_new_budget(cause):
    history = tuple(r(t) for t in (0, 500, 1000, 1500, 2000, 2500))
    d = decide(Situation(cause, "s1", history, held=True), L, at(2600))
    assert d.action == RELAUNCH
    after = history + (r(2600, cause),)
    assert decide(Situation("crash", "s1", after), L, at(2700)).action == RELAUNCH


def test_clock_jumps_change_nothing_on_one_boot():
    history = (r(0), r(100), r(200))
    base = decide(Situation("crash", "s1", history), L, at(800))
    for jump in (-86400, -3600, 3600, 86400 * 30):
        now = Instant(at(800).wall + jump, 800, BOOT)
        assert decide(Situation("crash", "s1", history), L, now) == base


def test_across_boots_wall_time_is_used_and_the_future_counts_as_now():
    old_boot = Relaunch(Instant(1000.0, 5.0, "boot-old"), "crash", RESUME, "s1", "s1")
    assert age(old_boot.at, Instant(1100.0, 1.0, "boot-new")) == 100
    assert age(old_boot.at, Instant(900.0, 1.0, "boot-new")) == 0  # clock went back: counts as just now


# -- properties -------------------------------------------------------------------------------

AUTO = [c for c in CAUSES if c not in OPERATOR]


@st.composite
def failure_runs(draw):
    """A random run: failures at random gaps, sometimes an operator action in between."""
    steps = draw(st.lists(st.tuples(st.floats(0, 2000), st.sampled_from(list(CAUSES))), min_size=1, max_size=60))
    return steps


def simulate(steps, limits=L):
    """Drive the policy the way the daemon does; return every relaunch it made."""
    history: list[Relaunch] = []
    canary = set()
    pinned = "s0"
    held = False
    t = 0.0
    counter = 0
    for gap, cause in steps:
        t += gap
        d = decide(Situation(cause, pinned, tuple(history), held, frozenset(canary)), limits, at(t))
        if d.action == HOLD:
            held = True
        if d.action != RELAUNCH:
            continue
        if cause in OPERATOR:
            held = False
        if cause == "canary_failed":
            canary.add(pinned)
        new = pinned if d.mode == RESUME else f"s{(counter := counter + 1)}"
        history.append(Relaunch(at(t), cause, d.mode, pinned, new))
        pinned = new
    return history


@pytest.mark.incident("recovery_storm")
@settings(max_examples=300, deadline=None)
@given(failure_runs())
def test_automatic_relaunches_in_any_window_never_exceed_the_ceiling(steps):
    history = simulate(steps)
    # Split at operator actions (each starts a new budget); inside each stretch, any ceiling window
    # holds at most ceiling_count automatic relaunches.
    stretches: list[list[Relaunch]] = [[]]
    for h in history:
        if h.automatic:
            stretches[-1].append(h)
        else:
            stretches.append([])
    for stretch in stretches:
        for i, first in enumerate(stretch):
            window = [h for h in stretch[i:] if h.at.mono - first.at.mono < L.ceiling_window]
            assert len(window) <= L.ceiling_count


@pytest.mark.incident("correct_and_wrong_together")
@settings(max_examples=300, deadline=None)
@given(failure_runs())
def test_a_session_recycled_for_canary_failed_is_never_resumed_again(steps):
    history = simulate(steps)
    recycled = set()
    for h in history:
        if h.automatic and h.mode == RESUME:
            assert h.old_session not in recycled
        if h.cause == "canary_failed":
            recycled.add(h.old_session)


@settings(max_examples=300, deadline=None)
@given(failure_runs())
def test_nothing_relaunches_inside_backoff_or_while_held(steps):
    history: list[Relaunch] = []
    held = False
    t = 0.0
    for gap, cause in steps:
        t += gap
        d = decide(Situation(cause, "s1", tuple(history), held), L, at(t))
        if held and cause not in OPERATOR:
            assert d.action == HOLD
        if d.action == RELAUNCH and cause not in OPERATOR:
            last_op = max((i for i, h in enumerate(history) if not h.automatic), default=-1)
            since_op = [h for h in history[last_op + 1:]]
            if since_op:
                recent = [h for h in since_op if t - h.at.mono < L.ceiling_window]
                if recent:
                    assert t - max(h.at.mono for h in recent) >= backoff(len(recent), L.backoff_base, L.backoff_max) - 1e-9
        if d.action == HOLD:
            held = True
        if d.action == RELAUNCH:
            if cause in OPERATOR:
                held = False
            history.append(Relaunch(at(t), cause, d.mode, "s1", "s1"))


def test_an_operator_relaunch_dated_ahead_from_another_boot_starts_no_budget_after_later_ones():
    # The operator relaunched on a boot whose wall clock ran hours ahead; this boot's clock is right
    # (or a clock with no battery came back behind) and the agent crashes over and over. Sorted by
    # age the operator's relaunch came last and cleared the eight crashes after it.
    now = Instant(1_000_000.0, 5_000.0, "boot-new")
    operator = Relaunch(Instant(1_000_000 + 6 * 3600, None, "boot-old"), "operator_resume", RESUME, "s1", "s1")
    crashes = tuple(Relaunch(Instant(1_000_000 - 60 * i, 5_000.0 - 60 * i, "boot-new"), "crash", RESUME, "s1", "s1")
                    for i in range(8, 0, -1))
    assert len(counted((operator, *crashes), L.ceiling_window, now)) == 8
    d = decide(Situation("crash", "s1", (operator, *crashes)), L, now)
    assert (d.action, d.escalate) == (HOLD, True)


def test_a_future_dated_relaunch_counts_but_cannot_hold_off_forever():
    # Another boot (no shared monotonic clock) and a wall clock that went back two hours.
    future = Relaunch(Instant(1_000_000 + 7200, None, "boot-old"), "crash", RESUME, "s1", "s1")
    now = Instant(1_000_000, 5.0, "boot-new")
    d = decide(Situation("crash", "s1", (future,)), L, now)
    assert d.action == RELAUNCH
    six = tuple(Relaunch(Instant(1_000_000 + 7200 + i, None, "boot-old"), "crash", RESUME, "s1", "s1")
                for i in range(6))
    assert decide(Situation("crash", "s1", six), L, now).action == HOLD  # the ceiling still holds


def test_every_decision_says_why_in_words():
    assert decide(Situation("operator_fresh", "s1"), L, at(0)).reasons == ("operator action",)
    assert decide(Situation("crash", "s1", held=True), L, at(0)).reasons == (
        "held at the ceiling until an operator acts",)
    history = tuple(r(t) for t in (0, 500, 1000, 1500, 2000, 2500))
    assert decide(Situation("crash", "s1", history), L, at(3000)).reasons == (
        "ceiling: 6 automatic relaunches within 3600s",)
    assert decide(Situation("crash", "s1", (r(0), r(10))), L, at(15)).reasons == ("backoff: 10s after relaunch 2",)
    assert decide(Situation("crash", "s1"), L, at(0)).reasons == ("crash resumes the pinned session",)
    assert decide(Situation("crash", None), L, at(0)).reasons == ("no pinned session",)
    fresh = decide(Situation("resume_failed", "s1", (r(0), r(100), r(200)), canary_recycled=frozenset({"s1"})),
                   L, at(800))
    assert fresh.reasons == ("resume_failed always starts fresh", "this session was already recycled for canary_failed",
                             "fuse: 3 automatic relaunches within 900s")
    with pytest.raises(ValueError, match="unknown cause 'bogus'"):
        decide(Situation("bogus", "s1"), L, at(0))


def test_a_relaunch_exactly_one_window_ago_is_out_of_it():
    assert counted((r(0), r(100)), 900, at(900)) == [r(100)]
    assert decide(Situation("crash", "s1", (r(0), r(100), r(200))), L, at(900)).mode == RESUME


def test_backoff_doubling_stops_growing_after_thirty_doublings():
    # Bounded so a long history cannot build an absurd number; backoff_max normally caps it far earlier.
    assert [backoff(n, 1, float("inf")) for n in (31, 32, 100)] == [2 ** 30] * 3


def test_limits_come_from_the_config_file():
    config = parse_config({"watchdog": {"fuse_window": "10m", "fuse_count": 2, "ceiling_window": "2h",
                                        "ceiling_count": 9, "backoff_base": "7s", "backoff_max": "4m"}}, "test", None)
    assert limits_from(config) == Limits(600.0, 2, 7200.0, 9, 7.0, 240.0)
