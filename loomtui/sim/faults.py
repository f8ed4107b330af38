"""The faults the world can suffer, each a small change to its truth at the current instant.

Some faults only disturb probes (busy, a dialog, a slow boot): the world spaces them at least
three ack timeouts apart, and by a probe acked in time between them, so that "busy" keeps its
meaning (acks later than one timeout and sooner than two). Two disturbances back to back are
indistinguishable from deafness, to Loom and to anyone, and a recycle then would not be a false
one; time alone does not keep them apart: a tmux that hangs between two leaves no probe between
them (storm seed 12, day 18: a miss, fifteen minutes of probes that could not be typed, a miss).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loomtui.sim.engine import Sim

KINDS = (
    "crash", "exit0", "wedge", "sticky_wedge", "busy", "modal", "slow_boot", "resume_fails", "crash_loop",
    "poller_lost", "foreign_poller", "store_locked", "load", "tmux_hang", "tmux_vanish", "socket_lost",
    "job_break", "ignore_queue", "operator_recycle", "clock_forward", "clock_back", "long_turn", "stdin_closed",
)
# Faults only an agent whose turns Loom is told of (hooks, or the stream-json pump) can suffer, drawn
# beside the profile's (only then, so that a run without either replays as it always did): a long
# turn of the operator's, which misses every probe typed into it and must not be recycled before
# canary.max_turn.
HOOKED_KINDS = ("long_turn", "rate_limit", "permission")
# How long such a turn runs, in the world's terms, not Loom's (once drawn from `canary.max_turn`, so
# a config whose max_turn cut the operator's ordinary turns short could never show): up to LONG_TURN; one in
# RUNAWAY runs away (a loop of tool calls, a task that never converges) for a RUNAWAY_TURN, past the
# default max_turn of 2 h: Loom recycles it by design, and a report counts that apart
# (`hearing_recycles`, runaway_turn).
LONG_TURN = 100 * 60.0
RUNAWAY = 0.1
RUNAWAY_TURN = (2.5 * 3600.0, 4 * 3600.0)
HOOKED_WEIGHTS = (("long_turn", 2.0), ("rate_limit", 0.5), ("permission", 3.0))  # permission: only inside a turn
# A tool call of the operator's turn that waits for the operator's yes (Notification
# `permission_prompt`), answered after PERMISSION_WAIT: the turn says nothing meanwhile.
PERMISSION_WAIT = (60.0, 90 * 60.0)
# One wait in AWAY_SHARE is the operator's away: AWAY_WAIT, either side of the default `max_turn`
# (2 h), past which Loom takes the silent turn for a wedge and recycles it (turn_too_long).
AWAY_SHARE, AWAY_WAIT = 0.1, (90 * 60.0, 4 * 3600.0)
# An account's rate limit, told by the CLI's hooks only (StopFailure `rate_limit`): every turn fails
# for LIMIT_FOR, the payload giving the reset time half the time. Loom holds, never relaunches.
# One such spell in LIMIT_ERRORS' weights is the account's bill or its login instead (StopFailure
# `billing_error`, `authentication_failed`: no reset time; the operator mends it within LIMIT_FOR).
LIMIT_FOR = (600.0, 5 * 3600.0)
LIMIT_ERRORS = (("rate_limit", 0.8), ("billing_error", 0.1), ("authentication_failed", 0.1))
# Faults only a stream-json agent can suffer, drawn beside the profile's likewise: its CLI closes its
# stdin and runs on (hung on its way out, say), deaf for good; the pump's next write to it fails
# (`write_failed`) and it refuses every line after, as the real pump does. And a background task the
# CLI ran ends (`own_turn`): it takes a turn of its own, no line in it (pump_model.own_turn), most
# of them a minute or two (OWN_TURN), one in OWN_LONG working on as long as an operator's turn.
PUMPED_KINDS = ("stdin_closed", "own_turn")
PUMPED_WEIGHTS = (("stdin_closed", 0.5), ("own_turn", 2.0))
OWN_TURN, OWN_LONG = (5.0, 150.0), 0.2
# One broken job in HANG_SHARE hangs each run (a mount gone): it ends, failed, after HANG_TIME, past
# its allowance (schedule.run_allowance: its period and the grace) more often than not.
HANG_SHARE, HANG_TIME = 0.3, (300.0, 3 * 3600.0)
CLOCK_STEP = 86400.0  # a wall-clock step: a day forward or a day back (NTP after a wrong RTC, an operator's `date -s`)
DISTURBING = ("busy", "modal", "slow_boot", "long_turn", "own_turn")


def permission_wait(r: float) -> float:
    """How long the operator takes to answer a permission prompt, for a draw `r` in [0, 1): within
    PERMISSION_WAIT, or for the lowest AWAY_SHARE of draws within AWAY_WAIT (one draw either way)."""
    if r < AWAY_SHARE:
        low, high = AWAY_WAIT
        return low + (high - low) * r / AWAY_SHARE
    low, high = PERMISSION_WAIT
    return low + (high - low) * (r - AWAY_SHARE) / (1.0 - AWAY_SHARE)


def limit_of(r: float) -> tuple[str, bool]:
    """The account's trouble for a draw `r` in [0, 1): its error type by LIMIT_ERRORS' weights, and
    for a rate limit whether its payload gives the reset time (the lower half of its share). One
    draw for both: with a rate limit alone, the same draw gives what it gave before billing and
    login were modelled (a scripted run keeps its course)."""
    total = sum(weight for _, weight in LIMIT_ERRORS)
    low, high = 0.0, 1.0
    for error, weight in LIMIT_ERRORS[:-1]:
        high = low + weight / total
        if r < high:
            break
        low = high
    else:
        error, high = LIMIT_ERRORS[-1][0], 1.0  # the last takes what is left
    return error, error == "rate_limit" and (r - low) / (high - low) < 0.5


def apply(sim: Sim, kind: str) -> bool:
    """Inflict `kind` now; False when it could not apply (nothing to crash, too soon after another)."""
    w, rng = sim.world, sim.rng
    cfg = sim.config
    T = cfg.canary.ack_timeout
    a = w.agent if w.agent is not None and w.agent.alive else None
    if kind in HOOKED_KINDS and not sim.turns_told:
        return False
    if kind in PUMPED_KINDS and sim.pump is None:
        return False
    if kind == "modal" and not sim.driver.has_dialogs:
        return False  # no dialog exists in print mode (the stream-json driver): none can eat a line
    if kind == "own_turn" and (a is None or sim.pump is None or not sim.pump.can_take_own_turn(a)):
        return False  # checked before it counts as a disturbance
    if kind in ("busy", "long_turn") and w.limited():
        return False  # the operator's turn would fail at once: no turn to be busy with
    if kind in DISTURBING:
        pending = w.slow_boot_next or (a is not None and (a.busy_next or a.modal or a.turn_since is not None))
        # A pump runs one turn at a time: the operator's turn needs it between turns (a probe's, say).
        pending = pending or (sim.pump is not None and a is not None and not sim.pump.idle(a))
        if pending or w.t - w.last_disturbance < 3 * T or not w.heard_since_disturbance:
            return False
        w.last_disturbance, w.heard_since_disturbance = w.t, False
    if kind == "crash":
        if a is None:
            return False
        signal = rng.choice((None, 9, 11))
        w.kill(a, status=None if signal else rng.choice((1, 2, 134)), signal=signal)
    elif kind == "exit0":
        if a is None:
            return False
        w.kill(a, status=0, signal=None)
    elif kind in ("wedge", "sticky_wedge"):
        if a is None or a.deaf_since is not None:
            return False
        a.deaf_since = w.t
        if kind == "sticky_wedge":
            w.sticky_wedges.add(a.session)
    elif kind == "stdin_closed":
        if a is None or sim.pump is None or not sim.pump.close_stdin(a):
            return False
        if a.deaf_since is None:
            a.deaf_since = w.t  # it hears nothing more; a new CLI (a relaunch) reads its stdin again
    elif kind == "busy":
        if a is None:
            return False
        a.busy_next = True
        sim.begin_turn(a, None)  # a turn in progress: it ends once the next probe has waited
    elif kind == "long_turn":
        if a is None or not sim.turns_told:  # drawn only where turns are told (HOOKED_KINDS)
            return False
        runaway = rng.random() < RUNAWAY
        sim.begin_turn(a, w.t + (rng.uniform(*RUNAWAY_TURN) if runaway else rng.uniform(3 * T, max(3 * T, LONG_TURN))))
    elif kind == "own_turn":
        assert a is not None and sim.pump is not None
        long = rng.random() < OWN_LONG
        sim.pump.own_turn(a, w.t + (rng.uniform(3 * T, max(3 * T, LONG_TURN)) if long else rng.uniform(*OWN_TURN)))
    elif kind == "modal":
        if a is None:
            return False
        a.modal = True
    elif kind == "permission":
        if a is None or sim.hooks is None or sim.pump is not None or a.turn_since is None \
                or a.waiting_since is not None or w.limited() or not a.hearing():
            return False  # only a running turn's tool call asks (print mode asks no one)
        sim.hooks.ask_permission(a, w.t + permission_wait(rng.random()))
    elif kind == "rate_limit":
        if a is None or sim.hooks is None or w.limited():
            return False  # told by the hooks (StopFailure): a stream-json agent's too, where it has them
        w.limited_until = w.t + rng.uniform(*LIMIT_FOR)
        w.limit_error, w.limit_resets = limit_of(rng.random())
        w.limit_told = 1e18  # not yet: no turn has failed
    elif kind == "slow_boot":
        w.slow_boot_next = True
    elif kind == "resume_fails":
        pinned = sim.pinned()
        if pinned is None:
            return False
        w.conversations.discard(pinned)
        if a is not None:
            w.kill(a, status=1, signal=None)
    elif kind == "crash_loop":
        w.crash_loop_until = w.t + rng.uniform(1800.0, 4 * 3600.0)
        if a is not None:
            w.kill(a, status=1, signal=None)
    elif kind == "poller_lost":
        if a is None or not w.poller_configured or not a.poller:
            return False
        a.poller = False
        w.poller_lost_at = w.t
    elif kind == "foreign_poller":
        if not w.poller_configured or w.foreign_poller_since is not None:
            return False
        w.foreign_poller_since = w.t
    elif kind == "store_locked":
        if w.store_locked():
            return False
        w.store_locked_until = w.t + rng.uniform(30.0, 900.0)
        w.impair(w.store_locked_until)
        sim.lock_store(w.store_locked_until)
    elif kind == "load":
        w.load_until = w.t + rng.uniform(300.0, 3600.0)
        w.impair(w.load_until)
    elif kind == "tmux_hang":
        w.tmux_hang_until = w.t + rng.uniform(10.0, 1200.0)
        w.impair(w.tmux_hang_until)
    elif kind == "tmux_vanish":
        if not w.tmux_session:
            return False
        w.tmux_session = False
        if a is not None:
            w.kill(a, status=None, signal=1)
    elif kind == "socket_lost":
        if not w.tmux_session or w.socket_lost:
            return False
        w.socket_lost = True
    elif kind == "job_break":
        healthy = [j for j in w.jobs if j.broken_since is None]
        if not healthy:
            return False
        job = rng.choice(healthy)
        job.broken_since = w.t
        job.hangs = rng.random() < HANG_SHARE
    elif kind == "ignore_queue":
        if a is None:
            return False
        a.ignores_queue = True
    elif kind == "operator_recycle":
        sim.operator.recycle(rng.choice(("operator_resume", "operator_fresh")))
    elif kind in ("clock_forward", "clock_back"):
        # Only the wall clock moves: the monotonic clock, and the world's truth on it, run on.
        w.wall_offset += CLOCK_STEP if kind == "clock_forward" else -CLOCK_STEP
    else:
        raise ValueError(f"unknown fault {kind!r}")
    if kind in ("crash", "exit0", "resume_fails", "crash_loop", "tmux_vanish"):
        sim.exit_noticed()
    return True
