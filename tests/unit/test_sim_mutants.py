"""The simulator can fail: each bug below, planted in Loom's real code where the daemon calls it
(the simulator runs that code), is caught by an invariant, with the seed, the step and a trace,
and the same seed replays the same violation at the same step."""

from __future__ import annotations

from dataclasses import replace

import pytest

from loomtui import actions
from loomtui.agent import policy, recovery, watchdog_rules
from loomtui.agent import watchdog as watchdog_loop
from loomtui.canary import loop as canary_loop
from loomtui.canary import rules as canary_rules
from loomtui.sentinel import queue_rules
from loomtui.sentinel import tick as sentinel_tick
from loomtui.sim.report import text
from loomtui.sim.scenarios import SCENARIOS, run_scenario
from loomtui.states import GONE, UNKNOWN

real_decide = policy.decide
real_assess = watchdog_rules.assess
real_queue_decide = queue_rules.decide


def scenario(name: str, seed: int = 1) -> dict:
    return run_scenario(next(s for s in SCENARIOS if s.name == name), seed)


def assert_caught(run: dict, invariant: str, *, profile: str, days: float, seed: int) -> None:
    v = run["violation"]
    assert v is not None, "the broken policy went unnoticed"
    assert v["invariant"] == invariant, v
    assert v["trace"] and all(line.startswith("step ") for line in v["trace"])
    shown = "\n".join(text(run, profile=profile, days=days, config=None))
    assert f"VIOLATION {invariant} at step {v['step']}" in shown
    assert f"replay: loom sim --profile {profile} --seed {seed}" in shown
    assert f"seed {seed}:" in shown


def recycle_on_one_miss(runs, launch_seq, misses_to_recycle):
    return canary_rules.consecutive_misses(runs, launch_seq) >= 1


def test_recycling_on_one_miss_is_caught(monkeypatch):
    monkeypatch.setattr(canary_loop, "should_recycle", recycle_on_one_miss)  # where the canary loop calls it
    first = scenario("confident_false_detector")
    assert_caught(first["run"], "definitive_signal", profile="incident", days=0.5, seed=1)
    assert "canary_failed" in first["run"]["violation"]["message"]
    assert first["run"]["false_recycles"] == 1
    again = scenario("confident_false_detector")
    assert again["run"]["violation"] == first["run"]["violation"]  # replayable: same step, same trace


def test_a_ceiling_that_lets_two_more_through_is_caught(monkeypatch):
    def loose_ceiling(s, limits, now):
        return real_decide(s, replace(limits, ceiling_count=limits.ceiling_count + 2), now)

    monkeypatch.setattr(policy, "decide", loose_ceiling)
    result = scenario("recovery_storm")
    assert_caught(result["run"], "ceiling", profile="incident", days=10 / 24, seed=1)
    assert "ceiling 6" in result["run"]["violation"]["message"]


def test_resuming_after_canary_failed_is_caught(monkeypatch):
    # The documented incident: a fuse window (15m) shorter than the canary period (23m) and no
    # memory of which session was recycled for canary_failed revive the same wedge again.
    def forgets_wedges(s, limits, now):
        return real_decide(replace(s, canary_recycled=frozenset()), limits, now)

    monkeypatch.setattr(policy, "decide", forgets_wedges)
    result = scenario("correct_and_wrong_together")
    assert_caught(result["run"], "no_resume_after_canary_failed", profile="incident", days=8 / 24, seed=1)


def ambiguous_is_gone(obs, mem, s, mono):
    if obs.tmux == UNKNOWN:
        obs = replace(obs, tmux=GONE)
    return real_assess(obs, mem, s, mono)


def test_an_ambiguous_look_taken_for_absent_is_stopped_by_the_second_look(monkeypatch):
    # The rules alone broken: the second look under recycle.lock finds tmux still unclear and
    # does nothing, as the real watchdog's still_failing does.
    monkeypatch.setattr(watchdog_loop, "assess", ambiguous_is_gone)
    result = scenario("confident_false_detector")
    assert result["passed"], result["outcome"]
    assert result["run"]["resolved_on_second_look"] >= 1


def test_treating_an_ambiguous_look_as_absent_is_caught(monkeypatch):
    monkeypatch.setattr(watchdog_loop, "assess", ambiguous_is_gone)
    monkeypatch.setattr(watchdog_loop.Watchdog, "still_failing", lambda self, cause, pid: True)
    result = scenario("confident_false_detector")
    assert_caught(result["run"], "definitive_signal", profile="incident", days=0.5, seed=1)
    assert "tmux_gone" in result["run"]["violation"]["message"]


def test_a_relaunch_history_read_as_empty_is_caught(monkeypatch):
    # The audit's headline: with no history the fuse, the ceiling and the backoff are all off.
    monkeypatch.setattr(recovery, "history", lambda ctx, *args, **kwargs: ())
    result = scenario("recovery_storm")
    assert_caught(result["run"], "ceiling", profile="incident", days=10 / 24, seed=1)


def test_a_canary_loop_that_passes_one_as_its_miss_threshold_is_caught(monkeypatch):
    real = canary_rules.should_recycle
    monkeypatch.setattr(canary_loop, "should_recycle", lambda runs, launch_seq, misses: real(runs, launch_seq, 1))
    result = scenario("confident_false_detector")
    assert_caught(result["run"], "definitive_signal", profile="incident", days=0.5, seed=1)


def test_forgetting_the_hold_is_caught(monkeypatch):
    # Both guards forget it: the admission of automatic actions (actions.admit) and the policy.
    def forgets_hold(s, limits, now):
        return real_decide(replace(s, held=False), limits, now)

    monkeypatch.setattr(policy, "decide", forgets_hold)
    monkeypatch.setattr(actions, "admit", lambda *args, **kwargs: None)
    result = scenario("recovery_storm")
    assert_caught(result["run"], "escalate_once_and_hold", profile="incident", days=10 / 24, seed=1)


def test_giving_up_silently_is_caught(monkeypatch):
    def holds_without_a_word(s, limits, now):
        d = real_decide(s, limits, now)
        return replace(d, escalate=False) if d.action == policy.HOLD else d

    monkeypatch.setattr(policy, "decide", holds_without_a_word)
    result = scenario("recovery_storm")
    # Held without a word: the last relaunch is neither witnessed nor followed by an escalation.
    assert_caught(result["run"], "relaunch_witnessed", profile="incident", days=10 / 24, seed=1)


def test_a_queue_without_a_backstop_is_caught(monkeypatch):
    def never_escalates(item, cfg, now, **kwargs):
        return [a for a in real_queue_decide(item, cfg, now, **kwargs) if not isinstance(a, queue_rules.Escalate)]

    monkeypatch.setattr(sentinel_tick, "decide", never_escalates)  # where the sentinel's tick calls it
    result = scenario("supervisor_blind_spot")
    assert_caught(result["run"], "queue_backstop", profile="incident", days=8 / 24, seed=1)


@pytest.mark.parametrize("name", [s.name for s in SCENARIOS])
def test_the_real_rules_pass_every_scenario_the_mutants_fail(name):
    result = scenario(name)
    assert result["passed"], result["outcome"]
