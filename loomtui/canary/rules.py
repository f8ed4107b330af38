"""The canary's rules, pure: when the next probe is due and when misses mean "deaf".

Only misses count toward a recycle: a probe we could not type (`inject_failed`), one we
chose not to send (`skipped`) or one that failed on our side (`error`) says nothing about
whether the agent hears. Misses are counted per launch (a relaunch starts the count again)
and never during boot grace; an `ok` ends a run of misses.

A relaunch is a claim until a probe of its own launch acks. Its first probe goes out as soon as
the agent is ready, whatever the schedule; from then on the ordinary rules carry on (a miss
re-probes at once and counts like any miss; an `ok` witnesses the relaunch).

The next probe is measured from the last one's send on the monotonic clock when both readings
are of one boot, so a wall clock stepped back a day does not leave the agent unprobed for a day
(nor one stepped forward probe early); across boots by the stored wall times, and a send that
seems to lie in the future counts as just now: the wait is never longer than one interval.
"""

from __future__ import annotations

from dataclasses import dataclass

from loomtui.timing import Instant, age, as_instant

OK, MISS, PENDING = "ok", "miss", "pending"
INJECT_FAILED, SKIPPED, ERROR = "inject_failed", "skipped", "error"
RESULTS = (OK, MISS, PENDING, INJECT_FAILED, SKIPPED, ERROR)


@dataclass(frozen=True)
class ProbeRun:
    sent_at: float
    result: str
    launch_seq: int = 0
    in_grace: bool = False
    sent_mono: float | None = None  # the monotonic clock at the send, on boot `boot`
    boot: str | None = None

    @property
    def sent(self) -> Instant:
        return Instant(self.sent_at, self.sent_mono, self.boot)


def consecutive_misses(runs: list[ProbeRun], launch_seq: int) -> int:
    """Trailing misses of the current launch, outside boot grace (runs oldest first)."""
    count = 0
    for run in runs:
        if run.launch_seq != launch_seq or run.in_grace:
            continue
        if run.result == OK:
            count = 0
        elif run.result == MISS:
            count += 1
    return count


def due_in(last: ProbeRun | None, now: Instant | float, interval: float, ack_timeout: float) -> float:
    """Seconds until the next scheduled probe: a miss re-probes at once (its timeout already
    passed), anything else waits a full interval from the last probe."""
    if last is None:
        return 0.0
    if last.result == MISS:
        return 0.0
    since = age(last.sent, as_instant(now))
    if last.result in (ERROR, INJECT_FAILED):
        # Our own fault or no pane: look again after one ack timeout, not a whole interval.
        return max(0.0, min(ack_timeout, interval) - since)
    return max(0.0, interval - since)


def past_deadline(sent: Instant, deadline: float, now: Instant | float, slack: float) -> bool:
    """A pending probe's ack timeout (its stored deadline less its send) and `slack` have passed
    since it was sent, by the clock `age` trusts."""
    return age(sent, as_instant(now)) >= deadline - sent.wall + slack


def should_recycle(runs: list[ProbeRun], launch_seq: int, misses_to_recycle: int) -> bool:
    return consecutive_misses(runs, launch_seq) >= misses_to_recycle


def witness_due(runs: list[ProbeRun], launch_seq: int, ready: bool) -> bool:
    """A probe is due now to witness relaunch `launch_seq`: the agent is ready and nothing has
    been sent to this launch yet (a probe we chose not to send, `skipped`, does not count)."""
    if launch_seq <= 0 or not ready:
        return False
    return not any(run.launch_seq == launch_seq and run.result != SKIPPED for run in runs)
