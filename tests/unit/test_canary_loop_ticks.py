"""The canary loop's ticks that decide without touching the pane: misses that mean deaf go to
actions.recover (the hold or the backoff answering), a hold in force waits out its time, a relaunch
waits for recycle.lock before its witness, and a probe not yet due waits until it is. What the
loop says and when it looks again are what the daemon acts on. A real store in a temporary state
dir, on a clock the test sets; no tick here reaches the pane (the simulation covers those)."""

from __future__ import annotations

import math

import pytest

from fake_clock import FakeClock
from loomtui import actions, clock
from loomtui.canary import runs
from loomtui.canary.loop import CanaryLoop
from loomtui.context import Context
from loomtui.store import ledger, locks

T0 = 1_800_000_000.0
MONO = 9000.0
BOOT = "boot-a"


@pytest.fixture(autouse=True)
def fixed_clock():
    with clock.use(FakeClock(T0, MONO, BOOT)) as c:
        yield c


@pytest.fixture
def ctx(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[canary]\ninterval = "20m"\nack_timeout = "2s"\nmisses_to_recycle = 2\n')
    c = Context.load(str(config), str(tmp_path / "state"), environ={})
    yield c
    c.close()


def probe(ctx, result: str, ago: float) -> int:
    """A probe sent `ago` seconds before now, settled as `result`."""
    sent = clock.Instant(T0 - ago, MONO - ago, BOOT)
    run = runs.insert_run(ctx, f"n{ago}-{result}", "canary", runs.PENDING, sent.wall, sent.wall + 2, sent=sent)
    runs.settle_run(ctx, run, result, ack_at=sent.wall + 1 if result == runs.OK else None)
    return run


def test_it_looks_often_while_something_is_pending_but_never_oftener_than_a_second(tmp_path, ctx):
    assert CanaryLoop(ctx).waiting == 0.5  # a quarter of the 2 s ack timeout
    slow = Context.load(None, str(tmp_path / "slow"), environ={})  # the default 3 min ack timeout
    try:
        assert CanaryLoop(slow).waiting == 1.0
    finally:
        slow.close()


def test_two_misses_mean_deaf_and_a_hold_answers_the_recovery(ctx):
    loop = CanaryLoop(ctx)
    probe(ctx, runs.MISS, 4.0)
    assert not loop.misses_mean_deaf()
    probe(ctx, runs.MISS, 2.0)
    assert loop.misses_mean_deaf()
    actions.hold(ctx, "deploying", None, source="cli")
    assert loop.tick() == "canary_failed: held: held by the operator: deploying (until released)"
    [refusal] = ledger.tail(ctx.store, 10, kinds=["refused"])
    assert (refusal.source, refusal.cause, refusal.detail["action"]) == ("canary", "canary_failed", "relaunch")


def test_misses_found_late_are_looked_at_again_before_they_recycle(ctx):
    """The loop could not look past the second miss's deadline (a locked store, a daemon down):
    what the misses said is of the agent then. The next probe is due at once; a miss of it
    recycles, an ok ends the run."""
    loop = CanaryLoop(ctx)
    probe(ctx, runs.MISS, 10.0)
    probe(ctx, runs.MISS, 6.0)  # its deadline 4 s ago, the ack timeout 2 s
    assert not loop.misses_mean_deaf()
    assert loop._facts()["due_in"]() == 0.0
    probe(ctx, runs.MISS, 2.0)  # the look again, missed just now
    assert loop.misses_mean_deaf()
    probe(ctx, runs.OK, 1.0)
    assert not loop.misses_mean_deaf()


def test_a_stopping_daemons_canary_relaunches_nothing(ctx):
    """Deaf as the daemon stops: a relaunch (the old agent stopped, a new one launched, its boot
    watched for the boot grace) would hold up the stop, writing into a store about to close. The
    next daemon's canary finds the misses again."""
    import threading

    stop = threading.Event()
    loop = CanaryLoop(ctx, stop)
    probe(ctx, runs.MISS, 4.0)
    probe(ctx, runs.MISS, 2.0)
    # A hold keeps a canary that would relaunch from reaching the pane (none here may): it would
    # say "held", and record its refusal; one that stops first asks nothing of the hold.
    actions.hold(ctx, "deploying", None, source="cli")
    stop.set()
    assert loop.tick() == "canary_failed: not relaunched, the daemon is stopping"
    assert ledger.tail(ctx.store, 10, kinds=["relaunch", "relaunch_failed", "refused"]) == []


def test_deaf_inside_the_backoff_waits_for_it(ctx):
    ledger.append(ctx.store, "relaunch", source="watchdog", cause="crash", ts=T0 - 2.0,
                  detail={"mode": "resume", "mono": MONO - 2.0, "boot": BOOT})
    probe(ctx, runs.MISS, 1.5)
    probe(ctx, runs.MISS, 1.0)  # both to the launch just made
    assert CanaryLoop(ctx).tick() == "canary_failed: waiting: backoff: 5s after relaunch 1"
    assert ledger.tail(ctx.store, 10, kinds=["escalation"]) == []


def test_an_ok_after_the_misses_means_hearing(ctx):
    probe(ctx, runs.MISS, 300.0)
    probe(ctx, runs.MISS, 200.0)
    probe(ctx, runs.OK, 100.0)
    loop = CanaryLoop(ctx)
    assert not loop.misses_mean_deaf()
    assert loop.tick() == "" and loop.next_look == pytest.approx(1100.0)  # the 20 min interval from the ok
    assert [r.result for r in runs.recent_runs(ctx)] == [runs.MISS, runs.MISS, runs.OK]  # nothing sent before it is due


def test_a_hold_waits_out_its_time_or_until_released(ctx):
    loop = CanaryLoop(ctx)
    actions.hold(ctx, "deploying", 600.0, source="cli")
    assert loop.tick() == "" and loop.next_look == 600.0 and loop.quiet
    assert loop._hold_left() == 600.0
    actions.release(ctx, source="cli")
    assert loop._hold_left() == 0.0  # released since the look that found it
    actions.hold(ctx, "until I say", None, source="cli")
    assert loop._hold_left() == math.inf
    assert loop.tick() == "" and loop.next_look is None and loop.quiet  # no end: nothing before its period


def test_a_probe_pending_under_a_hold_is_looked_at_again(ctx):
    runs.insert_run(ctx, "pending", "canary", runs.PENDING, T0 - 1.0, T0 + 60.0)
    actions.hold(ctx, "deploying", 600.0, source="cli")
    loop = CanaryLoop(ctx)
    assert loop.tick() == "" and loop.next_look == 600.0 and not loop.quiet


def test_a_relaunchs_witness_waits_for_recycle_lock(ctx):
    ledger.append(ctx.store, "relaunch", source="watchdog", cause="crash", ts=T0 - 30.0,
                  detail={"mode": "resume", "mono": MONO - 30.0, "boot": BOOT})
    loop = CanaryLoop(ctx)
    with locks.hold(ctx.agent_dir, locks.RECYCLE):
        assert loop.tick() == "" and loop.next_look == loop.waiting and not loop.quiet
    assert runs.recent_runs(ctx) == []  # nothing probed while the relaunch held the lock


def test_a_tick_the_store_refused_is_recorded_as_an_error_run_once_the_store_takes_writes(ctx):
    """Two misses mean deaf, a hold answers the recovery, and the refusal must be written: another
    connection holds SQLite's write lock. The tick says the store failed it (never the agent's
    miss), looks again soon, and the next tick that can write files an `error` run for it first."""
    import sqlite3

    probe(ctx, runs.MISS, 4.0)
    probe(ctx, runs.MISS, 2.0)
    actions.hold(ctx, "deploying", None, source="cli")
    ctx.store.conn.execute("PRAGMA busy_timeout = 50")  # the lock's wait, not the store's 10 s
    loop = CanaryLoop(ctx)
    other = sqlite3.connect(ctx.store.path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        said = loop.tick()
        assert said.startswith("store unavailable during the probe: ") and "locked" in said, said
        assert (loop.next_look, loop.quiet) == (loop.waiting, False)
        assert [r.result for r in runs.recent_runs(ctx)] == [runs.MISS, runs.MISS]  # nothing written yet
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert loop.tick() == "canary_failed: held: held by the operator: deploying (until released)"
    assert [r.result for r in runs.recent_runs(ctx)] == [runs.MISS, runs.MISS, runs.ERROR]
    [error] = ledger.tail(ctx.store, 10, kinds=["canary"])[-1:]
    assert (error.source, error.cause, error.detail["result"], error.detail["why"]) == \
        ("canary", runs.ERROR, runs.ERROR, said)
    assert error.ts == T0 and loop.unrecorded_error == ""
    assert len(ledger.tail(ctx.store, 10, kinds=["refused"])) == 1
    # Recorded once: the tick after does not file it again.
    assert loop.tick().startswith("canary_failed: held") and len(runs.recent_runs(ctx)) == 3


def test_a_tick_refused_at_its_first_write_is_not_taken_for_a_quiet_answer(ctx):
    """The store refuses the tick's very first write (settling a probe past its deadline): the
    loop's answer is neither quiet nor final, and it looks again soon."""
    import sqlite3

    runs.insert_run(ctx, "stale", "canary", runs.PENDING, T0 - 600.0, T0 - 300.0)
    ctx.store.conn.execute("PRAGMA busy_timeout = 50")
    loop = CanaryLoop(ctx)
    other = sqlite3.connect(ctx.store.path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        assert loop.tick().startswith("store unavailable during the probe: ")
        assert (loop.next_look, loop.quiet) == (loop.waiting, False)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert [r.result for r in runs.recent_runs(ctx)] == [runs.PENDING]  # nothing settled while refused
