"""The canary loop's order as one pure rule (canary.rules.next_step), over every combination of
its facts: deaf → recover; held → nothing until it ends; a relaunch waiting for its witness → wait for
recycle.lock and the agent's readiness, then probe it; not yet due → wait that long; a relaunch
under way or a probe pending → look again soon; a probe that would be typed into an open
permission prompt → wait (its keys could answer the prompt); else probe. And the rule asks for a fact only when
the facts before it have not decided (the loop gathers lazily: some facts cost a tmux capture)."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomtui.canary.rules import ASK, FACTS, PROBE, RECOVER, WAIT, WITNESS, CanaryFacts, Step, next_step

WAITING = 0.5
NUMBERS = ("due_in", "hold_left", "grace_left")
BOOLS = [f for f in FACTS if f not in NUMBERS]


def combinations():
    for bools in itertools.product((False, True), repeat=len(BOOLS)):
        for due, hold_left, grace_left in itertools.product((0.0, -3.0, 42.0), (0.1, 5.0, math.inf), (0.0, 30.0)):
            yield CanaryFacts(WAITING, due_in=due, hold_left=hold_left, grace_left=grace_left,
                              **dict(zip(BOOLS, bools)))


ALL = list(combinations())


def lazily(full: CanaryFacts) -> tuple[Step, list[str]]:
    """What the loop does: start with nothing, gather each fact the rule asks for from `full`."""
    facts, asked = CanaryFacts(full.waiting), []
    while (step := next_step(facts)).kind == ASK:
        assert step.fact in FACTS and getattr(facts, step.fact) is None and step.fact not in asked
        asked.append(step.fact)
        facts = replace(facts, **{step.fact: getattr(full, step.fact)})
    return step, asked


def expected(f: CanaryFacts) -> Step:
    """The order, said as a table rather than as code that asks."""
    if f.misses_mean_deaf:
        return Step(RECOVER)
    if f.held:  # until it ends by itself (never sooner than WAITING), or by a release: the store
        return Step(WAIT, None if f.hold_left == math.inf else max(WAITING, f.hold_left), quiet=not f.pending)
    if f.witness_due:
        if f.recycle_locked:
            return Step(WAIT, WAITING)
        if f.ready:  # not into an open permission prompt: until it closes, looked at every period
            return Step(WAIT) if f.withheld else Step(WITNESS, WAITING)
        return Step(WAIT, max(WAITING, f.grace_left))  # only its boot grace can make it ready
    if f.due_in > 0:
        return Step(WAIT, f.due_in)
    if f.under_way or f.pending:
        return Step(WAIT, WAITING)
    return Step(WAIT) if f.withheld else Step(PROBE, WAITING)


@pytest.mark.parametrize("facts", ALL)
def test_every_combination_of_facts(facts):
    assert next_step(facts) == expected(facts)
    assert lazily(facts)[0] == next_step(facts)


# What a tick that probes asks: every fact but the witness's and the hold's.
UNHELD = [f for f in FACTS if f not in ("recycle_locked", "ready", "hold_left", "grace_left")]
HELD = ["misses_mean_deaf", "held", "hold_left", "pending"]


def test_each_outcome_and_what_was_asked_for_it():
    base = replace(CanaryFacts(WAITING, False, False, False, False, True, 0.0, False, False),
                   hold_left=math.inf, grace_left=0.0, withheld=False)
    cases = [
        ({"misses_mean_deaf": True, "held": True}, Step(RECOVER), ["misses_mean_deaf"]),
        ({"held": True, "witness_due": True}, Step(WAIT, quiet=True), HELD),
        ({"held": True, "hold_left": 600.0}, Step(WAIT, 600.0, quiet=True), HELD),
        # A probe pending under a hold (its prober gone) is settled by a look: not a quiet answer.
        ({"held": True, "pending": True}, Step(WAIT), HELD),
        ({"witness_due": True, "recycle_locked": True}, Step(WAIT, WAITING),
         ["misses_mean_deaf", "held", "witness_due", "recycle_locked"]),
        ({"witness_due": True, "ready": False}, Step(WAIT, WAITING),
         ["misses_mean_deaf", "held", "witness_due", "recycle_locked", "ready", "grace_left"]),
        ({"witness_due": True, "ready": False, "grace_left": 80.0}, Step(WAIT, 80.0),
         ["misses_mean_deaf", "held", "witness_due", "recycle_locked", "ready", "grace_left"]),
        # A witness goes out whatever the schedule, a relaunch's boot or a pending probe say.
        ({"witness_due": True, "due_in": 99.0, "under_way": True, "pending": True}, Step(WITNESS, WAITING),
         ["misses_mean_deaf", "held", "witness_due", "recycle_locked", "ready", "withheld"]),
        # ... but not into a permission prompt the new process opened (a hold had kept it back).
        ({"witness_due": True, "withheld": True}, Step(WAIT),
         ["misses_mean_deaf", "held", "witness_due", "recycle_locked", "ready", "withheld"]),
        ({"due_in": 12.5, "under_way": True}, Step(WAIT, 12.5), ["misses_mean_deaf", "held", "witness_due", "due_in"]),
        ({"under_way": True}, Step(WAIT, WAITING), ["misses_mean_deaf", "held", "witness_due", "due_in", "under_way"]),
        ({"pending": True}, Step(WAIT, WAITING), [f for f in UNHELD if f != "withheld"]),
        ({"withheld": True}, Step(WAIT), UNHELD),
        ({}, Step(PROBE, WAITING), UNHELD),
    ]
    for change, step, asked in cases:
        assert lazily(replace(base, **change)) == (step, asked), change


def test_readiness_is_asked_only_for_a_witness_and_never_while_a_relaunch_holds_the_lock():
    for facts in ALL:
        step, asked = lazily(facts)
        if "ready" in asked:
            assert facts.witness_due and not facts.recycle_locked and not facts.held and not facts.misses_mean_deaf
        if "grace_left" in asked:
            assert "ready" in asked and not facts.ready
        if step.quiet:  # only a hold's answer rests on the store and the clock alone
            assert facts.held and not facts.pending and not facts.misses_mean_deaf and step.kind == WAIT
        assert step.kind in (RECOVER, WAIT, PROBE, WITNESS)


MAYBE = st.one_of(st.none(), st.booleans())


@given(st.builds(CanaryFacts, st.floats(0.01, 60), MAYBE, MAYBE, MAYBE, MAYBE, MAYBE,
                 st.one_of(st.none(), st.floats(-1e6, 1e6)), MAYBE, MAYBE,
                 st.one_of(st.none(), st.just(math.inf), st.floats(0, 1e6)), st.one_of(st.none(), st.floats(0, 1e6)),
                 MAYBE))
def test_any_partial_facts_either_decide_or_name_a_missing_fact(facts):
    step = next_step(facts)
    if step.kind == ASK:
        assert getattr(facts, step.fact) is None
        return
    # A decision from partial facts is the decision of every completion of them.
    for fill in (False, True):
        full = replace(facts, **{f: (0.0 if f in NUMBERS else fill) for f in FACTS if getattr(facts, f) is None})
        assert next_step(full) == step
    assert step.after is None or step.after > 0
