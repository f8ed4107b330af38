"""A hold the harness placed, in the operator's words: the agent CLI reported a quota, a bill or a
login (hooks/harness_rules), so Loom holds without a relaunch until a turn succeeds or the hold
runs out. The rules' own line (`held by the harness (rate_limited): the agent CLI reported
rate_limit`) names Loom's parts; the console says what is wrong and what ends it."""

from __future__ import annotations

from loomtui.agent import hold_rules
from loomtui.durations import format_duration
from loomtui.timing import Instant

# harness_rules.CAUSES, each as a word or two the operator knows.
PLAIN = {"rate_limited": "rate-limited", "billing": "billing issue", "auth": "login failed"}
ENDS = "until a turn succeeds"


def _left(hold: hold_rules.Hold, now: Instant | float) -> str:
    left = hold_rules.remaining(hold, now)
    return "" if left is None else format_duration(left)


def line(hold: hold_rules.Hold, now: Instant | float) -> str:
    """`rate-limited until a turn succeeds (28m left)`; "" for any other hold (the rules' line)."""
    plain = PLAIN.get(hold.cause) if hold.by == "harness" else None
    if plain is None:
        return ""
    left = _left(hold, now)
    return f"{plain} {ENDS}" + (f" ({left} left)" if left else "")


def cell(hold: hold_rules.Hold, now: Instant | float) -> str:
    """The agents view's narrow column: `rate-limited 28m: until a turn succeeds`; "" as `line`."""
    plain = PLAIN.get(hold.cause) if hold.by == "harness" else None
    if plain is None:
        return ""
    left = _left(hold, now)
    return f"{plain}{' ' + left if left else ''}: {ENDS}"
