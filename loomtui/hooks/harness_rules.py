"""What the agent CLI's own reports decide (sealed: the standard library only, `now` passed in).

Two kinds of report are evidence enough to act on:

- A turn that failed for a cause a restart cannot fix (StopFailure `rate_limit`, `billing_error`,
  `authentication_failed` and their kin: a quota or a login) holds the agent, with that cause and
  no relaunch; the hold ends by itself when a later turn succeeds (a Stop after the hold began)
  or at its end: the reset time where the payload gives one (never trusted beyond MAX_AHEAD), else
  DEFAULT_HOLD, after which the canary looks again. The operator is told once: not for a failure
  of the same cause while held, nor right after such a hold ran out with no success in between.
  Every other error type (`server_error`, `overloaded`, ...) is recorded and nothing more.
- A resume's SessionStart: `source` resume with the pinned session id proves the conversation
  came back; `source` startup, or another session id, is a resume that failed (the harness itself
  says it started another conversation): the one case where a hook alone leads to a relaunch, a
  fresh one through the resume-failure path.
"""

from __future__ import annotations

from dataclasses import dataclass

# The error types that hold, and the hold's cause for each (Claude Code 2.1's StopFailure
# `error` values: a quota, a bill or a login; none is fixed by starting the CLI again).
HOLDING = {
    "rate_limit": "rate_limited",
    "billing_error": "billing",
    "account_on_hold": "billing",
    "authentication_failed": "auth",
    "oauth_org_not_allowed": "auth",
    "verification_required": "auth",
    "cloud_credential_error": "auth",
}
CAUSES = frozenset(HOLDING.values())
# Every error type Claude Code 2.1 is known to report: a metric's label is one of these or "other"
# (the event is the agent's own text: a label per new word would be a series for good).
KNOWN_ERRORS = frozenset((*HOLDING, "server_error", "overloaded", "invalid_request", "max_output_tokens", "unknown"))
DEFAULT_HOLD = 30 * 60.0   # no reset time given: the canary looks again after this long
MAX_AHEAD = 24 * 3600.0    # a reset time further ahead is taken as this far
MIN_HOLD = 60.0            # a reset time already past, or seconds away, holds at least this long
EXPIRED = "expired"        # holds.release's `how` for a hold that ran out

PROVEN, FAILED = "proven", "failed"
RESUME = "resume"


@dataclass(frozen=True)
class Held:
    """The hold in force, as these rules need it: whose, its cause, when it began (wall)."""

    harness: bool
    cause: str
    since: float
    mono: float | None = None  # the monotonic clock at `since`, on boot `boot` (None: wall time only)
    boot: str | None = None


@dataclass(frozen=True)
class Ended:
    """The last harness hold that ended: its cause, when, and how (expired, succeeded, release...)."""

    cause: str
    at: float
    how: str


@dataclass(frozen=True)
class HoldFor:
    """A failed turn's hold: its cause, how long, and whether the operator is told."""

    cause: str
    seconds: float
    tell: bool


def cause_of(error_type: str) -> str | None:
    """The hold's cause for a StopFailure's error type; None: the normal path (recorded only)."""
    return HOLDING.get(error_type)


def hold_seconds(now: float, resets_at: float | None, default: float = DEFAULT_HOLD) -> float:
    """Until the reset time where one is given (bounded both ways), else `default`."""
    if resets_at is None or resets_at != resets_at:  # NaN says nothing
        return default
    return min(max(resets_at - now, MIN_HOLD), MAX_AHEAD)


def on_failure(error_type: str, *, now: float, resets_at: float | None, held: Held | None,
               last: Ended | None, succeeded_since_end: bool, default: float = DEFAULT_HOLD) -> HoldFor | None:
    """A StopFailure: the hold to place (or renew), or None (not a holding cause, or an operator's
    or the ceiling's hold is in force: it stays, and the operator already knows of it).

    Told once: a failure of the cause already held renews the hold silently; so does one right
    after a hold of the same cause ran out with no successful turn since (a still-limited agent
    failing the canary's next look). A new cause, or one after a success or a release, is news."""
    cause = cause_of(error_type)
    if cause is None or (held is not None and not held.harness):
        return None
    seconds = hold_seconds(now, resets_at, default)
    if held is not None:
        return HoldFor(cause, seconds, tell=held.cause != cause)
    repeat = last is not None and last.how == EXPIRED and last.cause == cause and not succeeded_since_end
    return HoldFor(cause, seconds, tell=not repeat)


def on_success(held: Held | None, stopped_at: float, stopped_mono: float | None = None,
               stopped_boot: str | None = None) -> bool:
    """A Stop (a turn that succeeded) ends the harness's hold when it came after the hold began: by
    the monotonic clock where both were read on one boot (the wall clock stepped back between
    them dated the success before the hold, which then lasted its whole time, a day with a reset
    time), by wall time otherwise."""
    if held is None or not held.harness:
        return False
    if held.mono is not None and stopped_mono is not None and held.boot is not None and held.boot == stopped_boot:
        return stopped_mono >= held.mono
    return stopped_at >= held.since


def resume_verdict(*, mode: str, pinned: str, source: str, session_id: str) -> tuple[str, str] | None:
    """A SessionStart after a launch, judged: (PROVEN or FAILED, why), or None when the launch was
    no resume or the event says nothing about its boot: `clear`, `compact`, or `startup` with the
    pinned id, which is that session's own first start (Loom's fresh launch passes the id it pins)
    told late, by a hook of the process before (a resume of it starts as `resume`; one that fails
    to find it starts another id). Taken for this boot's, it wiped a conversation that had come back
    (storm seed 4, day 7.9, docs/SIM.md)."""
    if mode != RESUME or source not in (RESUME, "startup"):
        return None
    if source == "startup":
        if session_id and session_id == pinned:
            return None
        return FAILED, f"the resume started a new conversation (SessionStart startup, session {session_id or '?'})"
    if session_id != pinned:
        return FAILED, f"the resume came back as another session ({session_id or '?'}, not {pinned})"
    return PROVEN, f"SessionStart resume with the pinned session {pinned}"
