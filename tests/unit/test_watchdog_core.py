"""The watchdog's pure rules: definitive signals act, absences need two looks, ambiguity does nothing."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomtui.agent.watchdog_rules import Looks, Observation, Settings, Step, assess, exit_cause, said_last, settings_from
from loomtui.config import parse_config

S = Settings(boot_grace=90, poller_grace=180, resume_failed_match="No conversation found",
             modals=(("Yes, I trust this folder", ("Enter",)),))
HEALTHY = Observation(tmux="up", agent="present", poller="present", poller_configured=True, since_launch=1000)


def run(observations, start=Looks(), t0=0.0, step=30.0):
    mem, out = start, []
    for i, obs in enumerate(observations):
        steps, mem = assess(obs, mem, S, t0 + i * step)
        out.append(steps)
    return out, mem


def causes(all_steps):
    return [s.cause for steps in all_steps for s in steps if s.kind == "recover"]


def test_healthy_does_nothing():
    out, _ = run([HEALTHY] * 5)
    assert out == [[]] * 5


def test_dead_pane_acts_at_once_with_exit_or_crash():
    assert causes(run([Observation(tmux="up", pane_dead=True, dead_status=0)])[0]) == ["exit"]
    assert causes(run([Observation(tmux="up", pane_dead=True, dead_status=1)])[0]) == ["crash"]
    assert causes(run([Observation(tmux="up", pane_dead=True, dead_status=None)])[0]) == ["exit"]
    assert causes(run([Observation(tmux="up", pane_dead=True, dead_signal=9)])[0]) == ["crash"]


def test_resume_failed_is_told_apart():
    obs = Observation(tmux="up", pane_dead=True, dead_status=1, since_launch=3, last_mode="resume",
                      screen="No conversation found with session ID: x")
    assert causes(run([obs])[0]) == ["resume_failed"]
    late = Observation(tmux="up", pane_dead=True, dead_status=1, since_launch=3000, last_mode="resume",
                       screen="No conversation found with session ID: x")
    assert causes(run([late])[0]) == ["crash"]


def test_the_resume_failure_is_what_the_process_said_last_not_a_quote_in_its_conversation():
    # A resumed TUI redraws its conversation; one that quoted the phrase (an agent at work on Loom)
    # and crashed in its boot grace was taken for a failed resume, and its conversation started fresh.
    redrawn = "\n".join(["> why does loom say 'No conversation found'?", "  it means the resume failed", "",
                          *[f"  line {i} of the answer" for i in range(10)], "> ", "",
                          "Pane is dead (status 1, Mon Dec  7 12:00:00 2026)", ""])
    obs = Observation(tmux="up", pane_dead=True, dead_status=1, since_launch=3, last_mode="resume", screen=redrawn)
    assert causes(run([obs])[0]) == ["crash"]
    said = redrawn.replace("> \n", "> \nNo conversation found with session ID: x\n")
    assert causes(run([replace(obs, screen=said)])[0]) == ["resume_failed"]
    assert not said_last("No conversation found", None) and not said_last("x", "")


def test_gone_needs_two_consecutive_looks():
    gone = Observation(tmux="gone")
    assert causes(run([gone])[0]) == []
    assert causes(run([gone, HEALTHY, gone])[0]) == []
    assert causes(run([gone, gone])[0]) == ["tmux_gone"]


def test_ambiguous_never_triggers_nor_counts():
    gone, unknown = Observation(tmux="gone"), Observation(tmux="unknown", why="tmux did not answer")
    out, _ = run([gone, unknown, unknown, gone])
    # unknown looks neither trigger nor break the run of absences... but they do not add to it either.
    assert causes(out[:3]) == []
    assert [s.kind for s in out[1]] == ["ambiguous"] and out[2] == []


def test_agent_missing_needs_two_looks():
    missing = Observation(tmux="up", agent="missing", poller_configured=True, since_launch=1000)
    assert causes(run([missing])[0]) == []
    assert causes(run([missing, missing])[0]) == ["exit"]
    unknown = Observation(tmux="up", agent="unknown", since_launch=1000, why="access denied")
    assert causes(run([missing, unknown, unknown])[0]) == []


@pytest.mark.incident("recovery_storm")
def test_poller_missing_waits_for_its_grace_and_two_looks():
    missing = Observation(tmux="up", agent="present", poller="missing", poller_configured=True, since_launch=1000)
    out, _ = run([missing] * 6, step=30)     # 0, 30, ... 150s: still inside the 180s grace
    assert causes(out) == []
    out, _ = run([missing] * 8, step=30)     # reaches 180s at the 7th look
    assert causes(out) == ["poller_missing"]
    # A poller seen again resets the clock.
    out, _ = run([missing] * 5 + [HEALTHY] + [missing] * 5, step=30)
    assert causes(out) == []


def test_poller_not_counted_during_boot_grace():
    booting = Observation(tmux="up", agent="present", poller="missing", poller_configured=True, since_launch=5)
    out, mem = run([booting] * 20, step=30)
    assert causes(out) == [] and mem.poller_missing_since is None


def test_unknown_poller_triggers_nothing():
    unknown = Observation(tmux="up", agent="present", poller="unknown", poller_configured=True, since_launch=1000)
    assert causes(run([unknown] * 20)[0]) == []


def test_modal_dismissed_then_cooldown():
    modal = Observation(tmux="up", agent="present", poller="present", poller_configured=True, since_launch=1000,
                        screen="Do you trust the files?\n > 1. Yes, I trust this folder")
    out, _ = run([modal, modal, modal], step=1)
    kinds = [[s.kind for s in steps] for steps in out]
    assert kinds == [["dismiss_modal"], [], []]
    out, _ = run([modal, modal], step=30)
    assert [[s.keys for s in steps] for steps in out] == [[("Enter",)], [("Enter",)]]


@given(st.lists(st.sampled_from(["up", "gone", "unknown", "dead", "missing", "pmissing", "tree_unknown"]),
                max_size=40))
@pytest.mark.incident("confident_false_detector")
def test_unknown_observations_never_trigger(kinds):
    obs_for = {
        "up": HEALTHY,
        "gone": Observation(tmux="gone"),
        "unknown": Observation(tmux="unknown"),
        "dead": Observation(tmux="up", pane_dead=True, dead_status=1),
        "missing": Observation(tmux="up", agent="missing", since_launch=1000),
        "pmissing": Observation(tmux="up", agent="present", poller="missing", poller_configured=True,
                                since_launch=1000),
        "tree_unknown": Observation(tmux="up", agent="unknown", poller="unknown", since_launch=1000),
    }
    mem = Looks()
    for i, kind in enumerate(kinds):
        steps, mem = assess(obs_for[kind], mem, S, i * 30.0)
        if kind in ("unknown", "tree_unknown", "up"):
            assert not [s for s in steps if s.kind == "recover"]


def test_an_unclear_look_breaks_a_run_of_absences():
    missing = Observation(tmux="up", agent="missing", since_launch=1000)
    unknown = Observation(tmux="up", agent="unknown", since_launch=1000, why="access denied")
    assert causes(run([missing, unknown, unknown, missing])[0]) == []
    gone, hung = Observation(tmux="gone"), Observation(tmux="unknown", why="tmux did not answer")
    assert causes(run([gone, hung, gone])[0]) == []


def test_a_live_server_without_its_socket_is_repaired_never_relaunched():
    orphaned = Observation(tmux="gone", socket_lost=True)
    out, _ = run([orphaned] * 10)
    assert causes(out) == []
    assert all(steps[0].kind == "repair_socket" for steps in out)


def test_a_long_unclear_spell_alerts_the_operator_once():
    hung = Observation(tmux="unknown", why="tmux did not answer")
    out, _ = run([hung] * 40, step=30)  # 20 minutes; the alert bound is 10
    kinds = [s.kind for steps in out for s in steps]
    assert kinds.count("alert") == 1 and kinds.count("ambiguous") == 1
    # A clear look ends the spell; a new long spell alerts again.
    out, _ = run([hung] * 25 + [HEALTHY] + [hung] * 25, step=30)
    assert [s.kind for steps in out for s in steps].count("alert") == 2


def test_a_dialog_that_will_not_go_is_pressed_twice_then_left_to_a_human():
    modal = Observation(tmux="up", agent="present", poller="present", poller_configured=True, since_launch=1000,
                        screen="Yes, I trust this folder")
    out, mem = run([modal] * 10, step=30)
    kinds = [s.kind for steps in out for s in steps]
    assert kinds.count("dismiss_modal") == 2 and kinds.count("alert") == 1
    gone_now = Observation(**{**HEALTHY.__dict__, "screen": "> "})  # the dialog closed by hand
    out, _ = run([gone_now, modal], start=mem, t0=300, step=30)
    assert [s.kind for steps in out for s in steps] == ["dismiss_modal"]


def test_an_unclear_poller_look_makes_no_progress_toward_poller_missing():
    missing = Observation(tmux="up", agent="present", poller="missing", poller_configured=True, since_launch=1000)
    unclear = Observation(tmux="up", agent="present", poller="unknown", poller_configured=True, since_launch=1000,
                          why="process 9 vanished")
    out, _ = run([missing] + [unclear] * 5 + [missing], step=40)
    assert causes(out) == []


def test_a_tree_that_stays_unreadable_alerts_once():
    unreadable = Observation(tmux="up", agent="unknown", since_launch=1000, why="access denied")
    out, _ = run([unreadable] * 40, step=30)
    kinds = [s.kind for steps in out for s in steps]
    assert kinds.count("ambiguous") == 1 and kinds.count("alert") == 1


def test_settings_come_from_the_config_file():
    config = parse_config({"agent": {"boot_grace": "2m", "resume_failed_match": "gone for good",
                                     "modals": [{"match": "Trust?", "keys": ["Down", "Enter"]}]},
                           "watchdog": {"poller_grace": "5m", "ambiguous_alert": "15m"}}, "test", None)
    assert settings_from(config, has_dialogs=True) == Settings(boot_grace=120.0, poller_grace=300.0, resume_failed_match="gone for good",
                                             modals=(("Trust?", ("Down", "Enter")),), ambiguous_alert=900.0)


def test_each_recovery_says_why_in_its_note():
    # The note goes to the ledger and the operator's timeline.
    gone, missing = Observation(tmux="gone"), Observation(tmux="up", agent="missing", since_launch=1000)
    assert run([gone, gone])[0][1] == [Step("recover", "tmux_gone", note="no tmux session on two looks")]
    assert run([missing, missing])[0][1] == [
        Step("recover", "exit", note="no agent process in the pane's tree on two looks")]
    assert run([Observation(tmux="up", pane_dead=True, dead_status=3)])[0][0] == [
        Step("recover", "crash", note="the agent exited (status 3)")]
    pmissing = replace(HEALTHY, poller="missing")
    assert run([pmissing] * 7, t0=5000.0)[0][6] == [
        Step("recover", "poller_missing", note="poller missing for 180s on 7 looks")]
    socket = "the tmux server runs but its socket is gone"
    assert run([Observation(tmux="gone", socket_lost=True)])[0][0] == [
        Step("repair_socket", note=socket), Step("ambiguous", note=socket)]


def test_an_unclear_look_records_why_or_what_could_not_be_read():
    looks = {Observation(tmux="unknown", why="tmux did not answer"): "tmux did not answer",
             Observation(tmux="up", agent="unknown", since_launch=1000): "the process tree could not be read",
             Observation(tmux="up", agent="unknown", why="EPERM"): "EPERM",
             replace(HEALTHY, poller="unknown"): "the poller could not be told from the tree",
             replace(HEALTHY, poller="unknown", why="pid 9 vanished"): "pid 9 vanished"}
    for obs, why in looks.items():
        assert run([obs])[0] == [[Step("ambiguous", note=why)]]


def test_the_unclear_alert_goes_when_the_spell_reaches_its_bound_and_says_how_long():
    hung = Observation(tmux="unknown", why="tmux did not answer")
    out, mem = run([hung] * 3, t0=1000.0, step=300.0)
    assert out == [[Step("ambiguous", note="tmux did not answer")], [], [
        Step("alert", note="Loom cannot see the agent clearly for 600s: tmux did not answer")]]
    assert mem == Looks(ambiguous=True, ambiguous_since=1000.0, alerted=frozenset({"ambiguous"}))
    _, mem = run([HEALTHY], start=mem)
    assert mem == Looks()


def test_an_unclear_look_forgets_every_count_toward_a_trigger():
    counting = Looks(gone=1, agent_missing=1, poller_missing=3, poller_missing_since=5.0, last_modal_at=2.0,
                      modal_presses=1, alerted=frozenset({"modal"}))
    _, mem = run([Observation(tmux="unknown")], start=counting, t0=50.0)
    assert mem == Looks(last_modal_at=2.0, modal_presses=1, ambiguous=True, ambiguous_since=50.0,
                         alerted=frozenset({"modal"}))


def test_one_kind_of_absence_does_not_carry_over_into_another():
    gone, missing = Observation(tmux="gone"), Observation(tmux="up", agent="missing", since_launch=1000)
    assert causes(run([gone, missing, gone])[0]) == []
    assert causes(run([missing, HEALTHY, missing])[0]) == []
    # A gone look keeps the dialog cooldown and the dialog alert, and ends an unclear spell's alert.
    start = Looks(last_modal_at=7.0, alerted=frozenset({"modal", "ambiguous"}), ambiguous=True)
    _, mem = run([gone], start=start)
    assert mem == Looks(gone=1, last_modal_at=7.0, alerted=frozenset({"modal"}))
    out, mem = run([Observation(tmux="up", pane_dead=True)], start=start)
    assert mem == Looks(alerted=frozenset({"modal"}))


def test_a_healthy_look_leaves_a_clean_memory():
    start = Looks(gone=1, agent_missing=1, poller_missing=4, poller_missing_since=0.0, modal_presses=2,
                   alerted=frozenset({"modal"}), ambiguous=True, ambiguous_since=0.0)
    assert run([replace(HEALTHY, screen="> ")], start=start) == ([[]], Looks())
    # No screen to read says nothing about a dialog: its presses and alert stay.
    assert run([HEALTHY], start=start)[1] == Looks(modal_presses=2, alerted=frozenset({"modal"}))


def test_the_poller_grace_and_the_boot_grace_are_inclusive_bounds():
    quick = Settings(boot_grace=90, poller_grace=60, resume_failed_match="x")
    pmissing = replace(HEALTHY, poller="missing")
    mem = Looks()
    fired = []
    for t in (0.0, 30.0, 60.0):
        steps, mem = assess(pmissing, mem, quick, t)
        fired.append(bool(steps))
    assert fired == [False, False, True]
    # No grace at all: the second look is enough, the first never is.
    none = replace(quick, poller_grace=0)
    steps, mem = assess(pmissing, Looks(), none, 0.0)
    assert steps == [] and mem.poller_missing == 1
    assert assess(pmissing, mem, none, 0.0)[0][0].cause == "poller_missing"
    # Launched exactly boot_grace ago: no longer booting, so a missing poller counts.
    assert assess(replace(pmissing, since_launch=90), Looks(), quick, 0.0)[1].poller_missing == 1


def test_a_resume_failure_is_read_only_while_booting():
    dead = Observation(tmux="up", pane_dead=True, dead_status=1, last_mode="resume", screen="x")
    grace = Settings(boot_grace=90, poller_grace=60, resume_failed_match="x")
    assert exit_cause(replace(dead, since_launch=89.9), grace) == "resume_failed"
    assert exit_cause(replace(dead, since_launch=90), grace) == "crash"
    # Even with no boot grace configured, the first second after a launch counts as booting.
    zero = replace(grace, boot_grace=0)
    assert [exit_cause(replace(dead, since_launch=t), zero) for t in (0.5, 1.0, 1.5)] == [
        "resume_failed", "crash", "crash"]


def test_a_dialog_press_waits_out_the_cooldown_exactly_and_names_the_pattern():
    modal = replace(HEALTHY, screen="Yes, I trust this folder")
    pressed = Step("dismiss_modal", keys=("Enter",), note="Yes, I trust this folder")
    steps, mem = assess(modal, Looks(), S, 1000.0)
    assert steps == [pressed] and (mem.last_modal_at, mem.modal_presses) == (1000.0, 1)
    assert assess(modal, mem, S, 1004.9)[0] == []
    steps, mem = assess(modal, mem, S, 1005.0)
    assert steps == [pressed]
    steps, mem = assess(modal, mem, S, 1010.0)
    assert steps == [Step("alert", note="a dialog matching 'Yes, I trust this folder' is still on screen after "
                                        "2 presses; Loom stopped pressing")]
    # The dialog gone, the presses and the alert are forgotten.
    _, mem = assess(replace(modal, screen="> "), mem, S, 1020.0)
    assert (mem.modal_presses, mem.alerted) == (0, frozenset())


def test_the_watchdogs_causes_are_causes_the_policy_knows():
    from typing import get_args

    from loomtui.agent import watchdog_rules
    from loomtui.agent.policy import CAUSES

    assert set(get_args(watchdog_rules.Cause)) <= set(CAUSES)
