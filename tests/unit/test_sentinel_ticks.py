"""The sentinel's tick in Loom's real code (issue 25's mutants of sentinel/tick.py): what it
records in the real store from the job_runs rows and the logs, what it tells the operator, and
what its report says."""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import replace

import pytest
from harness import toml_value
from test_sentinel_scan import Fleet

from loomtui import clock
from loomtui.agent import holds, proctree
from loomtui.context import Context
from loomtui.errors import LoomError
from loomtui.sentinel import claims, cron, queue, queue_rules
from loomtui.sentinel.signature import normalize
from loomtui.sentinel import tick as tick_mod
from loomtui.sentinel.queue_rules import Escalate
from loomtui.sentinel.tick import SentinelReport, sentinel_tick
from loomtui.states import MEMORY_QUEUE
from loomtui.store import ledger, outbox, queue_items

NOPANE = {"tmux_socket": "loomtest-nopane-"}  # nudges go the real way, to a socket no server listens on


def nopane() -> dict:
    return {"tmux_socket": NOPANE["tmux_socket"] + secrets.token_hex(4)}


def disk_full(tmp_path) -> Fleet:
    """One job, `backup`, whose log says its disk is full; a 30-minute backstop; nudges to no pane."""
    f = Fleet(tmp_path / "fleet", [{"name": "backup"}], {"backstop": "30m"}, agent=nopane())
    f.write("backup", "ERROR disk full\n")
    return f


def add_run(f: Fleet, job: str, started: float, *, ended: float | None, exit_code: int | None = None,
            error: str | None = None, pid: int | None = None, pid_started: float | None = None) -> int:
    with f.ctx.store.write() as db:
        cur = db.execute("INSERT INTO job_runs(job, started, ended, exit_code, duration, error, pid, pid_started) "
                         "VALUES (?, ?, ?, ?, 1.0, ?, ?, ?)", (job, started, ended, exit_code, error, pid, pid_started))
        return cur.lastrowid


def run_row(f: Fleet, run_id: int):
    return f.ctx.store.query("SELECT * FROM job_runs WHERE id = ?", (run_id,))[0]


def test_a_report_says_what_the_pass_did():
    quiet = SentinelReport(5.0)
    assert quiet.describe() == ("0 jobs, 0 new bytes, 0 failure lines; new items -; recurred -; reopened -; "
                                "witnessed -; nudged -; escalated -")
    busy = SentinelReport(5.0, jobs=2, bytes_read=30, lines=4, failure_lines=3, runs_reviewed=1, new_items=[1],
                          recurred=[2], reopened=[3], witnessed=[4], nudged=[5], nudge_failed=[6],
                          nudges_deferred=2, nudges_held=[7], relaunching=True, escalated=[8], errors=["x"])
    assert busy.describe() == (
        "2 jobs, 30 new bytes, 3 failure lines; new items [1]; recurred [2]; reopened [3]; witnessed [4]; "
        "nudged [5]; escalated [8]; nudge failed [6]; nudges held by a hold [7]; "
        "2 nudges deferred to the next tick; nudges held: a relaunch is under way")
    assert busy.as_dict() == {
        "now": 5.0, "jobs": 2, "bytes_read": 30, "lines": 4, "failure_lines": 3, "runs_reviewed": 1,
        "new_items": [1], "recurred": [2], "reopened": [3], "witnessed": [4], "nudged": [5], "nudge_failed": [6],
        "nudges_deferred": 2, "nudges_held": [7], "relaunching": True, "escalated": [8], "errors": ["x"]}


def test_a_pass_counts_the_lines_and_failure_lines_it_read(tmp_path):
    f = Fleet(tmp_path / "fleet", [{"name": "app"}, {"name": "other"}])
    try:
        text = "INFO one\nERROR two broke\nINFO three\nFATAL four\n"
        f.write("app", text)
        report = f.tick(1000.0)
        assert (report.jobs, report.bytes_read, report.lines, report.failure_lines) == (2, len(text), 4, 2)
        assert report.now == 1000.0 and len(report.new_items) == 2 and report.runs_reviewed == 0
    finally:
        f.ctx.close()


def test_finished_died_running_and_orphaned_runs_are_judged_as_they_stand(tmp_path):
    f = Fleet(tmp_path / "fleet", [{"name": "backup"}, {"name": "sync"}])
    try:
        f.write("backup", "")
        f.write("sync", "")
        failed = add_run(f, "backup", 900.0, ended=901.0, exit_code=3)
        errored = add_run(f, "backup", 910.0, ended=911.0, exit_code=0, error="cannot exec /bin/nothere")
        clean = add_run(f, "backup", 920.0, ended=921.0, exit_code=0)
        # A run-job gone without an end (its pid is no process), and one still running (this one).
        died = add_run(f, "sync", 930.0, ended=None, pid=2**22 + 7, pid_started=1.0)
        me = os.getpid()
        running = add_run(f, "sync", 940.0, ended=None, pid=me, pid_started=proctree.of(f.ctx).start_time(me))
        orphan = add_run(f, "removed-job", 950.0, ended=951.0, exit_code=9)
        report = f.tick(1000.0)

        items = {(i.job, i.kind, i.signature): i for i in f.items()}
        assert set(items) == {("backup", "exit", "exit code 3"), ("backup", "exit", "cannot exec /bin/nothere"),
                              ("sync", "exit", "run-job ended without recording the exit (killed?)")}
        assert items["backup", "exit", "exit code 3"].sample == f"run {failed} exited 3"
        assert items["backup", "exit", "cannot exec /bin/nothere"].sample == f"run {errored}: cannot exec /bin/nothere"
        gone = items["sync", "exit", "run-job ended without recording the exit (killed?)"]
        assert gone.sample == f"run {died}: run-job ended without recording the exit (killed?)"
        assert report.runs_reviewed == 4 and report.witnessed == [] and report.reopened == []
        assert {i.log for i in f.items() if i.job == "backup"} == {str(f.log("backup"))}
        # The dead run's row now ends at the pass, with why; the running one is left for a later pass.
        row = run_row(f, died)
        assert (row["ended"], row["error"], row["reviewed"]) == (
            1000.0, "run-job ended without recording the exit (killed?)", 1)
        assert [run_row(f, r)["reviewed"] for r in (failed, errored, clean, running, orphan)] == [1, 1, 1, 0, 1]
        assert run_row(f, running)["ended"] is None and run_row(f, orphan)["ended"] == 951.0
        assert {e.detail["job"] for e in ledger.tail(f.ctx.store, 50, kinds=["queue_new"])} == {"backup", "sync"}

        again = f.tick(1010.0)
        assert again.runs_reviewed == 0 and again.new_items == [] and run_row(f, running)["reviewed"] == 0
    finally:
        f.ctx.close()


def test_a_nudge_typed_whose_count_was_lost_is_counted_at_the_next_pass_not_typed_again(tmp_path):
    # The daemon killed between a nudge's typing (its queue_nudge event, ok) and its count, or
    # restarted after the store refused the count: the next daemon's pass typed it again.
    f = disk_full(tmp_path)
    try:
        f.tick(1000.0, notify=False)
        [item] = f.items()
        ledger.append(f.ctx.store, "queue_nudge", source="sentinel", ts=1001.0,
                      detail={"item": item.id, "job": "backup", "nudge": 1, "renudge": False, "ok": True})
        report = f.tick(1002.0, notify=True)
        assert report.nudged == [item.id] and report.nudge_failed == []
        assert len(ledger.tail(f.ctx.store, 20, kinds=["queue_nudge"])) == 1  # typed once
        [counted] = f.items()
        assert (counted.nudges, counted.last_nudge_at) == (1, 1001.0)
    finally:
        f.ctx.close()


def test_a_log_that_cannot_be_read_is_an_item_saying_why(tmp_path):
    f = Fleet(tmp_path / "fleet", [{"name": "app"}])
    try:
        f.log("app").mkdir(parents=True)  # a directory where the log should be: opening it fails
        report = f.tick(1000.0)
        [item] = f.items()
        assert (item.kind, item.sample) == ("scan", f"cannot read the log {f.log('app')}: Is a directory")
        assert item.signature == normalize(item.sample) and item.signature.endswith(": Is a directory")
        assert report.new_items == [item.id] and report.bytes_read == 0
        again = f.tick(1001.0)  # still unreadable: the same item, seen once more each pass
        assert again.new_items == [] and again.recurred == [item.id] and [i.count for i in f.items()] == [2]
        # Claimed, and still unreadable at the next pass: the claim did not hold.
        claims.resolve(f.ctx, item.id, "fixed the permissions", source="cli", now=1002.0)
        assert f.tick(1003.0).reopened == [item.id]
        assert reopen_whys(f) == ["scan failure seen after the claim"]
    finally:
        f.ctx.close()


def test_a_missed_schedule_says_since_when(tmp_path):
    f = Fleet(tmp_path / "fleet", [{"name": "sync", "schedule": "every 10m"}], {"missed_grace": "5m"})
    try:
        f.write("sync", "")
        start = 1_700_000_000.0
        add_run(f, "sync", start, ended=start + 1, exit_code=0)
        f.tick(start + 2)
        assert f.items() == []
        report = f.tick(start + 7200)
        [item] = f.items()
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(start + 600))
        assert (item.kind, item.signature, item.sample) == ("missed", "missed schedule",
                                                            f"no run since {when} (every 10m)")
        assert report.new_items == [item.id]
        assert f.tick(start + 7201).new_items == [] and [i.count for i in f.items()] == [1]
    finally:
        f.ctx.close()


def test_a_failed_nudge_says_why_and_a_held_one_is_not_tried(tmp_path):
    f = Fleet(tmp_path / "fleet", [{"name": "backup"}], agent=nopane())
    try:
        f.write("backup", "ERROR disk full\n")
        report = f.tick(1000.0, notify=True)
        [item] = f.items()
        assert report.nudge_failed == [item.id] and report.nudged == [] and report.nudges_held == []
        [error] = report.errors
        assert error.startswith(f"nudge of item {item.id} failed: ") and len(error) > len(f"nudge of item {item.id} failed: ")
        [attempt] = ledger.tail(f.ctx.store, 10, kinds=["queue_nudge"])
        assert attempt.source == "sentinel" and attempt.detail["ok"] is False
        assert {k: attempt.detail[k] for k in ("item", "job", "nudge", "renudge")} == {
            "item": item.id, "job": "backup", "nudge": 1, "renudge": False}
        assert queue.get(f.ctx.store, item.id).nudges == 0

        holds.place(f.ctx, by="operator", reason="hands off", until=None, source="cli", now=1001.0)
        held = f.tick(1060.0, notify=True)
        assert held.nudges_held == [item.id] and held.nudge_failed == [] and held.errors == []
        assert len(ledger.tail(f.ctx.store, 10, kinds=["queue_nudge"])) == 1
        assert queue.get(f.ctx.store, item.id).nudges == 0
    finally:
        f.ctx.close()


def escalations(ctx: Context):
    return ledger.tail(ctx.store, 50, kinds=["queue_escalate"])


def test_the_backstop_tells_the_operator_once_with_the_ledgers_head(tmp_path):
    f = disk_full(tmp_path)
    try:
        t0 = 1_000_000.0
        f.tick(t0, notify=True)
        [item] = f.items()
        assert f.tick(t0 + 29 * 60, notify=True).escalated == []
        report = f.tick(t0 + 31 * 60, notify=True)
        assert report.escalated == [item.id]
        [message] = outbox.recent(f.ctx.store)
        [esc] = escalations(f.ctx)
        # The head as it stood when the escalation was written: the event just before its own.
        [before] = [e for e in ledger.tail(f.ctx.store, 50) if e.id == esc.id - 1]
        assert not message.text.startswith("[")
        assert message.text.endswith(f". See loom queue. ledger {ledger.format_head(before.id, before.hash)}")
        assert ledger.verify(f.ctx.store, kept=(before.id, before.hash)).ok
        assert (esc.source, esc.agent, esc.ts) == ("sentinel", "main", t0 + 31 * 60)
        assert esc.detail == {"item": item.id, "job": "backup", "outbox": message.id}
        assert message.created == t0 + 31 * 60 and message.dedupe_key == f"queue-{item.id}-backstop"
        assert queue.get(f.ctx.store, item.id).escalated_at == t0 + 31 * 60
        later = f.tick(t0 + 60 * 60, notify=True)
        assert later.escalated == [] and len(outbox.recent(f.ctx.store)) == 1 and len(escalations(f.ctx)) == 1
    finally:
        f.ctx.close()


def test_with_several_agents_the_operator_is_told_whose_item_it_was(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    config = tmp_path / "config.toml"
    config.write_text("\n".join([
        f"state_dir = {toml_value(str(tmp_path / 'state'))}", "[sentinel]", 'backstop = "30m"',
        "[[agents]]", 'name = "alpha"', f"tmux_socket = {toml_value(nopane()['tmux_socket'])}",
        "[[agents]]", 'name = "beta"', f"tmux_socket = {toml_value(nopane()['tmux_socket'])}",
        "[[jobs]]", 'name = "report"', f"log = {toml_value(str(logs / 'report.log'))}", 'agent = "beta"',
    ]) + "\n")
    ctx = Context.load(str(config), None, environ={})
    try:
        (logs / "report.log").write_text("ERROR report broke\n")
        t0 = 1_000_000.0
        sentinel_tick(ctx, t0, notify=True)
        [item] = queue.listing(ctx.store)
        assert item.agent == "beta"
        [attempt] = ledger.tail(ctx.store, 10, kinds=["queue_nudge"])
        assert attempt.agent == "beta"  # tried on beta's pane, and recorded as beta's
        assert sentinel_tick(ctx, t0 + 31 * 60, notify=True).escalated == [item.id]
        [message] = outbox.recent(ctx.store)
        assert message.text.startswith("[beta] ") and " ledger " in message.text
        [esc] = escalations(ctx)
        assert esc.agent == "beta" and esc.detail["job"] == "report"
    finally:
        ctx.close()


def test_the_pass_keeps_its_clock_for_the_next_one_only_when_a_job_is_scheduled(tmp_path):
    from loomtui.timing import Instant

    f = Fleet(tmp_path / "fleet", [{"name": "sync", "schedule": "every 1h"}])
    plain = Fleet(tmp_path / "plain", [{"name": "app"}])
    try:
        f.write("sync", "")
        plain.write("app", "")
        at = Instant(1_700_000_000.0, 5000.0, "boot-1")
        f.tick(at)
        plain.tick(at)
        assert json.loads(f.ctx.store.get_meta("sentinel_clock")) == {
            "wall": 1_700_000_000.0, "mono": 5000.0, "boot": "boot-1"}
        assert plain.ctx.store.get_meta("sentinel_clock") is None
    finally:
        f.ctx.close()
        plain.ctx.close()


def test_an_item_escalated_since_it_was_read_is_not_escalated_again(tmp_path):
    # escalate() reads the item's escalated_at again in its own transaction: an Escalate decided on
    # an older read (another pass got there first) tells the operator nothing more, nor one for an
    # item that is gone.
    f = disk_full(tmp_path)
    try:
        t0 = 1_000_000.0
        f.tick(t0, notify=False)
        [stale] = f.items()
        assert f.tick(t0 + 31 * 60, notify=True).escalated == [stale.id]
        report = SentinelReport(t0 + 32 * 60)
        for item_id in (stale.id, stale.id + 100):
            tick_mod.escalate(f.ctx, replace(stale, id=item_id), Escalate(item_id, "again", "k"), t0 + 32 * 60, report)
        assert report.escalated == [] and len(outbox.recent(f.ctx.store)) == 1 and len(escalations(f.ctx)) == 1
        assert queue.get(f.ctx.store, stale.id).escalated_at == t0 + 31 * 60
    finally:
        f.ctx.close()


def test_an_item_claimed_since_the_pass_read_it_is_not_told_to_the_operator_as_open(tmp_path):
    # A pass reads its items, then types its nudges (seconds); the agent's `loom resolve` lands
    # meanwhile. The operator was told "has an open failure" of an item already claimed.
    f = disk_full(tmp_path)
    try:
        t0 = 1_000_000.0
        f.tick(t0, notify=False)
        [read] = f.items()
        claims.resolve(f.ctx, read.id, "freed space", source="cli", now=t0 + 31 * 60)
        report = SentinelReport(t0 + 31 * 60)
        tick_mod.escalate(f.ctx, read, Escalate(read.id, "open for 31m", "k"), t0 + 31 * 60, report)
        assert report.escalated == [] and outbox.recent(f.ctx.store) == [] and escalations(f.ctx) == []
    finally:
        f.ctx.close()


def test_a_scheduled_job_that_never_ran_is_missed_from_when_watching_began(tmp_path):
    f = Fleet(tmp_path / "fleet", [{"name": "nightly", "schedule": "every 10m"}], {"missed_grace": "5m"})
    try:
        f.write("nightly", "")
        start = 1_700_000_000.0
        assert f.tick(start).new_items == []
        assert f.tick(start + 60).new_items == []
        report = f.tick(start + 3600)
        [item] = f.items()
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(start + 600))
        assert (item.kind, item.sample) == ("missed", f"no run since {when} (every 10m)")
        assert report.new_items == [item.id]
    finally:
        f.ctx.close()


def reopen_whys(f: Fleet) -> list[str]:
    return [e.detail["why"] for e in ledger.tail(f.ctx.store, 50, kinds=["queue_reopen"])]


def test_a_failed_run_after_the_claim_reopens_its_item_as_a_failure_seen_after_it(tmp_path):
    # The run's failure meets the claimed item first (at the run's start, after the claim), so the
    # reopen says so; the run's review then finds the item open already.
    f = Fleet(tmp_path / "fleet", [{"name": "backup"}, {"name": "sync"}])
    try:
        f.write("backup", "")
        f.write("sync", "")
        add_run(f, "backup", 900.0, ended=901.0, exit_code=3)
        add_run(f, "sync", 900.0, ended=901.0, exit_code=0, error="cannot exec /bin/nothere")
        f.tick(1000.0)
        items = {i.job: i for i in f.items()}
        for item in items.values():
            claims.resolve(f.ctx, item.id, "fixed it", source="cli", now=1100.0)
        add_run(f, "backup", 1200.0, ended=1201.0, exit_code=3)
        add_run(f, "sync", 1200.0, ended=1201.0, exit_code=0, error="cannot exec /bin/nothere")
        report = f.tick(1300.0)
        assert sorted(report.reopened) == sorted(i.id for i in items.values())
        assert reopen_whys(f) == ["exit failure seen after the claim"] * 2
        for item in items.values():
            again = queue.get(f.ctx.store, item.id)
            assert (again.state, again.reopens, again.count) == ("open", 1, 2)
            assert again.note == "claim did not hold (exit failure seen after the claim); earlier note: fixed it"
    finally:
        f.ctx.close()


def test_a_slot_missed_after_the_claim_reopens_the_missed_schedules_item(tmp_path):
    f = Fleet(tmp_path / "fleet", [{"name": "sync", "schedule": "every 10m"}], {"missed_grace": "5m"})
    try:
        f.write("sync", "")
        start = 1_700_000_000.0
        add_run(f, "sync", start, ended=start + 1, exit_code=0)
        f.tick(start + 2)
        f.tick(start + 3600)
        [item] = f.items()
        claims.resolve(f.ctx, item.id, "restarted cron", source="cli", now=start + 3700)
        assert f.tick(start + 3710).reopened == []
        assert queue.get(f.ctx.store, item.id).state == "claimed"
        report = f.tick(start + 3700 + 1800)  # no run since: the slots after the claim are missed too
        assert report.reopened == [item.id] and reopen_whys(f) == ["missed failure seen after the claim"]
        assert queue.get(f.ctx.store, item.id).state == "open"
    finally:
        f.ctx.close()


@pytest.fixture
def new_york(monkeypatch):
    """The machine's local zone is New York (UTC-5 in January) for the test, then back."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_a_cron_schedule_runs_on_the_machines_local_clock(tmp_path, new_york):
    f = Fleet(tmp_path / "fleet", [{"name": "daily", "schedule": "0 7 * * *"}], {"missed_grace": "5m"})
    try:
        f.write("daily", "")
        start = 1_704_801_600.0  # 2024-01-09 07:00 in New York, 12:00 UTC
        assert time.strftime("%H:%M", time.localtime(start)) == "07:00"
        add_run(f, "daily", start, ended=start + 60, exit_code=0)
        f.tick(start + 120)
        # 20 hours on it is 03:00 in New York: the next 07:00 is four hours away, not five hours past.
        assert f.tick(start + 20 * 3600).new_items == [] and f.items() == []
        report = f.tick(start + 24 * 3600 + 600)
        [item] = f.items()
        assert report.new_items == [item.id]
        assert item.sample == "no run since 2024-01-10 07:00 (0 7 * * *)"
    finally:
        f.ctx.close()


def test_a_nudge_the_injection_path_rejects_fails_that_item_only(tmp_path):
    # A log path longer than the injection path takes (it is in the nudge's text): actions.nudge
    # raises instead of typing it; the pass goes on, counts it failed and says why.
    long_log = str(tmp_path) + "/" + ("d" * 200 + "/") * 520 + "app.log"
    f = Fleet(tmp_path / "fleet", [{"name": "app", "log": long_log}, {"name": "ok"}], agent=nopane())
    try:
        f.write("ok", "ERROR ok broke\n")
        report = f.tick(1000.0, notify=True)
        items = {i.job: i for i in f.items()}
        assert items["app"].kind == "scan" and items["app"].log == long_log
        assert sorted(report.nudge_failed) == sorted(i.id for i in items.values()) and report.nudged == []
        [why] = [e for e in report.errors if e.startswith(f"nudge of item {items['app'].id} failed: ")]
        assert why.startswith(f"nudge of item {items['app'].id} failed: text too long to inject: ")
        assert queue.get(f.ctx.store, items["app"].id).nudges == 0
    finally:
        f.ctx.close()


def test_failed_nudges_count_against_a_ticks_cap_too(tmp_path):
    f = Fleet(tmp_path / "fleet", [{"name": f"j{i}"} for i in range(8)], agent=nopane())
    try:
        for i in range(8):
            f.write(f"j{i}", "ERROR broken\n")
        report = f.tick(1000.0, notify=True)
        assert len(report.nudge_failed) == tick_mod.MAX_NUDGES_PER_TICK == 5 and report.nudged == []
        assert report.nudges_deferred == 3
        assert len(ledger.tail(f.ctx.store, 50, kinds=["queue_nudge"])) == 5
    finally:
        f.ctx.close()


def test_a_failure_not_yet_nudged_goes_before_the_renudges_of_older_ones(tmp_path):
    """The pass's five nudges went in item order: with older items' renudges due at every pass, a
    new failure was deferred pass after pass and reached the operator at its backstop never nudged."""
    f = Fleet(tmp_path / "fleet", [{"name": f"j{i}"} for i in range(7)], {"renudge": "20m"}, agent=nopane())
    try:
        for i in range(6):
            f.write(f"j{i}", "ERROR broken\n")
        f.tick(1000.0)
        with f.ctx.store.write() as db:  # each nudged once already, at its reopen: their renudges due by 2300
            for item in f.items():
                queue.save(db, replace(item, nudges=1, last_nudge_at=1000.0, reopened_at=1000.0, reopens=1))
        f.write("j6", "ERROR broken too\n")
        report = f.tick(2300.0, notify=True)
        new = next(i for i in f.items() if i.job == "j6")
        assert report.nudge_failed[0] == new.id and len(report.nudge_failed) == 5  # tried first (no pane here)
        assert report.nudges_deferred == 2
    finally:
        f.ctx.close()


def test_each_agent_has_its_own_nudges_per_pass(tmp_path):
    """One budget for all agents: an agent whose injections kept failing spent it every pass, and
    the other agents' failures were never nudged."""
    lines = [f"state_dir = {toml_value(str(tmp_path / 'state'))}"]
    for name in ("alpha", "beta"):
        lines += ["[[agents]]", f'name = "{name}"', f"tmux_socket = {toml_value(nopane()['tmux_socket'])}"]
    for i, agent in enumerate(["alpha"] * 6 + ["beta"]):
        lines += ["[[jobs]]", f'name = "j{i}"', f"log = {toml_value(str(tmp_path / f'j{i}.log'))}",
                  f'agent = "{agent}"']
        (tmp_path / f"j{i}.log").write_text("ERROR broken\n")
    path = tmp_path / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    ctx = Context.load(str(path), None, environ={})
    try:
        report = sentinel_tick(ctx, 1000.0, notify=True)
        by_job = {i.job: i for i in queue.listing(ctx.store)}
        assert by_job["j6"].id in report.nudge_failed  # beta's, tried: alpha's five spent alpha's alone
        assert len(report.nudge_failed) == 6 and report.nudges_deferred == 1
    finally:
        ctx.close()


def test_a_cron_claims_witness_window_runs_to_the_next_local_slot_plus_the_grace(tmp_path, new_york):
    f = Fleet(tmp_path / "fleet", [{"name": "daily", "schedule": "0 7 * * *"}, {"name": "plain"}],
              {"missed_grace": "5m"})
    try:
        f.write("daily", "ERROR broke\n")
        f.write("plain", "ERROR broke\n")
        f.tick(1000.0)
        items = {i.job: i for i in f.items()}
        claimed_at = 1_704_787_200.0  # 2024-01-09 03:00 in New York: its 07:00 is four hours away
        daily = replace(items["daily"], state="claimed", claimed_at=claimed_at)
        assert tick_mod.witness_window(f.ctx, daily) == 4 * 3600 + 300
        assert tick_mod.witness_window(f.ctx, replace(items["plain"], state="claimed", claimed_at=claimed_at)) is None
        assert tick_mod.witness_window(f.ctx, items["daily"]) is None  # not claimed
    finally:
        f.ctx.close()


def test_a_job_moved_to_another_agent_takes_its_live_items_nudges_along(tmp_path):
    def config(owner: str) -> Context:
        lines = [f"state_dir = {toml_value(str(tmp_path / 'state'))}", "[sentinel]", 'backstop = "30m"']
        for name in ("alpha", "beta"):
            lines += ["[[agents]]", f'name = "{name}"', f"tmux_socket = {toml_value(nopane()['tmux_socket'])}"]
        lines += ["[[jobs]]", 'name = "report"', f"log = {toml_value(str(tmp_path / 'report.log'))}",
                  f'agent = "{owner}"']
        path = tmp_path / "config.toml"
        path.write_text("\n".join(lines) + "\n")
        return Context.load(str(path), None, environ={})

    (tmp_path / "report.log").write_text("ERROR report broke\n")
    ctx = config("alpha")
    try:
        sentinel_tick(ctx, 1000.0, notify=False)
        [item] = queue.listing(ctx.store)
        assert item.agent == "alpha"
    finally:
        ctx.close()
    ctx = config("beta")  # the operator hands the job to beta
    try:
        sentinel_tick(ctx, 1100.0, notify=True)
        [attempt] = ledger.tail(ctx.store, 10, kinds=["queue_nudge"])
        assert attempt.agent == "beta" and attempt.detail["item"] == item.id
        assert queue.get(ctx.store, item.id).agent == "beta"  # the status and its escalation say beta too
        report = sentinel_tick(ctx, 1100.0 + 31 * 60, notify=True)
        assert report.escalated == [item.id]
        [esc] = escalations(ctx)
        assert esc.agent == "beta" and outbox.recent(ctx.store)[0].text.startswith("[beta] ")
    finally:
        ctx.close()


def test_an_item_whose_job_and_agent_left_the_config_is_retired_and_a_memory_item_goes_to_the_first_agent(tmp_path):
    # Until 2026-12-08 an item whose job had left the config was escalated and nudged into the first
    # agent for good: no run of the job would witness it. Retired now; an item of no job (the memory
    # replica's) whose agent left is still nudged into the first agent.
    def config(with_beta: bool) -> Context:
        lines = [f"state_dir = {toml_value(str(tmp_path / 'state'))}", "[sentinel]", 'backstop = "30m"',
                 "[[agents]]", 'name = "alpha"', f"tmux_socket = {toml_value(nopane()['tmux_socket'])}"]
        if with_beta:
            lines += ["[[agents]]", 'name = "beta"', f"tmux_socket = {toml_value(nopane()['tmux_socket'])}",
                      "[[jobs]]", 'name = "report"', 'schedule = "every 1h"',
                      f"log = {toml_value(str(tmp_path / 'report.log'))}", 'agent = "beta"']
        path = tmp_path / "config.toml"
        path.write_text("\n".join(lines) + "\n")
        return Context.load(str(path), None, environ={})

    (tmp_path / "report.log").write_text("ERROR report broke\n")
    ctx = config(with_beta=True)
    try:
        sentinel_tick(ctx, 1000.0, notify=False)
        [item] = queue.listing(ctx.store)
        claims.resolve(ctx, item.id, "fixed the report", source="cli", now=1100.0)
    finally:
        ctx.close()
    ctx = config(with_beta=False)
    try:
        report = sentinel_tick(ctx, 1200.0 + 31 * 60, notify=True)  # a claim past the backstop, its job gone
        assert report.escalated == [] and outbox.recent(ctx.store) == [] and escalations(ctx) == []
        [retired] = ledger.tail(ctx.store, 10, kinds=["queue_retire"])
        assert (retired.agent, retired.detail["item"], retired.detail["state"]) == ("beta", item.id, "claimed")
        assert queue.listing(ctx.store) == []
        with ctx.store.write() as db:
            memory = queue_items.insert_in(db, job=MEMORY_QUEUE, kind=queue_rules.MEMORY_CONFLICT, signature="notes.md",
                                           sample="notes.md", log="notes.md", now=1200.0, count=1, agent="beta")
        sentinel_tick(ctx, 1200.0 + 32 * 60, notify=True)
        [attempt] = ledger.tail(ctx.store, 10, kinds=["queue_nudge"])
        assert attempt.agent == "alpha" and attempt.detail["item"] == memory["id"]
    finally:
        ctx.close()


@pytest.mark.parametrize("before_the_pass", [30.0, -30.0])  # a start a little ahead: the clocks' tolerance
def test_a_run_started_just_around_the_pass_is_the_schedules_last_start(tmp_path, before_the_pass):
    f = Fleet(tmp_path / "fleet", [{"name": "sync", "schedule": "every 10m"}], {"missed_grace": "5m"})
    try:
        f.write("sync", "")
        t0 = 1_700_000_000.0
        f.tick(t0)
        started = t0 + 1200 - before_the_pass
        add_run(f, "sync", started, ended=started + 1, exit_code=0)
        # Measured from when watching began, the 10-minute slot would be missed by now; the run came.
        report = f.tick(t0 + 1200)
        assert report.new_items == [] and f.items() == [] and report.runs_reviewed == 1
    finally:
        f.ctx.close()


@pytest.mark.parametrize("kept", ["not json", "{}", '{"wall": "x", "mono": 1}', "[1]"])
def test_a_pass_reads_a_damaged_kept_clock_as_none_and_keeps_its_own(tmp_path, kept):
    from loomtui.timing import Instant

    f = Fleet(tmp_path / "fleet", [{"name": "sync", "schedule": "every 1h"}])
    try:
        f.write("sync", "")
        f.ctx.store.set_meta("sentinel_clock", kept)
        at = Instant(1_700_000_000.0, 5000.0, "boot-1")
        assert f.tick(at).errors == []
        assert json.loads(f.ctx.store.get_meta("sentinel_clock")) == {
            "wall": 1_700_000_000.0, "mono": 5000.0, "boot": "boot-1"}
    finally:
        f.ctx.close()


def test_a_scheduled_job_whose_log_is_not_there_yet_is_watched_from_the_first_pass(tmp_path):
    f = Fleet(tmp_path / "fleet", [{"name": "nightly", "schedule": "every 10m"}], {"missed_grace": "5m"})
    try:
        start = 1_700_000_000.0
        assert f.tick(start).new_items == []
        assert f.tick(start + 60).new_items == []
        report = f.tick(start + 3600)
        missed = [i for i in f.items() if i.kind == "missed"]
        assert len(missed) == 1 and missed[0].id in report.new_items
    finally:
        f.ctx.close()



def test_one_pass_records_every_witness_and_reopen_of_a_job_under_its_agent(tmp_path):
    lines = [f"state_dir = {toml_value(str(tmp_path / 'state'))}",
             "[[agents]]", 'name = "alpha"', f"tmux_socket = {toml_value(nopane()['tmux_socket'])}",
             "[[agents]]", 'name = "beta"', f"tmux_socket = {toml_value(nopane()['tmux_socket'])}"]
    for job in ("report", "sync", "extra"):
        lines += ["[[jobs]]", f'name = "{job}"', f"log = {toml_value(str(tmp_path / (job + '.log')))}", 'agent = "beta"']
    (tmp_path / "config.toml").write_text("\n".join(lines) + "\n")
    f = Fleet.__new__(Fleet)
    f.ctx = Context.load(str(tmp_path / "config.toml"), None, environ={})
    try:
        for job in ("report", "sync", "extra"):
            (tmp_path / f"{job}.log").write_text("ERROR it broke\n")
        for job in ("report", "sync"):
            add_run(f, job, 900.0, ended=901.0, exit_code=2)
        sentinel_tick(f.ctx, 1000.0, notify=False)
        ids = {(i.job, i.kind): i.id for i in queue.listing(f.ctx.store)}
        assert len(ids) == 5
        for item_id in ids.values():
            claims.resolve(f.ctx, item_id, "fixed", source="cli", now=1100.0)
        add_run(f, "report", 1200.0, ended=1201.0, exit_code=0)  # one clean run witnesses both claims
        with open(tmp_path / "sync.log", "a") as fh:
            fh.write("ERROR it broke\n")
        add_run(f, "sync", 1200.0, ended=1201.0, exit_code=2)   # both failures again, after the claims
        add_run(f, "extra", 1200.0, ended=1201.0, exit_code=2)  # a bad run: the line's claim did not hold
        report = sentinel_tick(f.ctx, 1300.0, notify=False)
        assert sorted(report.witnessed) == sorted([ids["report", "line"], ids["report", "exit"]])
        assert sorted(report.reopened) == sorted([ids["sync", "line"], ids["sync", "exit"], ids["extra", "line"]])
        witnesses = ledger.tail(f.ctx.store, 50, kinds=["queue_witness"])
        reopens = ledger.tail(f.ctx.store, 50, kinds=["queue_reopen"])
        assert sorted(e.detail["item"] for e in witnesses) == sorted(report.witnessed)
        assert sorted(e.detail["item"] for e in reopens) == sorted(report.reopened)
        assert {(e.ts, e.agent, e.source) for e in witnesses + reopens} == {(1300.0, "beta", "sentinel")}
        assert queue.get(f.ctx.store, ids["report", "exit"]).witnessed_at == 1300.0
        assert [e.detail["why"] for e in reopens if e.detail["item"] == ids["extra", "line"]] == [
            f"run {run_row_id(f, 'extra')} exited 2"]
    finally:
        f.ctx.close()


def run_row_id(f: Fleet, job: str) -> int:
    return max(r["id"] for r in f.ctx.store.query("SELECT id FROM job_runs WHERE job = ?", (job,)))


def test_a_running_row_from_before_loom_kept_its_pid_start_is_judged_by_wall_time(tmp_path):
    f = Fleet(tmp_path / "fleet", [{"name": "sync"}])
    try:
        f.write("sync", "")
        # This process, as a row written before migration 0011 recorded a run-job's pid start.
        running = add_run(f, "sync", time.time(), ended=None, pid=os.getpid(), pid_started=None)
        report = f.tick(time.time())
        assert report.runs_reviewed == 0 and f.items() == []
        assert (run_row(f, running)["ended"], run_row(f, running)["reviewed"]) == (None, 0)
    finally:
        f.ctx.close()


def test_a_run_still_going_past_its_next_slot_and_the_grace_is_told_once_and_not_as_a_missed_slot(tmp_path):
    """A job hung on a mount never ends: it never exits non-zero, and cron goes on starting runs
    beside it (or, behind a lock, none: then its slots showed as missed, "no run since", which sends
    the agent looking for why cron never ran it). Past its next scheduled start and the grace, the
    run is an item of its own, told once; a second hung run counts on it."""
    f = Fleet(tmp_path / "fleet", [{"name": "sync", "schedule": "every 10m"}, {"name": "adhoc"}],
              {"missed_grace": "10m"})
    try:
        f.write("sync", "")
        f.write("adhoc", "")
        me = os.getpid()
        mine = proctree.of(f.ctx).start_time(me)
        now = time.time()
        # This process as the run-job of a run 19 minutes old: 10 minutes to its next slot, 10 of grace.
        hung = add_run(f, "sync", now - 19 * 60, ended=None, pid=me, pid_started=mine)
        adhoc = add_run(f, "adhoc", now - 86400, ended=None, pid=me, pid_started=mine)  # no schedule: no bound
        report = f.tick(now)
        assert f.items() == [] and report.runs_reviewed == 0
        assert run_row(f, hung)["overrun_at"] is None

        report = f.tick(now + 61)
        [item] = f.items()
        assert (item.job, item.kind, item.signature, item.count) == (
            "sync", "overrun", "still running after a whole period of its schedule", 1)
        assert item.sample.startswith(f"run {hung}, started ") and item.sample.endswith("is still running (every 10m)")
        assert report.new_items == [item.id] and run_row(f, hung)["overrun_at"] == now + 61
        assert (run_row(f, hung)["ended"], run_row(f, hung)["reviewed"]) == (None, 0)  # still judged at its end
        assert "shows a run still going after a whole period of its schedule; log:" in queue_rules.nudge_text(item)

        # Told once: later passes, slots on slots behind it, add nothing (no "missed schedule" either).
        for later in (now + 700, now + 3600, now + 86400):
            assert f.tick(later).new_items == [] and f.tick(later).recurred == []
        assert [(i.kind, i.count) for i in f.items()] == [("overrun", 1)]
        assert run_row(f, adhoc)["overrun_at"] is None

        # A second run hangs beside it: counted on the same item.
        second = add_run(f, "sync", now + 86400, ended=None, pid=me, pid_started=mine)
        report = f.tick(now + 86400 + 20 * 60 + 1)
        assert report.recurred == [item.id] and [(i.kind, i.count) for i in f.items()] == [("overrun", 2)]
        assert run_row(f, second)["overrun_at"] == now + 86400 + 20 * 60 + 1
    finally:
        f.ctx.close()


def test_a_run_within_its_allowance_is_not_an_overrun_and_a_missed_slot_without_a_run_still_is(tmp_path):
    f = Fleet(tmp_path / "fleet", [{"name": "sync", "schedule": "every 10m"}], {"missed_grace": "10m"})
    try:
        f.write("sync", "")
        me = os.getpid()
        now = time.time()
        going = add_run(f, "sync", now - 19 * 60, ended=None, pid=me, pid_started=proctree.of(f.ctx).start_time(me))
        assert f.tick(now).new_items == [] and run_row(f, going)["overrun_at"] is None
        # It ends in time; the next run never starts: that is a missed slot, as before.
        with f.ctx.store.write() as db:
            db.execute("UPDATE job_runs SET ended = ?, exit_code = 0 WHERE id = ?", (now + 30, going))
        f.tick(now + 60)
        assert f.items() == []
        f.tick(now + 21 * 60)
        assert [(i.kind, i.signature) for i in f.items()] == [("missed", "missed schedule")]
        assert run_row(f, going)["overrun_at"] is None
    finally:
        f.ctx.close()


def test_a_claim_is_not_told_unwitnessed_while_its_witness_run_still_runs_within_its_allowance(tmp_path):
    """A claim waits to the job's next slot and the grace for its witness; a backup of an hour,
    started on time at that slot, was still its witness when the operator heard "no clean run has
    witnessed it". Now the message waits for that run while it runs within its allowance; a run
    past it is an overrun, and the claim is told then."""
    f = Fleet(tmp_path / "fleet", [{"name": "backup", "schedule": "every 1h"}],
              {"missed_grace": "10m", "backstop": "30m"}, agent=nopane())
    try:
        f.write("backup", "ERROR disk full\n")
        t0 = 1_000_000.0
        f.tick(t0, notify=False)
        [item] = f.items()
        claims.resolve(f.ctx, item.id, "freed space", source="cli", now=t0 + 100)
        me = os.getpid()
        run = add_run(f, "backup", t0 + 100 + 3600, ended=None, pid=me, pid_started=proctree.of(f.ctx).start_time(me))
        window_end = t0 + 100 + 3600 + 600
        report = f.tick(window_end + 1, notify=True)
        assert report.escalated == [] and escalations(f.ctx) == []
        assert f.tick(t0 + 100 + 3600 + 4200, notify=True).escalated == []  # its allowance: 1 h and the grace
        # Past its allowance: an overrun, and the claim is told unwitnessed.
        report = f.tick(t0 + 100 + 3600 + 4201, notify=True)
        assert report.escalated == [item.id] and len(report.new_items) == 1
        assert [i.kind for i in f.items() if i.id in report.new_items] == ["overrun"]
        assert run_row(f, run)["overrun_at"] == t0 + 100 + 3600 + 4201
    finally:
        f.ctx.close()


def test_a_claims_witness_is_a_run_of_its_scheduled_job_started_after_it_and_within_its_allowance(tmp_path):
    f = Fleet(tmp_path / "fleet", [{"name": "backup", "schedule": "every 1h"}, {"name": "plain"}],
              {"missed_grace": "10m"})
    try:
        f.write("backup", "ERROR disk full\n")
        f.write("plain", "ERROR disk full\n")
        t0 = 1_000_000.0
        f.tick(t0, notify=False)
        items = {i.job: i for i in f.items()}
        claimed = replace(items["backup"], state="claimed", claimed_at=t0 + 100)

        def going(started: float, overrun_at: float | None = None, job: str = "backup") -> tick_mod.Running:
            run = tick_mod.Running(tick_mod.JobRun(1, job, started, None, 0), overrun_at)
            # Its allowance as the pass works it out (the config's schedule; none for "plain").
            return tick_mod.with_allowances(f.ctx, {job: [run]}, cron.in_zone(clock.local_zone()))[job][0]

        def witness(item, runs, now: float) -> bool:
            return tick_mod.witness_going(f.ctx, item, runs, tick_mod.as_instant(now))

        assert witness(claimed, [going(t0 + 200)], t0 + 200 + 4200)
        assert not witness(claimed, [going(t0 + 200)], t0 + 200 + 4201)  # past its allowance
        assert not witness(claimed, [going(t0 + 200, overrun_at=t0 + 5000)], t0 + 300)  # told of as overrun
        assert not witness(claimed, [going(t0 + 99)], t0 + 300)  # started before the claim
        assert witness(claimed, [going(t0 + 99), going(t0 + 200)], t0 + 300)
        # Runs that hang one after another: the first past its allowance ends the wait, though the
        # next is within its own (each held the message, and it waited as long as they hung).
        assert not witness(claimed, [going(t0 + 200), going(t0 + 3800)], t0 + 200 + 4201)
        assert not witness(claimed, [going(t0 + 200, overrun_at=t0 + 4500), going(t0 + 3800)], t0 + 4500)
        assert not witness(claimed, [], t0 + 300)
        assert not witness(items["backup"], [going(t0 + 200)], t0 + 300)  # open: no claim to witness
        plain = replace(items["plain"], state="claimed", claimed_at=t0 + 100)
        assert not witness(plain, [going(t0 + 200, job="plain")], t0 + 300)  # no schedule: no allowance
    finally:
        f.ctx.close()


def test_a_job_renamed_with_its_log_the_same_keeps_its_place_and_its_items(tmp_path):
    """Renamed, the job was a new one: its log's last 64 KB read again (its old failures told anew
    as new items), and the old name's items nudged and claimed for good, never witnessed."""
    f = Fleet(tmp_path / "fleet", [{"name": "backup"}, {"name": "other"}])
    try:
        f.write("backup", "ERROR disk full\n")
        f.write("other", "")
        f.tick(1000.0)
        [old] = f.items()
    finally:
        f.ctx.close()
    log = str(f.log("backup"))
    text = f.config_path.read_text().replace('name = "backup"', 'name = "nightly-backup"')
    f.config_path.write_text(text)
    f.ctx = Context.load(str(f.config_path), None, environ={})
    try:
        f.write("backup", "INFO fine\nERROR disk full\nERROR cannot reach the mirror\n")
        report = f.tick(2000.0)
        items = {i.signature: i for i in f.items()}
        assert items[normalize("ERROR disk full")].id == old.id  # one more of its lines, not a new item
        assert (items[normalize("ERROR disk full")].job, items[normalize("ERROR disk full")].count) == (
            "nightly-backup", 2)
        assert report.new_items == [items[normalize("ERROR cannot reach the mirror")].id]
        assert {i.job for i in f.items()} == {"nightly-backup"} and {i.log for i in f.items()} == {log}
        assert report.bytes_read == len("INFO fine\nERROR disk full\nERROR cannot reach the mirror\n")
    finally:
        f.ctx.close()


def test_a_job_removed_from_the_config_retires_its_items_and_added_back_opens_new_ones(tmp_path):
    """Its items stayed live: nudged to the agent and escalated to the operator for a job no run of
    which would ever come to witness them, claimed for good. Retired now, once each in the ledger;
    `loom resolve` says so; the job added back opens new items for its failures."""
    f = Fleet(tmp_path / "fleet", [{"name": "backup"}, {"name": "other"}], {"backstop": "30m"}, agent=nopane())
    try:
        f.write("backup", "ERROR disk full\nERROR cannot reach the mirror\n")
        f.write("other", "ERROR other broke\n")
        f.tick(1000.0)
        items = {i.signature: i for i in f.items()}
        claimed = items[normalize("ERROR cannot reach the mirror")]
        claims.resolve(f.ctx, claimed.id, "fixed the route", source="cli", now=1001.0)
    finally:
        f.ctx.close()
    backup = f.config_path.read_text()
    f.config_path.write_text(backup.replace('name = "backup"', 'name = "gone"').replace(str(f.log("backup")),
                                                                                         str(tmp_path / "elsewhere.log")))
    f.ctx = Context.load(str(f.config_path), None, environ={})
    try:
        nudged = len(ledger.tail(f.ctx.store, 100, kinds=["queue_nudge"]))
        f.tick(1000.0 + 86400, notify=True)  # past every backstop: an item still live would be escalated now
        retired = ledger.tail(f.ctx.store, 100, kinds=["queue_retire"])
        assert sorted((e.detail["item"], e.detail["state"]) for e in retired) == sorted(
            (i.id, "claimed" if i.id == claimed.id else "open") for i in items.values() if i.job == "backup")
        assert all(e.detail["job"] == "backup" for e in retired)
        assert [i.job for i in f.items()] == ["other"]  # the live ones
        assert {queue.get(f.ctx.store, i.id).state for i in items.values() if i.job == "backup"} == {"retired"}
        escalated = ledger.tail(f.ctx.store, 100, kinds=["queue_escalate"])
        assert {e.detail["job"] for e in escalated} == {"other"}
        assert {e.detail["job"] for e in ledger.tail(f.ctx.store, 100, kinds=["queue_nudge"])[nudged:]} <= {"other"}
        with pytest.raises(LoomError, match="retired"):
            claims.resolve(f.ctx, claimed.id, "again", source="cli", now=1000.0 + 86401)
        f.tick(1000.0 + 2 * 86400, notify=True)
        assert len(ledger.tail(f.ctx.store, 100, kinds=["queue_retire"])) == len(retired)  # once each
        assert queue.counts(f.ctx.store) == {"open": 1, "claimed": 0, "witnessed": 0}
    finally:
        f.ctx.close()
    f.config_path.write_text(backup)
    f.ctx = Context.load(str(f.config_path), None, environ={})
    try:
        f.write("backup", "ERROR disk full\n")
        report = f.tick(1000.0 + 3 * 86400)
        [new] = [i for i in f.items() if i.job == "backup"]
        assert report.new_items == [new.id] and new.id not in {i.id for i in items.values()}
    finally:
        f.ctx.close()


def test_a_scheduled_job_renamed_waits_from_its_old_names_last_start_not_from_when_it_was_first_watched(tmp_path):
    f = Fleet(tmp_path / "fleet", [{"name": "backup", "schedule": "every 1h"}], {"missed_grace": "10m"})
    try:
        f.write("backup", "")
        f.tick(1000.0)
        add_run(f, "backup", 1000.0 + 7200, ended=1000.0 + 7260, exit_code=0)
        f.tick(1000.0 + 7300)
        assert f.items() == []
    finally:
        f.ctx.close()
    # A run under the old name ends, failed, before the first pass under the new one.
    failed = add_run(f, "backup", 1000.0 + 7400, ended=1000.0 + 7460, exit_code=4)
    f.config_path.write_text(f.config_path.read_text().replace('name = "backup"', 'name = "nightly-backup"'))
    f.ctx = Context.load(str(f.config_path), None, environ={})
    try:
        # Judged as the renamed job's (not as an orphan's); ten minutes after the last run, nothing missed.
        report = f.tick(1000.0 + 7800)
        [exited] = f.items()
        assert (exited.job, exited.kind, exited.sample) == ("nightly-backup", "exit", f"run {failed} exited 4")
        assert report.runs_reviewed == 1 and run_row(f, failed)["job"] == "nightly-backup"
        claims.resolve(f.ctx, exited.id, "fixed it", source="cli", now=1000.0 + 7900)
        # Its next slot and the grace gone by with no run under either name: missed, from the last run.
        f.tick(1000.0 + 7400 + 3600 + 601)
        [missed] = [i for i in f.items() if i.kind == "missed"]
        assert missed.job == "nightly-backup"
        assert missed.sample.startswith("no run since " + time.strftime("%Y-%m-%d %H:%M", time.localtime(1000.0 + 11000)))
    finally:
        f.ctx.close()


def test_a_run_going_under_a_jobs_old_name_at_its_rename_is_the_renamed_jobs_to_time_and_to_judge(tmp_path):
    """Its run-job records its end by the name it started under: judged as an orphan's, its failure
    was lost; timed by no schedule (the old name's is gone), its hang was never told; and the slots
    missed behind it were told as "no run since", though it was still going."""
    f = Fleet(tmp_path / "fleet", [{"name": "sync", "schedule": "every 10m"}], {"missed_grace": "10m"})
    now = time.time()
    try:
        f.write("sync", "")
        f.tick(now - 20 * 60)
        me = os.getpid()
        # This process as the run-job of a run started 19 minutes ago under the old name.
        going = add_run(f, "sync", now - 19 * 60, ended=None, pid=me, pid_started=proctree.of(f.ctx).start_time(me))
        f.tick(now - 30)
        assert f.items() == []
    finally:
        f.ctx.close()
    f.config_path.write_text(f.config_path.read_text().replace('name = "sync"', 'name = "nightly-sync"'))
    f.ctx = Context.load(str(f.config_path), None, environ={})
    try:
        f.tick(now)  # the rename adopted: the run within its allowance yet
        assert f.items() == []
        f.tick(now + 61)  # past it: told once, under the new name; no missed slot beside it
        [hung] = f.items()
        assert (hung.job, hung.kind) == ("nightly-sync", "overrun") and run_row(f, going)["overrun_at"] == now + 61
        for later in (now + 700, now + 3600):
            assert f.tick(later).new_items == []
        # It ends, failed, recorded by its old name: the renamed job's failure, its run judged.
        with f.ctx.store.write() as db:
            db.execute("UPDATE job_runs SET ended = ?, exit_code = 3 WHERE id = ?", (now + 3700, going))
        report = f.tick(now + 3800)
        [exited] = [i for i in f.items() if i.kind == "exit"]
        assert (exited.job, exited.sample) == ("nightly-sync", f"run {going} exited 3")
        assert report.runs_reviewed == 1 and run_row(f, going)["reviewed"] == 1
        assert run_row(f, going)["job"] == "sync"  # the store's row keeps the name it ran under
    finally:
        f.ctx.close()


def test_a_claim_is_dated_on_both_clocks_at_once_whatever_the_wall_clock_does_meanwhile(tmp_path):
    """`loom resolve` read the wall clock, waited for the store (a locked one: its busy timeout), and
    then derived the claim's monotonic instant from the wall time since: a step in that wait put the
    claim a day off (reported unwitnessed at once, or witnessed by no run for a day)."""
    from fake_clock import FakeClock

    from loomtui import clock

    class SteppedAfterTheFirstLook(FakeClock):
        stepped = False

        def wall(self) -> float:
            seen = self.at_wall
            if not self.stepped:
                self.stepped, self.at_wall = True, self.at_wall + 86400.0  # a day forward, just after
            return seen

    f = disk_full(tmp_path)
    try:
        f.tick(1000.0, notify=False)
        [item] = f.items()
        with clock.use(SteppedAfterTheFirstLook(wall=2_000_000.0, mono=700.0, boot="b")):
            claimed, changed = claims.resolve(f.ctx, item.id, "freed space", source="cli")
        assert changed and (claimed.claimed_at, claimed.claimed_mono, claimed.claimed_boot) == (2_000_000.0, 700.0, "b")
    finally:
        f.ctx.close()
