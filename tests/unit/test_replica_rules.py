"""The memory replica's pure decisions (memory/replica_rules.py): when to commit, pull, push and
checkpoint, what a conflict copy is called, and the lag in words."""

from __future__ import annotations

from loomtui.memory import replica_rules as rules

S = rules.Settings(quiet=30.0, pull_interval=300.0)
T0 = 1_800_000_000.0


def look(**kw) -> rules.Look:
    base = dict(dirty=False, changed_at=None, ahead=0, last_pull=T0, last_try=T0, failures=0)
    return rules.Look(**{**base, **kw})


def test_a_change_is_committed_once_still_for_the_quiet_period_not_before():
    changed = look(dirty=True, changed_at=T0 + 10)
    assert not rules.commit_due(changed, T0 + 39.9, S)
    assert rules.commit_due(changed, T0 + 40, S)  # exactly the quiet period
    assert not rules.commit_due(look(dirty=True, changed_at=None), T0 + 1000, S)  # first seen: it starts now
    assert not rules.commit_due(look(dirty=False, changed_at=T0), T0 + 1000, S)   # nothing to commit
    assert rules.commit_due(changed, T0 + 5, S)  # a clock stepped back: not held until it catches up


def test_forced_or_a_pull_commits_at_once_since_a_rebase_needs_a_clean_tree():
    changed = look(dirty=True, changed_at=T0 + 10)
    assert rules.commit_due(look(dirty=True, changed_at=T0 + 10, forced=True), T0 + 11, S)
    assert rules.commit_due(changed, T0 + 11, S, pulling=True)
    assert not rules.commit_due(look(forced=True), T0 + 11, S)  # forced, but nothing changed
    plan = rules.plan(look(dirty=True, changed_at=T0 + 299, last_pull=T0), T0 + 300, S)
    assert plan.pull and plan.commit and plan.push


def test_pulls_come_at_start_every_interval_and_after_a_refused_push():
    assert rules.pull_due(look(last_pull=None), T0, S)
    assert rules.pull_due(look(starting=True), T0 + 1, S)
    assert not rules.pull_due(look(), T0 + 299, S)
    assert rules.pull_due(look(), T0 + 300, S)
    assert rules.pull_due(look(rejected=True), T0 + 1, S)
    assert rules.pull_due(look(), T0 - 5, S)  # wall clock stepped back


def test_an_unreachable_remote_is_tried_again_after_a_growing_wait():
    assert [rules.retry_wait(n) for n in (0, 1, 2, 3, 10)] == [0.0, 10.0, 20.0, 40.0, rules.RETRY_MAX]
    away = look(last_pull=None, failures=2, last_try=T0, ahead=3)
    assert not rules.pull_due(away, T0 + 19, S) and not rules.plan(away, T0 + 19, S).push
    assert rules.pull_due(away, T0 + 20, S) and rules.plan(away, T0 + 20, S).push
    assert rules.pull_due(look(failures=2, last_try=T0, forced=True, last_pull=None), T0 + 1, S)
    assert rules.pull_due(look(failures=9, last_try=T0, starting=True), T0 + 1, S)


def test_a_push_is_planned_only_for_commits_the_remote_lacks():
    assert rules.plan(look(), T0 + 1, S).idle
    assert rules.plan(look(ahead=2), T0 + 1, S) == rules.Plan(commit=False, pull=False, push=True)
    assert rules.plan(look(dirty=True, changed_at=T0, ahead=0), T0 + 30, S).push


def test_next_look_waits_for_the_quiet_period_or_the_next_pull():
    assert rules.next_look(look(dirty=True, changed_at=T0), T0 + 25, S, 10.0) == 5.0
    assert rules.next_look(look(last_pull=T0), T0 + 296, S, 10.0) == 4.0
    assert rules.next_look(look(last_pull=T0), T0 + 400, S, 10.0) == 0.5  # overdue: soon, never a spin


def test_the_ledger_head_is_checkpointed_each_interval_once_it_moved_and_at_once_after_an_escalation():
    assert rules.checkpoint_due(5, None, None, False, T0, 3600)          # never checkpointed
    assert not rules.checkpoint_due(0, None, None, False, T0, 3600)      # an empty ledger
    assert not rules.checkpoint_due(5, 5, T0, True, T0 + 9999, 3600)     # the head has not moved
    assert not rules.checkpoint_due(9, 5, T0, False, T0 + 3599, 3600)
    assert rules.checkpoint_due(9, 5, T0, False, T0 + 3600, 3600)
    assert rules.checkpoint_due(3, 5, T0, False, T0 + 1, 3600)          # a new chain after a salvage: at once
    assert rules.checkpoint_due(9, 5, T0, True, T0 + 1, 3600)            # an escalation since
    assert rules.checkpoint_due(9, 5, T0, False, T0 - 1, 3600)           # a clock stepped back


def test_a_conflict_copy_names_the_file_the_host_and_the_time():
    name = rules.conflict_name("notes/deploys.md", "box-a", "20270115T080000")
    assert name == "notes/deploys.md.conflict-box-a-20270115T080000"
    assert rules.is_conflict_copy(name) and not rules.is_conflict_copy("notes/deploys.md")
    assert not rules.is_conflict_copy("x.conflict-a-2027")
    assert rules.is_conflict_copy(name + "-2") and not rules.is_conflict_copy(name + "-x")  # a second in one second
    # Read back: the file it is a side of, and the box that kept it (a `-` in its name too).
    for copy in (name, name + "-2"):
        assert (rules.conflicted_file(copy), rules.copy_host(copy)) == ("notes/deploys.md", "box-a")
    assert (rules.conflicted_file("notes/deploys.md"), rules.copy_host("notes/deploys.md")) == ("notes/deploys.md", None)


def test_the_lag_in_words():
    assert rules.lag_words(None, T0) == "not synced yet"
    lag = rules.Lag(last_push=T0 - 120, last_pull=T0 - 60, ahead=1)
    assert rules.lag_words(lag, T0) == "pushed 2m ago, pulled 1m ago, 1 commit to push"
    assert rules.lag_words(rules.Lag(None, None, 3), T0) == "pushed never, pulled never, 3 commits to push"
    away = rules.Lag(T0 - 600, T0 - 600, 2, "fetch failed: no route", T0 - 300, conflicts=1)
    assert rules.lag_words(away, T0) == ("remote unreachable (since 5m): fetch failed: no route; pushed 10m ago, "
                                         "pulled 10m ago, 2 commits to push; 1 conflict to reconcile")
    assert rules.lag_words(away, T0, short=True) == "↑10m ↓10m 2 to push offline"


def test_at_the_very_moment_of_the_last_look_nothing_is_due_again():
    # The same instant is no step back of the clock: nothing repeats on a tick that saw no time pass.
    assert not rules.pull_due(look(), T0, S)
    assert not rules.commit_due(look(dirty=True, changed_at=T0), T0, S)
    assert not rules.checkpoint_due(9, 5, T0, False, T0, 3600)
    assert not rules.remote_due(look(failures=1, last_try=T0), T0)


def test_one_failure_already_waits_its_backoff_and_one_commit_is_pushed():
    assert not rules.remote_due(look(failures=1, last_try=T0), T0 + 5)
    assert rules.remote_due(look(failures=1, last_try=T0), T0 + 10)
    assert rules.remote_due(look(failures=0, last_try=T0), T0 + 0.1)  # it answered last time: no wait
    assert rules.plan(look(ahead=1), T0 + 1, S) == rules.Plan(commit=False, pull=False, push=True)


def test_a_clean_tree_waits_for_no_quiet_period():
    assert rules.next_look(look(dirty=False, changed_at=T0), T0 + 25, S, 10.0) == 10.0  # not 5: nothing to commit


def test_the_first_event_and_a_checkpoint_never_written_are_due():
    assert rules.checkpoint_due(1, None, None, False, T0, 3600)
    assert rules.checkpoint_due(5, 3, None, False, T0, 3600)  # a seq but no time: written again


def test_a_conflict_copy_s_time_is_cut_to_its_seconds():
    assert rules.conflict_name("a.md", "b", "20270115T0800001234") == "a.md.conflict-b-20270115T080000"


def test_the_lag_in_words_at_the_edges():
    assert rules.lag_words(rules.Lag(T0, T0, 0), T0) == "pushed 0s ago, pulled 0s ago, 0 commits to push"
    away = rules.Lag(None, None, 0, "no route", None, conflicts=2)
    assert rules.lag_words(away, T0) == ("remote unreachable (since now): no route; pushed never, pulled never, "
                                         "0 commits to push; 2 conflicts to reconcile")


def test_an_error_here_is_not_said_to_be_the_remote():
    here = rules.Lag(T0 - 600, T0 - 60, 1, "cannot rebase: You have unstaged changes.", T0 - 60, error_kind=rules.LOCAL)
    words = rules.lag_words(here, T0)
    assert words.startswith("not synced (git refused here, not the remote) (since 1m): cannot rebase")
    assert "unreachable" not in words and rules.lag_words(here, T0, short=True) == "↑10m ↓1m 1 to push error"
