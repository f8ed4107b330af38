"""The simulator can fail: each bug below, planted in Loom's real code where the daemon calls it
(the simulator runs that code), is caught by an invariant, with the seed, the step and a trace,
and the same seed replays the same violation at the same step."""

from __future__ import annotations

import inspect
import sys
import textwrap
from dataclasses import replace

import pytest

from loomtui import actions
from loomtui.agent import launch, policy, recovery, watchdog_rules
from loomtui.agent import watchdog as watchdog_loop
from loomtui.canary import loop as canary_loop
from loomtui.canary import probe as _probe  # noqa: F401  (imported now: a lazy import under a mutant would keep it)
from loomtui.canary import rules as canary_rules
from loomtui.sentinel import queue_rules
from loomtui.sentinel import tick as sentinel_tick
from loomtui.sim.report import text
from loomtui.sim.scenarios import SCENARIOS, run_scenario
from loomtui.states import GONE, PRESENT, UNKNOWN

from loomtui.agent import launch
from loomtui.sim.invariants import NAMES

real_decide = policy.decide
real_assess = watchdog_rules.assess
real_queue_decide = queue_rules.decide


def plant(monkeypatch, owner, name: str, old: str, new: str) -> None:
    """Plant a bug in Loom's real code for one test: `owner.name`'s source with `old` (found once)
    made `new`, compiled in its own module's globals and put in its place, and in every module of
    Loom's that imported it by name. Test-local: the product holds no switch for it."""
    fn = getattr(owner, name)
    source = textwrap.dedent(inspect.getsource(fn))
    assert source.count(old) == 1, f"{old!r} is not found once in {name}: the mutant no longer fits the code"
    scope: dict = {}
    exec(compile(source.replace(old, new), inspect.getsourcefile(fn) or name, "exec"),  # noqa: S102
         sys.modules[fn.__module__].__dict__, scope)
    monkeypatch.setattr(owner, name, scope[name])
    for module in [m for n, m in sys.modules.items() if n.startswith("loomtui.") and m is not None]:
        if getattr(module, name, None) is fn:
            monkeypatch.setattr(module, name, scope[name])


def scenario(name: str, seed: int = 1) -> dict:
    return run_scenario(next(s for s in SCENARIOS if s.name == name), seed)


def caught_in(name: str, invariant: str) -> dict:
    """The incident scenario `name` run on seed 1, its violation `invariant` (checked as assert_caught
    does, over the scenario's own length)."""
    result = scenario(name)
    hours = next(s.hours for s in SCENARIOS if s.name == name)
    assert_caught(result["run"], invariant, profile="incident", days=hours / 24, seed=1)
    return result


def deciding(situation=lambda s: s, limits=lambda limits: limits):
    """The real policy, deciding on a situation or limits changed as given."""
    def decide(s, lims, now):
        return real_decide(situation(s), limits(lims), now)

    return decide


def assert_caught(run: dict, invariant: str, *, profile: str, days: float, seed: int) -> None:
    v = run["violation"]
    assert v is not None, "the broken policy went unnoticed"
    assert v["invariant"] == invariant, v
    assert v["trace"] and all(line.startswith("step ") for line in v["trace"])
    shown = "\n".join(text(run, profile=profile, days=days, config=None))
    assert f"VIOLATION {invariant} at step {v['step']}" in shown
    assert f"replay: loom sim --profile {profile} --seed {seed}" in shown
    assert f"seed {seed}:" in shown


def recycle_on_one_miss(runs, launch_seq, misses_to_recycle, *_fresh):
    return canary_rules.consecutive_misses(runs, launch_seq) >= 1


def test_recycling_on_one_miss_is_caught(monkeypatch):
    monkeypatch.setattr(canary_loop, "should_recycle", recycle_on_one_miss)  # where the canary loop calls it
    first = caught_in("confident_false_detector", "definitive_signal")
    assert "canary_failed" in first["run"]["violation"]["message"]
    assert first["run"]["false_recycles"] == 1
    again = scenario("confident_false_detector")
    assert again["run"]["violation"] == first["run"]["violation"]  # replayable: same step, same trace


def test_a_ceiling_that_lets_two_more_through_is_caught(monkeypatch):
    monkeypatch.setattr(policy, "decide", deciding(limits=lambda lims: replace(lims, ceiling_count=lims.ceiling_count + 2)))
    result = caught_in("recovery_storm", "ceiling")
    assert "ceiling 6" in result["run"]["violation"]["message"]


def test_resuming_after_canary_failed_is_caught(monkeypatch):
    # The documented incident: a fuse window (15m) shorter than the canary period (23m) and no
    # memory of which session was recycled for canary_failed revive the same wedge again.
    monkeypatch.setattr(policy, "decide", deciding(situation=lambda s: replace(s, canary_recycled=frozenset())))
    caught_in("correct_and_wrong_together", "no_resume_after_canary_failed")


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
    result = caught_in("confident_false_detector", "definitive_signal")
    assert "tmux_gone" in result["run"]["violation"]["message"]


def test_a_relaunch_history_read_as_empty_is_caught(monkeypatch):
    # The audit's headline: with no history the fuse, the ceiling and the backoff are all off.
    monkeypatch.setattr(recovery, "history", lambda ctx, *args, **kwargs: ())
    caught_in("recovery_storm", "fuse")  # the first of the three to go


def test_a_canary_loop_that_passes_one_as_its_miss_threshold_is_caught(monkeypatch):
    real = canary_rules.should_recycle
    monkeypatch.setattr(canary_loop, "should_recycle", lambda runs, launch_seq, misses, *fresh: real(runs, launch_seq, 1, *fresh))
    result = caught_in("confident_false_detector", "definitive_signal")


def test_forgetting_the_hold_is_caught(monkeypatch):
    # Every guard forgets it: the admission of automatic actions (actions.admit), the policy, and the
    # relaunch's own look in the transaction that records it.
    monkeypatch.setattr(policy, "decide", deciding(situation=lambda s: replace(s, held=False)))
    monkeypatch.setattr(actions, "admit", lambda *args, **kwargs: None)
    plant(monkeypatch, launch, "relaunch_locked", "hold = holds.held_in(db) if automatic else None", "hold = None")
    caught_in("recovery_storm", "escalate_once_and_hold")


def test_giving_up_silently_is_caught(monkeypatch):
    def holds_without_a_word(s, limits, now):
        d = real_decide(s, limits, now)
        return replace(d, escalate=False) if d.action == policy.HOLD else d

    monkeypatch.setattr(policy, "decide", holds_without_a_word)
    # Held without a word: the agent the last relaunch left dead is never relaunched.
    caught_in("recovery_storm", "exit_relaunched")


def test_probes_filed_under_the_wrong_launch_are_caught(monkeypatch):
    # Every probe recorded as of launch 0: none ever witnesses the relaunch it was sent for.
    from loomtui.canary import runs as canary_runs

    plant(monkeypatch, canary_runs, "insert_run", "launch_seq=launch_seq(ctx),", "launch_seq=0,")
    result = caught_in("exit_zero_is_failure", "relaunch_witnessed")


def test_a_queue_without_a_backstop_is_caught(monkeypatch):
    def never_escalates(item, cfg, now, **kwargs):
        return [a for a in real_queue_decide(item, cfg, now, **kwargs) if not isinstance(a, queue_rules.Escalate)]

    monkeypatch.setattr(sentinel_tick, "decide", never_escalates)  # where the sentinel's tick calls it
    result = caught_in("supervisor_blind_spot", "queue_backstop")


def test_a_sentinel_that_scans_nothing_is_caught(monkeypatch):
    # A review's mutant: the queue invariants follow only the items Loom made, so a sentinel that made
    # none passed a storm (only the incident profile's blind-spot scenario, by its own check, said
    # so). failure_seen follows the world's failed runs.
    from loomtui.sim import simulate

    plant(monkeypatch, sentinel_tick, "sentinel_tick", "        running = scan_all(ctx, at, report)\n",
          "        running = {}\n")
    # Seed 2: on seed 1 the first broken job hangs its runs, and overrun_seen fires first.
    run = simulate(2, 0.3, "storm")
    assert_caught(run, "failure_seen", profile="storm", days=0.3, seed=2)
    assert "run failed" in run["violation"]["message"] and "no queue item stands for it" in run["violation"]["message"]


def test_a_fuse_that_never_blows_is_caught(monkeypatch):
    monkeypatch.setattr(policy, "decide", deciding(limits=lambda lims: replace(lims, fuse_count=10**6)))
    result = caught_in("recovery_storm", "fuse")


def test_no_backoff_is_caught(monkeypatch):
    monkeypatch.setattr(policy, "decide", deciding(limits=lambda lims: replace(lims, backoff_base=0.0)))
    caught_in("recovery_storm", "backoff")


def exit_zero_is_success(obs, mem, s, mono):
    if obs.pane_dead and not obs.dead_signal and obs.dead_status in (0, None):  # (tmux may lose the 0)
        obs = replace(obs, pane_dead=False, dead_status=None, agent=PRESENT, poller=UNKNOWN, screen=None)
    return real_assess(obs, mem, s, mono)


def test_an_exit_zero_taken_for_success_is_caught(monkeypatch):
    monkeypatch.setattr(watchdog_loop, "assess", exit_zero_is_success)
    result = caught_in("exit_zero_is_failure", "exit_relaunched")


def test_resuming_a_stranger_is_caught(monkeypatch):
    plant(monkeypatch, launch, "relaunch_locked", "new = old if mode == RESUME else str(uuid.uuid4())",
          "new = str(uuid.uuid4())")
    result = caught_in("exit_zero_is_failure", "resume_only_the_pinned")


def test_a_probe_typed_before_the_agent_is_ready_is_caught(monkeypatch):
    plant(monkeypatch, canary_loop.CanaryLoop, "_facts", '"ready": lambda: launches.agent_ready(ctx, self.driver)',
          '"ready": lambda: True')
    result = caught_in("exit_zero_is_failure", "no_typing_into_a_booting_agent")


def test_a_relaunch_left_to_the_regular_probe_is_caught(monkeypatch):
    # The canary loop never sees a relaunch's witness as due: the new launch hears its first probe
    # only when the regular one comes due, up to a whole interval after the one before.
    plant(monkeypatch, canary_loop.CanaryLoop, "_facts", "witness_due(gather.runs(), gather.seq(), ready=True)",
          "witness_due(gather.runs(), gather.seq(), ready=False)")
    result = caught_in("garbled_replay", "relaunch_probed")
    assert "no probe sent since" in result["run"]["violation"]["message"]


def test_a_foreign_poller_never_scanned_for_is_caught(monkeypatch):
    plant(monkeypatch, watchdog_loop.Watchdog, "due_foreign_scan", "    self.last_foreign_scan = now\n    return True",
          "    self.last_foreign_scan = now\n    return False")
    caught_in("one_bot_one_poller", "foreign_poller_reaped")


def ignoring(cause: str):
    """The watchdog's rules with every relaunch for `cause` dropped."""

    def assess(obs, mem, s, mono):
        steps, mem = real_assess(obs, mem, s, mono)
        return [st for st in steps if not (st.kind == "recover" and st.cause == cause)], mem

    return assess


def test_a_lost_poller_never_relaunched_is_caught(monkeypatch):
    monkeypatch.setattr(watchdog_loop, "assess", ignoring("poller_missing"))
    caught_in("one_bot_one_poller", "poller_restored")


def first_caught(invariant: str, seeds: range, days: float = 1.0, config=None) -> dict:
    """The first storm run of `seeds` whose violation is `invariant` (a seed may trip another one
    first: the bug is caught there too, but not yet shown to make this invariant fire)."""
    from loomtui.sim import simulate

    for seed in seeds:
        run = simulate(seed, days, "storm", config)
        if run["violation"] is not None and run["violation"]["invariant"] == invariant:
            assert_caught(run, invariant, profile="storm", days=days, seed=seed)
            return run
    raise AssertionError(f"{invariant} never fired on storm seeds {seeds.start}..{seeds.stop - 1}")


def test_a_vanished_tmux_never_relaunched_is_caught(monkeypatch):
    # In trouble (the session gone with the agent), and neither a relaunch nor a word.
    monkeypatch.setattr(watchdog_loop, "assess", ignoring("tmux_gone"))
    first_caught("never_silent", range(1, 9))


def test_launching_beside_an_agent_that_would_not_die_is_caught(monkeypatch):
    # The world sometimes leaves a process that ignores SIGTERM and outlives SIGKILL's wait.
    plant(monkeypatch, launch, "relaunch_locked", "if stubborn:", "if False:")
    first_caught("one_agent", range(1, 13))


def test_an_operators_relaunch_that_takes_no_lock_is_caught(monkeypatch):
    # `loom recycle` that does not wait for the relaunch under way. A boot watch longer than usual
    # (resume_check 120 s, boot_grace past it so no probe is typed meanwhile) widens the window.
    from loomtui.sim.profiles import default_config

    plant(monkeypatch, actions, "recover", "lock = locks.hold(ctx.agent_dir, locks.RECYCLE, timeout=wait)",
          "lock = contextlib.nullcontext() if operator else locks.hold(ctx.agent_dir, locks.RECYCLE, timeout=wait)")
    monkeypatch.setattr(actions, "contextlib", __import__("contextlib"), raising=False)
    config = default_config({"agent": {"resume_check": "120s", "boot_grace": "200s", "poller_match": "telegram-poller"}})
    first_caught("one_relaunch_at_a_time", range(1, 9), config=config)


def test_a_claim_witnessed_by_a_run_started_before_it_is_caught():
    # The sentinel's review forgets that only a run started after the claim can witness it (a
    # failing run is caught twice over: its failure reopens the item before any review).
    with pytest.MonkeyPatch.context() as monkeypatch:
        plant(monkeypatch, queue_rules, "review", " or raw_age(claimed, run.start) <= 0:", ":")
        first_caught("witness_is_clean", range(1, 9))



def test_misses_counted_through_a_busy_pump_turn_are_caught(monkeypatch):
    # The stream-json pump's transcript read with no turn begun: a line the CLI answered opens none,
    # so every miss of a long busy turn counts, and recycles an agent the pump says is working.
    from loomtui.hooks import pump_marks
    from test_sim_pump import scripted, streamed

    plant(monkeypatch, pump_marks, "marks", "out.append(Mark(written, PROMPT))", "pass")
    sim = scripted(streamed(), 5, [(1 * 3600.0, "long_turn")])
    assert sim.violation is not None and sim.violation.name == "busy_not_recycled", sim.violation
    assert "into a busy turn" in sim.violation.message

# Each invariant and the test above (or in test_sim.py) whose planted bug it catches.
def test_misses_counted_through_a_busy_turn_are_caught(monkeypatch):
    # The canary loop blind to the agent's turns: every miss of a long busy turn counts, and recycles it.
    from loomtui.hooks import turns
    from test_sim_hooks import hooked, scripted

    plant(monkeypatch, turns, "excused", "    trailing = []", "    return runs\n    trailing = []")
    sim = scripted(hooked(), 5, [(1 * 3600.0, "long_turn")])
    assert sim.violation is not None and sim.violation.name == "busy_not_recycled", sim.violation
    assert "into a busy turn" in sim.violation.message


def test_a_turn_taken_for_quiet_after_five_minutes_is_caught(monkeypatch):
    # A review's mutant: every turn quiet after 5 minutes without a hook event, not turn_quiet's 15.
    # While a working turn's tool uses came every few minutes at most, it passed every storm; the
    # world's long tool calls (silent up to the 10 minutes Claude Code lets a command run) show it.
    from test_sim_hooks import hooked

    from loomtui.hooks import turn_rules
    from loomtui.sim import simulate

    plant(monkeypatch, turn_rules, "state", "    if age(turn.last, now) >= quiet:",
          "    if age(turn.last, now) >= min(quiet, 300.0):")
    run = simulate(10, 0.1, "storm", hooked())
    assert_caught(run, "busy_not_recycled", profile="storm", days=0.1, seed=10)
    assert "into a busy turn" in run["violation"]["message"]


def test_denials_read_again_at_every_tick_are_caught(monkeypatch):
    from loomtui.sim import pump_model
    from test_sim_hooks import H, scripted
    from test_sim_pump import streamed

    monkeypatch.setattr(pump_model, "DENIED", 1.0)  # the operator's turn's result denies a call
    plant(monkeypatch, watchdog_loop, "record_denials",
          "ctx.store.set_meta(ctx.store.agent_key(DENIALS_READ_KEY), json.dumps({\"ino\": st.st_ino, \"head\": head, \"offset\": end}), db)",
          "pass")
    sim = scripted(streamed(), 4, [(1 * H, "long_turn")])
    assert sim.violation is not None and sim.violation.name == "denials_recorded_once", sim.violation
    assert "permission_denied events for 1 results" in sim.violation.message


def test_starting_fresh_when_a_resume_was_due_is_caught(monkeypatch):
    # A review's mutant: every automatic relaunch fresh. It passed every storm: `fuse` checks only
    # that a fresh start came when the fuse asked for one, and the conversation went each time.
    def always_fresh(s, lims, now):
        d = real_decide(s, lims, now)
        return replace(d, mode=policy.FRESH) if d.action == policy.RELAUNCH and s.cause not in policy.OPERATOR else d

    monkeypatch.setattr(policy, "decide", always_fresh)
    caught_in("exit_zero_is_failure", "conversation_kept")


def test_a_fuse_window_four_times_too_long_is_caught_in_a_storm(monkeypatch):
    # Fresh starts rose from a dozen to three dozen a stormy day, and no invariant said a word.
    monkeypatch.setattr(policy, "decide", deciding(limits=lambda lims: replace(lims, fuse_window=lims.fuse_window * 4)))
    from loomtui.sim import simulate

    run = simulate(1, 1.0, "storm")
    assert_caught(run, "conversation_kept", profile="storm", days=1.0, seed=1)


def test_a_canary_relaunch_that_launched_nothing_counted_as_recycled_is_caught(monkeypatch):
    # Found 2026-12-07 by a review, not by the storms: the checker counted a session as recycled for
    # canary_failed by Loom's own ledger, as Loom did. A relaunch that launched nothing (its stop
    # failed on a hung tmux: the old agent ran on in its session) counted all the same; the next
    # canary relaunch started the session fresh, its conversation lost. The checker now asks the
    # world whether anything was launched.
    from conftest import REPO

    from loomtui.config import load_config
    from loomtui.sim.engine import Sim
    from loomtui.sim.profiles import PROFILES
    from loomtui.store import ledger

    plant(monkeypatch, ledger, "canary_recycled", "json_extract(f.detail, '$.relaunch') = r.id",
          "json_extract(f.detail, '$.relaunch') = -r.id")
    config = load_config(str(REPO / "docs" / "evidence" / "hooked.toml"))[0]
    # Seed 2 (seed 1 met it too before the world's jobs could hang; seeds 2, 6, 7 and 8 now).
    sim = Sim(config, PROFILES["storm"], 2, 2.0).run()
    assert sim.violation is not None and sim.violation.name == "conversation_kept", sim.violation
    assert "relaunch started fresh, wiping session" in sim.violation.message

def test_a_sentinel_that_never_tells_a_hung_run_is_caught(monkeypatch):
    # A job hung on a mount never exits and misses no slot (cron starts the next beside it): only
    # the run's age past its allowance tells it. overrun_seen follows the world's hung runs.
    from loomtui.sim import simulate

    plant(monkeypatch, sentinel_tick, "scan_job",
          "            if going.overrun_at is None and going.allowance is not None and age(going.run.start, at) > going.allowance:\n",
          "            if False:\n")
    run = simulate(1, 1.0, "storm")
    assert_caught(run, "overrun_seen", profile="storm", days=1.0, seed=1)
    assert "past its allowance" in run["violation"]["message"]


CAUGHT_BY = {
    "definitive_signal": test_recycling_on_one_miss_is_caught,
    "ceiling": test_a_ceiling_that_lets_two_more_through_is_caught,
    "no_resume_after_canary_failed": test_resuming_after_canary_failed_is_caught,
    "escalate_once_and_hold": test_forgetting_the_hold_is_caught,
    "relaunch_witnessed": test_probes_filed_under_the_wrong_launch_are_caught,
    "queue_backstop": test_a_queue_without_a_backstop_is_caught,
    "fuse": test_a_fuse_that_never_blows_is_caught,
    "backoff": test_no_backoff_is_caught,
    "exit_relaunched": test_an_exit_zero_taken_for_success_is_caught,
    "resume_only_the_pinned": test_resuming_a_stranger_is_caught,
    "no_typing_into_a_booting_agent": test_a_probe_typed_before_the_agent_is_ready_is_caught,
    "foreign_poller_reaped": test_a_foreign_poller_never_scanned_for_is_caught,
    "poller_restored": test_a_lost_poller_never_relaunched_is_caught,
    "never_silent": test_a_vanished_tmux_never_relaunched_is_caught,
    "one_agent": test_launching_beside_an_agent_that_would_not_die_is_caught,
    "one_relaunch_at_a_time": test_an_operators_relaunch_that_takes_no_lock_is_caught,
    "witness_is_clean": test_a_claim_witnessed_by_a_run_started_before_it_is_caught,
    "busy_not_recycled": test_misses_counted_through_a_busy_turn_are_caught,
    "relaunch_probed": test_a_relaunch_left_to_the_regular_probe_is_caught,
    "denials_recorded_once": test_denials_read_again_at_every_tick_are_caught,
    "conversation_kept": test_starting_fresh_when_a_resume_was_due_is_caught,
    "failure_seen": test_a_sentinel_that_scans_nothing_is_caught,
    "overrun_seen": test_a_sentinel_that_never_tells_a_hung_run_is_caught,
    "harness_hold_kept": "test_a_harness_hold_taken_for_run_out_at_once_is_caught",
    "no_typing_into_a_permission_prompt": "test_a_probe_typed_into_a_permission_prompt_is_caught",
    # In test_sim.py: deadlines kept on the wall clock, under the clockjump profile's steps.
    "deaf_bound": "test_sim.test_deadlines_kept_on_the_wall_clock_are_caught_by_the_clock_faults",
    "backstop_not_early": "test_sim.test_deadlines_kept_on_the_wall_clock_are_caught_by_the_clock_faults",
}


def test_every_invariant_has_a_planted_bug_that_it_catches():
    missing = [name for name in NAMES if name not in CAUGHT_BY]
    assert missing == [], f"invariants no planted bug shows able to fire: {missing}"
    assert set(CAUGHT_BY) <= set(NAMES)


@pytest.mark.parametrize("name", [s.name for s in SCENARIOS])
def test_the_real_rules_pass_every_scenario_the_mutants_fail(name):
    result = scenario(name)
    assert result["passed"], result["outcome"]


def test_a_refusal_of_a_cli_that_stopped_reading_taken_as_loom_s_own_failure_is_caught_by_deaf_bound(monkeypatch):
    """The probe keeps the pump's `input_closed` refusal for Loom's own `inject_failed` (as before
    2026-12-06): the CLI that closed its stdin is never recycled, and `deaf_bound` says so."""
    from test_sim_hooks import H, automatic, scripted
    from test_sim_pump import streamed

    plant(monkeypatch, _probe, "_send", "outcome = MISS if result.not_reading else INJECT_FAILED",
          "outcome = INJECT_FAILED")
    sim = scripted(streamed(), 3, [(1 * H, "stdin_closed")])
    assert sim.violation is not None and sim.violation.name == "deaf_bound", sim.violation
    assert automatic(sim).get("canary_failed") is None


def test_a_turn_the_cli_took_by_itself_left_unmarked_is_caught_by_busy_not_recycled(monkeypatch):
    # The transcript's `own_turn` init read as any init (as before 2026-12-07): a background task's
    # end told to the model in a long turn of the CLI's own is no turn to Loom, the probes queued
    # behind it miss, and the busy agent is recycled.
    from test_sim_pump import own_turn

    from loomtui.hooks import pump_marks

    plant(monkeypatch, pump_marks, "marks", 'and entry.data.get("own_turn") is True:', "and False:")
    sim = own_turn(monkeypatch)
    assert sim.violation is not None and sim.violation.name == "busy_not_recycled", sim.violation


def test_a_harness_hold_taken_for_run_out_at_once_is_caught(monkeypatch):
    # A harness hold read as no hold (a rule that knew only the operator's and the ceiling's): run
    # out the moment it is placed, a crash under the rate limit relaunched, the canary's probes
    # typed into failing turns; the operator was told nothing would be relaunched.
    from test_sim_hooks import rate_limited

    from loomtui.agent import hold_rules

    plant(monkeypatch, hold_rules, "active", "if hold is None:", "if hold is None or hold.by == 'harness':")
    sim = rate_limited(monkeypatch)
    assert sim.violation is not None and sim.violation.name == "harness_hold_kept", sim.violation


def test_a_turn_waiting_on_permission_taken_for_quiet_is_caught(monkeypatch):
    # The permission prompt forgotten by the turn's state: a turn silent while the operator decides
    # is quiet after turn_quiet, its probes typed into the dialog (caught there first), its misses
    # counted, and the agent that waited on its operator recycled.
    from test_sim_hooks import permission_asked

    from loomtui.hooks import turn_rules

    plant(monkeypatch, turn_rules, "state",
          "if turn.waiting and turn.waiting_since is not None and age(turn.waiting_since, now) < max_turn:",
          "if False:")
    sim = permission_asked(monkeypatch)
    assert sim.violation is not None and sim.violation.name == "no_typing_into_a_permission_prompt", sim.violation
    # Without that invariant's look, the recycle that follows is the one busy_not_recycled names.
    monkeypatch.setattr(sim.checker.__class__, "on_typed", lambda self, text: None)
    sim = permission_asked(monkeypatch)
    assert sim.violation is not None and sim.violation.name == "busy_not_recycled", sim.violation


def test_a_probe_typed_into_a_permission_prompt_is_caught(monkeypatch):
    # The canary's withholding forgotten: the next scheduled probe is typed into the dialog the
    # operator was told of, where its Enter could answer it.
    from test_sim_hooks import permission_asked

    from loomtui.hooks import turn_rules

    plant(monkeypatch, turn_rules, "withholds_probe",
          "return state(current(all_turns), now, quiet, max_turn) == TURN_WAITING", "return False")
    sim = permission_asked(monkeypatch)
    assert sim.violation is not None and sim.violation.name == "no_typing_into_a_permission_prompt", sim.violation


def test_any_event_of_the_cli_taken_for_a_turn_that_succeeded_is_caught(monkeypatch):
    # Every hook event read as a sign the CLI works again (a prompt taken, a tool used), not only a
    # Stop: a prompt taken under the limit ends the hold its turn is about to renew, though no turn
    # succeeded since the hold was placed.
    from test_sim_hooks import rate_limited

    from loomtui.hooks import harness

    plant(monkeypatch, harness, "apply_in", 'elif event.event == "Stop":', "else:")
    sim = rate_limited(monkeypatch)
    assert sim.violation is not None and sim.violation.name == "harness_hold_kept", sim.violation
    assert "succeeded" in sim.violation.message


def test_a_harness_hold_that_ignores_the_reset_time_is_caught(monkeypatch):
    # The CLI said the limit resets in three hours; a hold of the default half hour would let a
    # crash under the limit be relaunched into it.
    from test_sim_hooks import rate_limited

    from loomtui.hooks import harness_rules

    plant(monkeypatch, harness_rules, "hold_seconds", "if resets_at is None or resets_at != resets_at:", "if True:")
    sim = rate_limited(monkeypatch)
    assert sim.violation is not None and sim.violation.name == "harness_hold_kept", sim.violation
    assert "reset time" in sim.violation.message
