"""The canary's rules, pure: when the next probe is due and when misses mean "deaf".

Only misses count toward a recycle: a probe we could not type (`inject_failed`), one we
chose not to send (`skipped`) or one that failed on our side (`error`) says nothing about
whether the agent hears. Misses are counted per launch (a relaunch starts the count again)
and never during boot grace; an `ok` ends a run of misses, and so does a miss whose ack came
after all (`late`: the agent heard, slowly). A miss the agent's hooks explain (`excused`: it was
typed into a busy turn, or one waiting on a permission prompt; hooks.turn_rules) neither counts
nor ends a run, and does not call for the at-once re-probe a miss otherwise does. Misses decide
only while the newest of them is fresh: found more than an ack timeout after its deadline (a
locked store, a daemon that was down, a busy turn's misses counted once it went quiet), they tell
of the agent as it was, and one probe more goes out first (at once after the miss; an ack timeout
after a try of Loom's own that failed). A backoff that outlasts the ack timeout meets misses gone
stale the same way: the recycle waits for the look again, up to an ack timeout.

A relaunch is a claim until a probe of its own launch acks. Its first probe goes out as soon as
the agent is ready, whatever the schedule; from then on the ordinary rules carry on (a miss
re-probes at once and counts like any miss; an `ok` witnesses the relaunch).

The next probe is measured from the last one's send on the monotonic clock when both readings
are of one boot, so a wall clock stepped back a day does not leave the agent unprobed for a day
(nor one stepped forward probe early); across boots by the stored wall times, and a send that
seems to lie in the future counts as just now: the wait is never longer than one interval.
"""

from __future__ import annotations

import math
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
    late: bool = False              # a miss whose ack came after its deadline: the agent heard it
    excused: str = ""               # why this miss says nothing of deafness ("" : it counts)
    deadline: float | None = None   # its ack deadline (wall), as stored

    @property
    def sent(self) -> Instant:
        return Instant(self.sent_at, self.sent_mono, self.boot)


def consecutive_misses(runs: list[ProbeRun], launch_seq: int) -> int:
    """Trailing misses of the current launch, outside boot grace (runs oldest first)."""
    count = 0
    for run in runs:
        if run.launch_seq != launch_seq or run.in_grace:
            continue
        if run.result == OK or (run.result == MISS and run.late):
            count = 0
        elif run.result == MISS and not run.excused:
            count += 1
    return count


def due_in(last: ProbeRun | None, now: Instant | float, interval: float, ack_timeout: float) -> float:
    """Seconds until the next scheduled probe: a miss re-probes at once (its timeout already
    passed), an error or a skip looks again after one ack timeout, anything else waits a full
    interval from the last probe; so does a miss acked late
    or excused by a busy turn (another probe would only queue behind the first)."""
    if last is None:
        return 0.0
    if last.result == MISS and not (last.late or last.excused):
        return 0.0
    since = age(last.sent, as_instant(now))
    if last.result in (ERROR, INJECT_FAILED, SKIPPED):
        # Our own fault, no pane, or a relaunch under way (the watchdog's second look held
        # recycle.lock, and may have found nothing to do): look again after one ack timeout, not a
        # whole interval. A skip had put off the re-probe a miss calls for by twenty minutes.
        return max(0.0, min(ack_timeout, interval) - since)
    return max(0.0, interval - since)


def past_deadline(sent: Instant, deadline: float, now: Instant | float, slack: float) -> bool:
    """A pending probe's ack timeout (its stored deadline less its send) and `slack` have passed
    since it was sent, by the clock `age` trusts; or it was sent on another boot: its prober and
    the agent it was typed into went with that boot (by wall time a send dated ahead, a clock
    that came back behind, never passed its deadline, and the pending probe held every scheduled
    probe off as long as the clock stayed behind)."""
    now = as_instant(now)
    if sent.boot is not None and now.boot is not None and sent.boot != now.boot:
        return True
    return age(sent, now) >= deadline - sent.wall + slack


def ack_deadline(sent_at: float, ack_timeout: float, booting_for: float | None, boot_grace: float) -> float:
    """When a probe sent at `sent_at` (wall) misses: its ack timeout later; or, for a probe handed to
    a pump whose CLI has said nothing since its launch `booting_for` seconds before the send (None
    otherwise), not before the rest of the boot grace and then the ack timeout have passed.

    The tmux driver types no probe before the boot grace ends (or the screen shows the agent ready).
    The pump takes one at once, so that a quick boot is witnessed at once; but a CLI booting slowly,
    inside the grace the operator gave it, is not deaf. Without this a slow boot missed twice and
    was recycled (the simulator, README's stream-json config with hooks: the dispatch witness
    hastened a second probe, and two misses came 2 minutes into a boot allowed 90 s and an ack).
    The launch's age is the monotonic clock's: a wall clock stepped back since the launch would have
    stretched the wait by the step (a day's step, a day), a deaf agent's recycle with it."""
    return sent_at + ack_timeout + (max(0.0, boot_grace - booting_for) if booting_for is not None else 0.0)


def should_recycle(runs: list[ProbeRun], launch_seq: int, misses_to_recycle: int,
                   now: Instant | float | None = None, fresh_for: float = math.inf) -> bool:
    """Enough trailing misses of this launch, the newest of them fresh: its deadline passed at most
    `fresh_for` (the ack timeout) before `now`. A run of misses found late (the loop could not look
    while the store was locked, the daemon was down, a busy turn's misses counted once it went
    quiet) tells of the agent as it was then: probe once more first, and the misses, that one
    with them, decide. The simulator, README's hooked config: a dialog ate two probes, the store
    was locked until after the operator closed it, and the agent, hearing again, was recycled
    on misses six minutes old."""
    if consecutive_misses(runs, launch_seq) < misses_to_recycle:
        return False
    if now is None:
        return True
    newest = next(r for r in reversed(runs) if r.launch_seq == launch_seq and not r.in_grace
                  and r.result == MISS and not r.late and not r.excused)
    return not stale(newest, now, fresh_for)


def stale(run: ProbeRun, now: Instant | float, fresh_for: float) -> bool:
    """Run `run`'s deadline passed more than `fresh_for` before `now`, by the clock `age` trusts
    (the monotonic within a boot); a run sent on another boot is stale. A run with no stored
    deadline is taken as fresh."""
    if run.deadline is None:
        return False
    now = as_instant(now)
    if run.boot is not None and now.boot is not None and run.boot != now.boot:
        return True
    return age(run.sent, now) - (run.deadline - run.sent_at) > fresh_for


def witness_due(runs: list[ProbeRun], launch_seq: int, ready: bool) -> bool:
    """A probe is due now to witness relaunch `launch_seq`: the agent is ready and nothing has
    been sent to this launch yet (a probe we chose not to send, `skipped`, does not count)."""
    if launch_seq <= 0 or not ready:
        return False
    return not any(run.launch_seq == launch_seq and run.result != SKIPPED for run in runs)


# -- the canary loop's order, as one rule ------------------------------------------------------
#
# Each tick asks, in this order: do the misses mean deaf (recover)? is a hold in force (nothing
# until it ends)? is a relaunch waiting for its witness (probe it once recycle.lock is free and the
# agent is ready and no permission prompt is open; one whose readiness only its boot grace can
# bring waits out the grace)?
# is the next probe not yet due (wait that long)? is a relaunch under way, or a probe of another
# process pending (look again soon)? would a probe now be typed into an open permission prompt
# (wait: the keys could answer it)? else probe. A fact is gathered only when the rule asks for it
# (ASK): some cost a tmux capture (whether a booting agent is ready), and the loop took none of
# them before an earlier answer decided.

RECOVER, WAIT, PROBE, WITNESS, ASK = "recover", "wait", "probe", "witness", "ask"
FACTS = ("misses_mean_deaf", "held", "witness_due", "recycle_locked", "ready", "due_in", "under_way", "pending",
         "hold_left", "grace_left", "withheld")


@dataclass(frozen=True)
class CanaryFacts:
    """What the canary loop knows this tick; None: not gathered yet."""

    waiting: float                        # how soon to look again while something is pending
    misses_mean_deaf: bool | None = None  # should_recycle over this launch's runs
    held: bool | None = None              # a hold is in force
    witness_due: bool | None = None       # the last relaunch has had no probe yet (were the agent ready)
    recycle_locked: bool | None = None    # a relaunch holds recycle.lock
    ready: bool | None = None             # the agent may be probed (launches.agent_ready)
    due_in: float | None = None           # seconds until the next scheduled probe
    under_way: bool | None = None         # a relaunch holds recycle.lock or the agent is booting
    pending: bool | None = None           # a probe (of this or another process) awaits its ack
    hold_left: float | None = None        # seconds until the hold in force ends by itself (inf: until released)
    grace_left: float | None = None       # seconds until only the boot grace makes a booting agent ready
                                          # (0: a look at it may find it ready sooner: a ready_match, a pump)
    withheld: bool | None = None          # the agent's hooks say a probe now would answer its permission prompt


@dataclass(frozen=True)
class Step:
    """What the tick does: recover, wait, probe, probe as the relaunch's witness, or gather
    `fact` first (ASK). `after`: seconds until the loop's next look (None: its period, or a doorbell).
    `quiet`: this answer rests on the store and the clock alone (a hold in force, no probe pending), so a look before
    the store changes, a doorbell rings or `after` passes would give it again (the simulator skips
    those looks; the daemon takes them, every CANARY_PERIOD, as a safety net)."""

    kind: str
    after: float | None = None
    fact: str = ""
    quiet: bool = False


def next_step(f: CanaryFacts) -> Step:
    if f.misses_mean_deaf is None:
        return Step(ASK, fact="misses_mean_deaf")
    if f.misses_mean_deaf:
        return Step(RECOVER)
    if f.held is None:
        return Step(ASK, fact="held")
    if f.held:
        if f.hold_left is None:
            return Step(ASK, fact="hold_left")
        if f.pending is None:
            return Step(ASK, fact="pending")
        # A timed hold ends by itself: look again then; an untimed one ends by a release (the store).
        # A probe still pending (its prober gone) is settled by a look past its deadline: not quiet.
        return Step(WAIT, max(f.hold_left, f.waiting) if f.hold_left < math.inf else None, quiet=not f.pending)
    if f.witness_due is None:
        return Step(ASK, fact="witness_due")
    if f.witness_due:
        # The last relaunch is still a claim: probe it the moment the agent is ready.
        if f.recycle_locked is None:
            return Step(ASK, fact="recycle_locked")
        if f.recycle_locked:
            return Step(WAIT, f.waiting)
        if f.ready is None:
            return Step(ASK, fact="ready")
        if f.ready:
            # Not into a permission prompt the new process opened meanwhile (a hold, the harness's
            # say, had kept the witness back): its Enter could answer the operator's dialog. The
            # hooked storm, seed 4, day 15: the hold ran out 11 minutes into such a prompt.
            if f.withheld is None:
                return Step(ASK, fact="withheld")
            return Step(WAIT) if f.withheld else Step(WITNESS, f.waiting)
        if f.grace_left is None:
            return Step(ASK, fact="grace_left")
        # Nothing on its screen can say it is ready: its boot grace will, in `grace_left`.
        return Step(WAIT, max(f.waiting, f.grace_left))
    if f.due_in is None:
        return Step(ASK, fact="due_in")
    if f.due_in > 0:
        return Step(WAIT, f.due_in)
    if f.under_way is None:
        return Step(ASK, fact="under_way")
    if f.under_way:
        return Step(WAIT, f.waiting)  # typed into a booting or replaced agent, a probe proves nothing
    if f.pending is None:
        return Step(ASK, fact="pending")
    if f.pending:
        return Step(WAIT, f.waiting)
    if f.withheld is None:
        return Step(ASK, fact="withheld")
    if f.withheld:
        return Step(WAIT)  # until the prompt closes (a hook event), looked at every period
    return Step(PROBE, f.waiting)
