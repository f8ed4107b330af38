"""Deadlines that survive a step of the wall clock: the canary's next probe, timed holds, the
sentinel's backstops, missed schedules and the age of a Telegram command.

Within one boot each runs on the monotonic clock from its start, so a step of a day forward or
back changes nothing; across a reboot (another boot id) the stored wall times decide, as the
relaunch windows do (agent/policy.py). Each deadline is shown both ways, on the pure rules with
explicit Instants and through the real store where the shell records the start.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import threading
import time
from pathlib import Path

import pytest
import telegram
from harness import toml_value, wait_for

from loomtui import actions, clock, timing
from loomtui.agent import hold_rules, holds
from loomtui.agent.hold_rules import Hold
from loomtui.timing import Instant
from loomtui.canary import rules as canary_rules
from loomtui.canary import runs as canary_runs
from loomtui.canary.rules import ERROR, OK, PENDING, ProbeRun, due_in
from loomtui.config import load_config
from loomtui.context import Context
from loomtui.sentinel import queue, schedule
from loomtui.sentinel.queue_rules import CLAIMED, Escalate, Item, JobRun, decide, review
from loomtui.sentinel.tick import sentinel_tick
from loomtui.store import canary_runs as store_runs
from loomtui.store import ledger
from loomtui.store.db import Store
from loomtui.telegram.clock import Clock, command_age
from loomtui.telegram.commands import MAX_COMMAND_AGE, Poller

DAY = 86400.0
W = 1_800_000_000.0          # the wall clock at a deadline's start
M = 5_000.0                  # the monotonic clock then
BOOT, OTHER_BOOT = "boot-a", "boot-b"
STEPS = pytest.mark.parametrize("step", [DAY, -DAY], ids=["a_day_forward", "a_day_back"])


def later(seconds: float, step: float = 0.0, boot: str = BOOT) -> Instant:
    """`seconds` after the start on this boot, with the wall clock stepped by `step` meanwhile."""
    return Instant(W + seconds + step, M + seconds, boot)


def rebooted(seconds: float) -> Instant:
    """`seconds` after the start by the wall clock, on another boot (its own monotonic clock, which
    runs with that wall clock from then on)."""
    return Instant(W + seconds, 2 * DAY + seconds, OTHER_BOOT)


# -- the canary's next probe --------------------------------------------------------------------


@STEPS
def test_the_next_probe_keeps_its_interval_across_a_step_of_the_wall_clock(step):
    last = ProbeRun(W, OK, 1, False, M, BOOT)
    assert due_in(last, later(60, step), 1200, 180) == 1140
    assert due_in(last, later(1200, step), 1200, 180) == 0
    # A probe we could not type is retried after one ack timeout, jump or not.
    assert due_in(ProbeRun(W, ERROR, 1, False, M, BOOT), later(60, step), 1200, 180) == 120


def test_after_a_reboot_the_next_probe_is_measured_by_wall_time_and_never_waits_past_an_interval():
    last = ProbeRun(W, OK, 1, False, M, BOOT)
    assert due_in(last, rebooted(60), 1200, 180) == 1140
    assert due_in(last, rebooted(1300), 1200, 180) == 0
    # The wall clock of the new boot is a day behind the send: one interval, not a day and one.
    assert due_in(last, rebooted(-DAY), 1200, 180) == 1200
    # A run recorded before runs kept the monotonic clock is measured by wall time as it was.
    assert due_in(ProbeRun(W, OK), later(60, -DAY), 1200, 180) == 1200


@pytest.fixture
def ctx(tmp_path):
    c = Context.load(None, str(tmp_path / "state"), environ={})
    yield c
    c.close()


@STEPS
def test_a_recorded_probe_keeps_both_clocks_and_the_next_is_an_interval_away_after_a_step(ctx, step):
    now = clock.now()
    canary_runs.insert_run(ctx, "n-sent", "canary", OK, now.wall, now.wall + 180)
    [run] = canary_runs.recent_runs(ctx)
    assert run.boot == clock.boot_id() and run.sent_mono is not None
    stepped = Instant(now.wall + 30 + step, now.mono + 30, now.boot)
    interval = ctx.config.canary.interval
    assert interval - 31 <= due_in(run, stepped, interval, 180) <= interval - 29


@STEPS
def test_a_dead_probers_probe_is_settled_after_its_timeout_whatever_the_wall_clock_says(ctx, step):
    sent = Instant(W, M, BOOT)
    run = canary_runs.insert_run(ctx, "n-orphan", "canary", PENDING, W, W + 180, sent=sent)
    ledger.append(ctx.store, "canary_sent", source="canary", detail={"run": run, "ok": True})  # it was typed
    assert canary_runs.settle_stale(ctx, later(100, step)) == 0  # before its deadline: still in flight
    assert canary_runs.settle_stale(ctx, later(180 + canary_runs.SETTLE_SLACK, step)) == 1
    assert canary_runs.last_probe(ctx).result == canary_rules.MISS


@STEPS
def test_a_dead_probers_ack_is_read_on_the_sends_clock_when_the_wall_clock_stepped_since(ctx, step):
    # The ack file's mtime is wall time: a day ahead of the deadline after a step forward, it read as
    # a day late, a miss toward a recycle for an agent that answered in a second. Whether it came in
    # time cannot be told; that it came can.
    sent = Instant(W, M, BOOT)
    canary_runs.insert_run(ctx, "n-acked", "canary", PENDING, W, W + 180, sent=sent)
    ctx.acks_dir.mkdir(parents=True, exist_ok=True)
    ack = ctx.acks_dir / "n-acked"
    ack.write_text("")
    os.utime(ack, (W + 2 + step, W + 2 + step))  # acked 2 s after the send, the clock already stepped
    assert canary_runs.settle_stale(ctx, later(180 + canary_runs.SETTLE_SLACK, step)) == 1
    probe = canary_runs.last_probe(ctx)
    # On the send's clock the mtime less the step is the one reading between the send and now.
    assert probe.result == canary_rules.OK and probe.latency == pytest.approx(2.0)
    assert not ack.exists()
    # Truly late (600 s after the send, on the send's own clock), the clock stepped 120 s ahead
    # after it: late on either reading, a miss still.
    canary_runs.insert_run(ctx, "n-truly-late", "canary", PENDING, W, W + 180, sent=sent)
    (ctx.acks_dir / "n-truly-late").write_text("")
    os.utime(ctx.acks_dir / "n-truly-late", (W + 600, W + 600))
    assert canary_runs.settle_stale(ctx, later(700, 120)) == 1
    assert canary_runs.last_probe(ctx).result == canary_rules.MISS
    # In time on one reading, late on the other (250 s, or 130 s had the step come first): it came,
    # how long it took is not known, and it is never a miss on a guess.
    canary_runs.insert_run(ctx, "n-either", "canary", PENDING, W, W + 180, sent=sent)
    (ctx.acks_dir / "n-either").write_text("")
    os.utime(ctx.acks_dir / "n-either", (W + 250, W + 250))
    assert canary_runs.settle_stale(ctx, later(700, 120)) == 1
    either = canary_runs.last_probe(ctx)
    assert either.result == canary_rules.OK and either.latency is None and "cannot be told" in either.why
    assert either.describe().startswith("ok: acked (acked; in time or late cannot be told")
    # Without a step the ack's time is the wall clock's word, as before: late is a miss.
    canary_runs.insert_run(ctx, "n-late", "canary", PENDING, W, W + 180, sent=sent)
    (ctx.acks_dir / "n-late").write_text("")
    os.utime(ctx.acks_dir / "n-late", (W + 200, W + 200))
    assert canary_runs.settle_stale(ctx, later(180 + canary_runs.SETTLE_SLACK)) == 1
    assert canary_runs.last_probe(ctx).result == canary_rules.MISS


def test_a_probe_left_pending_by_another_boot_is_settled_at_once_whatever_its_date(ctx):
    # The daemon stopped with a probe in flight; the machine came back with its clock six hours
    # behind the send. By wall time its deadline never passed: pending, it held every scheduled
    # probe off (canary.loop's `pending`) as long as the clock stayed behind.
    run = canary_runs.insert_run(ctx, "n-before-reboot", "canary", PENDING, W + 6 * 3600, W + 6 * 3600 + 180,
                                 sent=Instant(W + 6 * 3600, M, BOOT))
    ledger.append(ctx.store, "canary_sent", source="canary", detail={"run": run, "ok": True})  # it was typed
    assert canary_runs.settle_stale(ctx, Instant(W, 12.0, OTHER_BOOT)) == 1
    assert canary_runs.last_probe(ctx).result == canary_rules.MISS
    assert not store_runs.any_with_result(ctx.store, ctx.agent, canary_rules.PENDING)


def joined_after_a_step(ctx, nonce: str, step: float, timeout: float) -> canary_runs.Probe:
    """A pending probe sent just now by the monotonic clock, whose send the wall clock read as
    `step` off what it reads now (it stepped by `step` since), as a prober joining it finds it."""
    now = clock.now()
    sent_at = now.wall - step
    sent = Instant(sent_at, now.mono, now.boot)
    ctx.acks_dir.mkdir(mode=0o700, exist_ok=True)
    run_id = canary_runs.insert_run(ctx, nonce, "canary", PENDING, sent_at, sent_at + timeout, sent=sent)
    return canary_runs.probe_from(ctx.store.query_one("SELECT * FROM canary_runs WHERE id = ?", (run_id,)),
                                  joined=True)


@STEPS
def test_a_joined_probe_acked_in_time_is_an_ack_whatever_the_wall_clock_did(ctx, step):
    from loomtui.canary import probe

    run = joined_after_a_step(ctx, "n-joined-ack", step, 60.0)
    (ctx.acks_dir / "n-joined-ack").touch()
    assert probe.wait(ctx, run).result == OK  # by the wall clock, a day late (forward) or early


@STEPS
def test_a_joined_probe_without_an_ack_misses_after_its_timeout_not_a_day(ctx, step):
    from loomtui.canary import probe

    run = joined_after_a_step(ctx, "n-joined-miss", step, 1.5)
    waited: list = []
    # Stepped back, the wall deadline lies a day ahead: the wait must end on its own (well before
    # the poll's deadline), not be timed. A daemon thread: a wait that hangs fails the poll, not pytest.
    threading.Thread(target=lambda: waited.append(probe.wait(ctx, run)), daemon=True).start()
    [verdict] = wait_for(lambda: waited, 120, what="the joined probe's wait to end")
    assert verdict.result == canary_rules.MISS


# -- timed holds ----------------------------------------------------------------------------------


@STEPS
def test_a_timed_hold_lasts_its_duration_across_a_step_of_the_wall_clock(step):
    hold = Hold(W, "operator", "deploying", W + 1800, mono=M, boot=BOOT)
    assert hold_rules.active(hold, later(60, step)) and hold_rules.remaining(hold, later(60, step)) == 1740
    assert hold_rules.describe(hold, later(600, step)) == "held by the operator: deploying (20m left)"
    assert hold_rules.refuses(hold, "relaunch", automatic=True, now=later(1799, step))
    assert hold_rules.expired(hold, later(1800, step)) and hold_rules.remaining(hold, later(1800, step)) == 0


def test_after_a_reboot_a_timed_hold_ends_by_its_wall_time():
    hold = Hold(W, "operator", "deploying", W + 1800, mono=M, boot=BOOT)
    assert hold_rules.remaining(hold, rebooted(60)) == 1740
    assert hold_rules.expired(hold, rebooted(1800))
    # A new boot whose wall clock lies before the hold's start: at most its duration, not a day more.
    assert hold_rules.remaining(hold, rebooted(-DAY)) == 1800


@STEPS
def test_a_stored_hold_keeps_its_start_and_expires_on_time_in_the_store(ctx, step):
    holds.place(ctx, by="operator", reason="deploying", until=W + 1800, source="cli", now=Instant(W, M, BOOT))
    stored = holds.stored(ctx)
    assert (stored.mono, stored.boot) == (M, BOOT)
    assert holds.current(ctx, later(60, step)) is not None
    assert holds.expire(ctx, source="watchdog", now=later(1799, step)) is None
    assert holds.expire(ctx, source="watchdog", now=later(1801, step)) is not None
    assert holds.stored(ctx) is None


@STEPS
def test_an_operators_hold_placed_through_the_actions_survives_a_step(ctx, step):
    change = actions.hold(ctx, "deploying", 1800.0, source="cli")
    now = clock.now()
    stepped = Instant(now.wall + step, now.mono + 5, now.boot)
    assert change.hold.boot == clock.boot_id()
    assert actions.admit(ctx, "relaunch", cause="crash", source="watchdog", now=stepped) is not None
    assert 1790 <= hold_rules.remaining(holds.stored(ctx), stepped) <= 1800


@STEPS
def test_the_hold_shown_is_the_hold_enforced_after_a_step(ctx, step):
    """An hour's hold placed ten minutes ago by the monotonic clock, while the wall clock stepped a
    day since: the loops refuse recovery, and status, the console's line, the metrics and Telegram
    all say held (judged by the wall clock alone, a step forward would show no hold at all)."""
    from prometheus_client.core import CollectorRegistry
    from prometheus_client.exposition import generate_latest

    from loomtui.daemon.metrics import StoreCollector
    from loomtui.report import status as status_mod
    from loomtui.telegram.commands import format_status
    from loomtui.tui.agents_view import hold_cell
    from loomtui.tui.snapshot import hold_text

    now = clock.now()
    placed = Instant(now.wall - 600 - step, now.mono - 600, now.boot)  # the wall clock stepped by `step` since
    holds.place(ctx, by="operator", reason="deploying", until=placed.wall + 3600, source="cli", now=placed)
    assert actions.admit(ctx, "relaunch", cause="crash", source="watchdog") is not None  # enforced
    status = status_mod.gather(ctx, events=0, look=False)
    assert status.hold is not None and status.hold.reason == "deploying"
    assert 2990 <= hold_rules.remaining(status.hold, status.moment) <= 3000
    assert "deploying" in hold_text(status.hold, status.moment)
    assert "deploying" in hold_cell(status.hold, status.moment)
    assert "HELD" in format_status(status)
    registry = CollectorRegistry()
    registry.register(StoreCollector(ctx, dict))
    exposition = generate_latest(registry).decode()
    assert 'loom_hold{agent="main",by="operator",reason="deploying"} 1.0' in exposition
    # The console passes the wall time it shows: the same verdict.
    shown = status_mod.gather(ctx, events=0, look=False, now=time.time())
    assert shown.hold is not None


# -- the sentinel's backstops -----------------------------------------------------------------


class Settings:
    backstop = 1800.0
    renudge = 1200.0


def item(**kw) -> Item:
    base = dict(id=7, job="backup", kind="exit", signature="exit code 1", sample="run 1 exited 1", log="/l",
                first_seen=W, last_seen=W, nudges=1, last_nudge_at=W, first_seen_mono=M, first_seen_boot=BOOT)
    return Item(**{**base, **kw})


def escalates(it: Item, now: Instant, window: float | None = None) -> bool:
    return any(isinstance(a, Escalate) for a in decide(it, Settings, now, witness_window=window))


@STEPS
def test_an_open_items_backstop_runs_its_full_time_across_a_step(step):
    it = item()
    assert not escalates(it, later(60, step))
    assert not escalates(it, later(1799, step))
    assert escalates(it, later(1800, step))


@STEPS
def test_a_claims_backstop_runs_its_full_time_across_a_step(step):
    claimed = item(state=CLAIMED, claimed_at=W + 100, claimed_mono=M + 100, claimed_boot=BOOT)
    assert not escalates(claimed, later(100 + 2399, step), window=2400)
    assert escalates(claimed, later(100 + 2400, step), window=2400)


def test_after_a_reboot_the_backstops_run_by_wall_time():
    assert not escalates(item(), rebooted(1799)) and escalates(item(), rebooted(1800))
    claimed = item(state=CLAIMED, claimed_at=W, claimed_mono=M, claimed_boot=BOOT)
    assert not escalates(claimed, rebooted(1799)) and escalates(claimed, rebooted(1800))
    # A new boot whose wall clock is a day behind: the backstop is not pushed a day away (it runs
    # from the first sighting as though just now), and an older item is measured as it always was.
    assert not escalates(item(), rebooted(-DAY))
    assert escalates(item(first_seen_mono=None, first_seen_boot=None), Instant(W + 1800))


def test_a_run_started_after_the_claim_on_the_monotonic_clock_witnesses_it_whatever_its_wall_time():
    claimed = item(state=CLAIMED, claimed_at=W, claimed_mono=M, claimed_boot=BOOT)
    # Started 60 s after the claim, but the wall clock had been stepped back a day meanwhile.
    after = JobRun(1, "backup", W - DAY + 60, 0, 0, started_mono=M + 60, boot=BOOT)
    assert review(claimed, after, W)[1][0][0] == "queue_witness"
    # Started before the claim, though its wall time (stepped forward) says after.
    before = JobRun(2, "backup", W + DAY - 60, 0, 0, started_mono=M - 60, boot=BOOT)
    assert review(claimed, before, W) == (claimed, [])


def test_a_job_run_records_its_start_on_both_clocks_and_the_sentinel_reads_them(fleet):
    from loomtui.sentinel.jobrun import run_job
    from loomtui.sentinel.tick import unreviewed_runs

    ctx = fleet([{"name": "backup"}], {}).ctx
    before = clock.monotonic()
    assert run_job(ctx, "backup", ["true"]).exit_code == 0
    after = clock.monotonic()
    [run] = unreviewed_runs(ctx, time.time())[0]["backup"]
    assert run.boot == clock.boot_id() and run.started_mono is not None
    assert before <= run.started_mono <= after  # a reading of this boot's clock, taken during the run, not the wall's


# -- the sentinel tick: backstops and missed schedules through the store ----------------------------


class Fleet:
    def __init__(self, root: Path, jobs: list[dict], sentinel: dict) -> None:
        root.mkdir(parents=True)
        lines = [f"state_dir = {toml_value(str(root / 'state'))}", "[sentinel]"]
        lines += [f"{k} = {toml_value(v)}" for k, v in sentinel.items()]
        # The nudges go the real way, to a tmux socket no server listens on (they fail, are not
        # counted, and the backstops run on), never to the default socket an operator's Loom uses.
        lines += ["[agent]", f"tmux_socket = {toml_value('loomtest-nopane-' + secrets.token_hex(4))}"]
        for job in jobs:
            log = root / f"{job['name']}.log"
            log.write_text("INFO fine\n")
            lines.append("[[jobs]]")
            lines += [f"{k} = {toml_value(v)}" for k, v in {"log": str(log), **job}.items()]
        (root / "loom.toml").write_text("\n".join(lines) + "\n")
        self.ctx = Context.load(str(root / "loom.toml"), None, environ={})

    def run(self, job: str, started: float, exit_code: int = 0) -> None:
        with self.ctx.store.write() as db:
            db.execute("INSERT INTO job_runs(job, started, ended, exit_code, duration) VALUES (?, ?, ?, ?, 1.0)",
                       (job, started, started + 1.0, exit_code))

    def tick(self, now: Instant):
        return sentinel_tick(self.ctx, now, notify=True)

    def missed(self) -> list[Item]:
        return [i for i in queue.listing(self.ctx.store) if i.kind == "missed"]


@pytest.fixture
def fleet(tmp_path):
    made: list[Fleet] = []

    def make(jobs, sentinel=None):
        made.append(Fleet(tmp_path / f"f{len(made)}", jobs, {"missed_grace": "5m", **(sentinel or {})}))
        return made[-1]

    yield make
    for f in made:
        f.ctx.close()


@STEPS
def test_an_open_items_backstop_in_the_store_runs_on_the_monotonic_clock(fleet, step):
    f = fleet([{"name": "backup"}], {"backstop": "30m"})
    f.run("backup", W - 10, exit_code=1)
    assert f.tick(later(0)).new_items
    [it] = queue.unresolved_items(f.ctx.store)
    assert (it.first_seen_mono, it.first_seen_boot) == (M, BOOT)
    assert f.tick(later(600, step)).escalated == []
    assert f.tick(later(1800, step)).escalated == [it.id]


@STEPS
def test_a_step_of_the_wall_clock_is_not_a_missed_schedule(fleet, step):
    f = fleet([{"name": "sync", "schedule": "every 1h"}])
    f.run("sync", W - 600)
    assert f.tick(later(0)).new_items == []             # the pass before the step: watching, all on time
    # A day forward: every slot of the skipped day looks missed on the wall clock; none was.
    # A day back: the last run lies a day ahead; measured from it nothing would be missed for a day.
    assert f.tick(later(600, step)).new_items == [] and f.missed() == []
    # The wait started over where the clock landed: the job's next slot after it is the first it can
    # miss, and missing it is reported an hour and its grace later, not a day.
    assert f.tick(later(600 + 3600 + 290, step)).new_items == []
    assert f.tick(later(600 + 3600 + 310, step)).new_items != []
    assert [i.signature for i in f.missed()] == ["missed schedule"]


@STEPS
def test_a_job_that_keeps_to_its_schedule_after_a_step_is_never_missed(fleet, step):
    f = fleet([{"name": "sync", "schedule": "every 1h"}])
    f.run("sync", W - 600)
    f.tick(later(0))
    for hour in range(1, 6):
        f.run("sync", W + step + hour * 3600 - 600)   # cron runs it by the stepped wall clock
        f.tick(later(hour * 3600 - 300, step))
    assert f.missed() == []


def test_a_cron_schedule_stepped_a_day_forward_misses_nothing(fleet):
    f = fleet([{"name": "nightly", "schedule": "0 3 * * *"}])
    f.run("nightly", W - 3600)
    f.tick(later(0))
    assert f.tick(later(3600, DAY)).new_items == [] and f.missed() == []


def test_after_a_reboot_a_missed_schedule_is_measured_by_wall_time(fleet):
    f = fleet([{"name": "sync", "schedule": "every 1h"}])
    f.run("sync", W - 600)
    f.tick(later(0))
    assert f.tick(rebooted(3000 - 600 + 200)).new_items == []   # the slot plus its grace not yet past
    assert f.tick(rebooted(3600 - 600 + 310)).new_items != [] and len(f.missed()) == 1


def test_the_step_and_where_the_wait_runs_from_are_pure_functions_of_instants():
    assert timing.clock_jump(Instant(W, M, BOOT), later(60, DAY)) == DAY
    assert timing.clock_jump(Instant(W, M, BOOT), later(60, -DAY)) == -DAY
    assert timing.clock_jump(Instant(W, M, BOOT), rebooted(60)) == 0.0 and not timing.stepped(None, later(60))
    assert not timing.stepped(Instant(W, M, BOOT), later(600, 30.0))  # a slew, not a step
    assert schedule.wait_from((W - 600, None, W + DAY), W) == W - 600   # a start a day ahead is no reference
    assert schedule.wait_from((W + DAY,), W) == W


# -- the age of a Telegram command -----------------------------------------------------------------


@STEPS
def test_a_command_sent_while_loom_listened_is_fresh_whatever_the_wall_clock_says(step):
    started, heard = Instant(W - 600, M - 600, BOOT), Instant(W, M, BOOT)
    sent = W + 10                                       # Telegram's clock: the true time
    # Stepped forward, our wall clock calls it a day old; stepped back, a day from now: it is 20 s at most.
    assert command_age(sent, started, heard, Instant(W + 20 + step, M + 20, BOOT)) == 20


@STEPS
def test_a_command_sent_during_an_outage_is_as_old_as_the_outage_allows(step):
    started, heard = Instant(W - 600, M - 600, BOOT), Instant(W, M, BOOT)  # the last answer before an hour of silence
    age = command_age(W + 100, started, heard, Instant(W + 3600 + step, M + 3600, BOOT))
    assert MAX_COMMAND_AGE < age <= 3600


def test_an_unstepped_clock_trusts_telegrams_date_even_for_a_message_held_back():
    # No step since the poller began: a message Telegram dates an hour back, delivered right after
    # an answered getUpdates (held back on Telegram's side), is an hour old.
    started, heard = Instant(W - 600, M - 600, BOOT), Instant(W, M, BOOT)
    assert command_age(W - 3600, started, heard, Instant(W + 5, M + 5, BOOT)) == 3605
    # A slew of less than a minute is no step.
    assert command_age(W - 3600, started, heard, Instant(W + 50, M + 5, BOOT)) == 3650


def test_without_an_answer_on_this_boot_the_wall_clocks_decide():
    started = Instant(W - 600, M - 600, BOOT)
    assert command_age(W - 30, started, None, Instant(W, M, BOOT)) == 30
    assert command_age(W - 30, Instant(W - 60, 1.0, OTHER_BOOT), Instant(W - 60, 1.0, OTHER_BOOT),
                       Instant(W, M, BOOT)) == 30
    assert command_age(W + 30, started, None, Instant(W, M, BOOT)) == 0.0  # our clock behind Telegram's


class Stepped(Clock):
    """The system's clocks with the wall clock stepped by `step`."""

    def __init__(self, step: float) -> None:
        self.step = step

    def time(self) -> float:
        return time.time() + self.step


class Operator:
    agents = ("main",)

    def __init__(self) -> None:
        self.asked: list[str] = []

    def recycle(self, agent: str, mode: str) -> str:
        self.asked.append(f"recycle {mode}")
        return f"relaunched {mode}"

    def close(self) -> None:
        pass


def telegram_update(uid: int, age: float) -> telegram.Update:
    message = {"message_id": uid * 10, "date": int(time.time() - age), "text": "/recycle fresh",
               "chat": {"id": 5151, "type": "private"}, "from": {"id": 5151, "is_bot": False, "first_name": "o"}}
    return telegram.Update.de_json({"update_id": uid, "message": message}, telegram.Bot("1:clock-jump-test"))


@pytest.fixture
def poller_for(tmp_path):
    path = tmp_path / "loom.toml"
    path.write_text("[telegram]\nchat_id = 5151\ncommands = true\n")
    cfg = load_config(str(path), {})[0]
    stores = []

    def make(clock_: Clock, operator: Operator) -> Poller:
        (tmp_path / f"s{len(stores)}").mkdir()
        stores.append(Store.in_dir(tmp_path / f"s{len(stores)}"))
        return Poller(stores[-1], cfg.telegram, telegram.Bot("1:clock-jump-test"), operator, clock_,
                      username="loom_bot")

    yield make
    for s in stores:
        s.close()


@STEPS
def test_the_poller_runs_a_fresh_command_after_a_step_and_refuses_one_from_an_outage(poller_for, step):
    operator = Operator()
    stepped = Stepped(0.0)
    poller = poller_for(stepped, operator)              # it began before the step
    stepped.step = step
    poller.listened = stepped.now()                     # Telegram answered just now
    asyncio.run(poller.handle(telegram_update(1, age=0)))
    assert operator.asked == ["recycle fresh"]
    # An hour of silence (no answer since), and a command Telegram dates from its start.
    now = stepped.now()
    poller.listened = Instant(now.wall - 3600, now.mono - 3600, now.boot)
    asyncio.run(poller.handle(telegram_update(2, age=3500)))
    assert operator.asked == ["recycle fresh"]


def test_the_supervisors_heartbeat_ages_on_the_monotonic_clock_whatever_the_wall_clock_did(ctx):
    """Stepped back an hour after the daemon's last beat (and the daemon dead since): by wall time
    the beat lay an hour ahead and read fresh until the clock caught up; `loom check` said nothing."""
    from fake_clock import FakeClock

    from loomtui.report import check_rules, status
    from loomtui.store import heartbeats

    virtual = FakeClock(W, M, BOOT)
    with clock.use(virtual):
        heartbeats.beat(ctx.store, "supervisor", {"pid": 1})
        virtual.at_wall -= 3600
        virtual.advance(120)
        assert status.gather(ctx, look=False).supervisor.age == pytest.approx(120.0)
        assert 120.0 > check_rules.supervisor_stale_after(ctx.config.watchdog.interval)


def test_a_heartbeat_of_another_boot_is_never_fresh_whatever_the_wall_clock_says(ctx):
    """A box whose clock came back behind its last beat after a power cut (fake-hwclock), and whose
    daemon did not come back: by wall time the beat lay ahead, and `loom check` said OK until the
    clock caught up. Its writer went with that boot: at least as old as this one."""
    from fake_clock import FakeClock

    from loomtui.report import check_rules, status
    from loomtui.store import heartbeats

    before = FakeClock(W, M, BOOT)
    with clock.use(before):
        heartbeats.beat(ctx.store, "supervisor", {"pid": 1})
    after = FakeClock(W - 600, 45.0, OTHER_BOOT)  # 45 s into the new boot, the wall clock 10 min behind
    with clock.use(after):
        age = status.gather(ctx, look=False).supervisor.age
        assert age == pytest.approx(45.0)
        stale_after = check_rules.supervisor_stale_after(ctx.config.watchdog.interval)
        assert age > stale_after
        facts = check_rules.HostFacts(heartbeat_age=age, stale_after=stale_after, telegram_on=False)
        code, line = check_rules.verdict([], facts)
        assert code == check_rules.CRITICAL and "not running" in line
