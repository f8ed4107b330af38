"""Issue 26: the harness's causes (hooks/harness_rules.py, pure): which StopFailure error types
hold, for how long, when the operator is told, when a success ends the hold; and a resume judged
by its SessionStart."""

from __future__ import annotations

import math

import pytest

from loomtui.hooks import harness_rules as rules
from loomtui.hooks.harness_rules import (DEFAULT_HOLD, EXPIRED, FAILED, MAX_AHEAD, MIN_HOLD, PROVEN, Ended, Held,
                                         HoldFor, cause_of, hold_seconds, on_failure, on_success, resume_verdict)

NOW = 1_800_000_000.0
# Claude Code 2.1.332's StopFailure `error` values (its hook input schema), every one.
ERRORS = ["authentication_failed", "oauth_org_not_allowed", "account_on_hold", "verification_required",
          "billing_error", "rate_limit", "overloaded", "invalid_request", "model_not_found", "server_error",
          "unknown", "max_output_tokens", "cloud_credential_error"]
PASSING = {"overloaded", "invalid_request", "model_not_found", "server_error", "unknown", "max_output_tokens"}


def fail(error: str = "rate_limit", *, held: Held | None = None, last: Ended | None = None,
         succeeded: bool = False, resets_at: float | None = None) -> HoldFor | None:
    return on_failure(error, now=NOW, resets_at=resets_at, held=held, last=last, succeeded_since_end=succeeded)


def test_the_three_documented_causes_hold_with_their_own_cause():
    assert cause_of("rate_limit") == "rate_limited"
    assert cause_of("billing_error") == "billing"
    assert cause_of("authentication_failed") == "auth"
    assert rules.CAUSES == {"rate_limited", "billing", "auth"}


@pytest.mark.parametrize("error", ERRORS)
def test_every_error_type_either_holds_or_follows_the_normal_path(error):
    plan = fail(error)
    if error in PASSING:
        assert cause_of(error) is None and plan is None  # recorded, nothing else: a relaunch may fix it
    else:
        assert plan == HoldFor(cause_of(error), DEFAULT_HOLD, tell=True)


def test_an_unknown_or_empty_error_type_holds_nothing():
    for error in ("", "RATE_LIMIT", "rate_limit ", "something new"):
        assert fail(error) is None


def test_a_reset_time_is_the_hold_s_end_within_bounds():
    assert hold_seconds(NOW, None) == DEFAULT_HOLD
    assert hold_seconds(NOW, None, default=600.0) == 600.0
    assert hold_seconds(NOW, NOW + 3 * 3600) == 3 * 3600
    assert hold_seconds(NOW, NOW + 3 * 86400) == MAX_AHEAD  # never trusted beyond a day
    assert hold_seconds(NOW, NOW - 50) == MIN_HOLD         # already past: the canary still waits a little
    assert hold_seconds(NOW, NOW + 5) == MIN_HOLD
    assert hold_seconds(NOW, math.nan) == DEFAULT_HOLD
    assert fail(resets_at=NOW + 7200) == HoldFor("rate_limited", 7200.0, tell=True)


def test_a_failure_of_the_cause_already_held_renews_the_hold_silently():
    held = Held(True, "rate_limited", NOW - 60)
    assert fail(held=held) == HoldFor("rate_limited", DEFAULT_HOLD, tell=False)
    # Another cause while held is news: a login lost under a rate limit is another thing to fix.
    assert fail("authentication_failed", held=held) == HoldFor("auth", DEFAULT_HOLD, tell=True)


def test_an_operator_s_or_the_ceiling_s_hold_stays_and_nothing_is_said():
    for held in (Held(False, "", NOW - 60), Held(False, "canary_failed", NOW - 60)):
        assert fail(held=held) is None
        assert not on_success(held, NOW)


def test_right_after_a_hold_ran_out_with_no_success_the_next_failure_is_silent():
    ran_out = Ended("rate_limited", NOW - 10, EXPIRED)
    assert fail(last=ran_out) == HoldFor("rate_limited", DEFAULT_HOLD, tell=False)
    # ... but a success in between, another cause, or a hold that ended otherwise makes it news.
    assert fail(last=ran_out, succeeded=True).tell
    assert fail("billing_error", last=ran_out).tell
    for how in ("succeeded", "release", "relaunch"):
        assert fail(last=Ended("rate_limited", NOW - 10, how)).tell


def test_a_success_after_the_hold_began_ends_it_and_one_before_does_not():
    held = Held(True, "rate_limited", NOW)
    assert on_success(held, NOW) and on_success(held, NOW + 1)
    assert not on_success(held, NOW - 0.001)  # the Stop of an earlier turn, read late
    assert not on_success(None, NOW)


def test_a_success_after_the_hold_ends_it_by_the_monotonic_clock_whatever_the_wall_clock_did():
    held = Held(True, "rate_limited", NOW, mono=500.0, boot="b")
    assert on_success(held, NOW - 120, 530.0, "b")          # the wall clock stepped back 150 s since
    assert not on_success(held, NOW + 120, 499.0, "b")      # before the hold, whatever the wall says
    assert on_success(held, NOW + 1, 3.0, "other-boot")     # another boot: only the wall clock speaks
    assert not on_success(Held(True, "rate_limited", NOW), NOW - 1, 530.0, "b")  # a hold without a mono


def test_every_ordering_of_failures_and_successes_tells_once_per_episode():
    """A run of events through the rules, as the shell applies them: the operator is told at the
    first failure of an episode only; an episode ends with a success."""
    def run(events: list[str]) -> list[bool]:
        held: Held | None = None
        last: Ended | None = None
        succeeded = False
        told: list[bool] = []
        t = NOW
        for what in events:
            t += 60
            if what == "ok":
                if on_success(held, t):
                    last, held = Ended(held.cause, t, "succeeded"), None
                succeeded = True
            elif what == "expire":
                if held is not None:
                    last, held, succeeded = Ended(held.cause, t, EXPIRED), None, False
            else:
                plan = fail(what, held=held, last=last, succeeded=succeeded)
                if plan is not None:
                    told.append(plan.tell)
                    held = Held(True, plan.cause, t)
        return told

    assert run(["rate_limit", "rate_limit", "rate_limit"]) == [True, False, False]
    assert run(["rate_limit", "expire", "rate_limit", "expire", "rate_limit"]) == [True, False, False]
    assert run(["rate_limit", "ok", "rate_limit"]) == [True, True]
    assert run(["rate_limit", "expire", "ok", "rate_limit"]) == [True, True]
    assert run(["rate_limit", "server_error", "billing_error", "billing_error"]) == [True, True, False]
    assert run(["server_error", "overloaded", "ok"]) == []


def test_a_resume_is_proven_by_its_session_and_failed_by_another_or_a_startup():
    pinned = "11111111-2222"
    assert resume_verdict(mode="resume", pinned=pinned, source="resume", session_id=pinned)[0] == PROVEN
    said, why = resume_verdict(mode="resume", pinned=pinned, source="startup", session_id="another")
    assert said == FAILED and "new conversation" in why and "another" in why
    said, why = resume_verdict(mode="resume", pinned=pinned, source="resume", session_id="other")
    assert said == FAILED and "other" in why and pinned in why
    assert resume_verdict(mode="resume", pinned=pinned, source="startup", session_id="")[0] == FAILED


def test_the_pinned_session_s_own_first_start_told_late_says_nothing_of_a_resume():
    # Loom's fresh launch passes the id it pins, so `startup` with that id is the session's birth,
    # written late by a hook of the process before: a resume of it starts as `resume`.
    assert resume_verdict(mode="resume", pinned="p", source="startup", session_id="p") is None


def test_only_a_resume_s_boot_is_judged():
    pinned = "p"
    assert resume_verdict(mode="fresh", pinned=pinned, source="startup", session_id="q") is None
    for source in ("clear", "compact", ""):
        assert resume_verdict(mode="resume", pinned=pinned, source=source, session_id="q") is None
