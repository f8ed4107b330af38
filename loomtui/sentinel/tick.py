"""The sentinel tick: scan every job, turn failures into queue items, nudge, escalate.

    report = sentinel_tick(ctx)            # what `loom supervise` calls every sentinel.interval

One job at a time: its new log lines, its finished runs and its schedule become failures,
which are merged into the queue in one transaction together with the job's new log offset,
so a crash at any point neither loses nor double-counts a line. Then every open item gets
what `queue_rules.decide` says is due: a nudge through the one injection path, and past the
backstop one message to the operator through the outbox.

Time is an Instant (both clocks): the backstops run on the monotonic clock from an item's
first sighting or claim, and a step of the wall clock between two passes (noticed against the
pass before, kept in the store's meta as CLOCK_KEY) restarts every schedule's wait from where
the clock landed (schedule.py says why).
"""

from __future__ import annotations

import functools
import json
import sqlite3
import time
from dataclasses import dataclass, field, replace

from loomtui import actions, clock, redact, timing
from loomtui.agent import launches, proctree
from loomtui.timing import Instant, age, as_instant, raw_age
from loomtui.config import JobConfig
from loomtui.context import Context
from loomtui.errors import LoomError, StoreError
from loomtui.sentinel import cron, jobscan, literal_search, logscan, queue, schedule
from loomtui.sentinel.queue_rules import (
    CLAIMED,
    EXIT,
    LINE,
    MISSED,
    OPEN,
    OVERRUN,
    SCAN,
    Escalate,
    Failure,
    Item,
    JobRun,
    Nudge,
    absorb,
    decide,
    review,
)
from loomtui.sentinel.signature import normalize
from loomtui.states import MEMORY_QUEUE, EventKind
from loomtui.store import job_runs, ledger, locks, outbox, queue_items, scan_offsets

SENTINEL_LOCK = "sentinel.lock"
LOCK_TIMEOUT = 60.0
MAX_NUDGES_PER_TICK = 5  # per agent: a burst of failures must not bury the agent's prompt in one go
SOURCE = "sentinel"
CLOCK_KEY = "sentinel_clock"  # the last pass's Instant: a wall-clock step between passes shows against it


@dataclass
class SentinelReport:
    now: float
    jobs: int = 0
    bytes_read: int = 0
    lines: int = 0
    failure_lines: int = 0
    runs_reviewed: int = 0
    new_items: list[int] = field(default_factory=list)
    recurred: list[int] = field(default_factory=list)
    reopened: list[int] = field(default_factory=list)
    witnessed: list[int] = field(default_factory=list)
    nudged: list[int] = field(default_factory=list)
    nudge_failed: list[int] = field(default_factory=list)
    nudges_deferred: int = 0
    nudges_held: list[int] = field(default_factory=list)
    relaunching: bool = False
    escalated: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(self.__dict__)

    def describe(self) -> str:
        parts = [f"{self.jobs} jobs, {self.bytes_read} new bytes, {self.failure_lines} failure lines",
                 f"new items {self.new_items or '-'}", f"recurred {self.recurred or '-'}",
                 f"reopened {self.reopened or '-'}", f"witnessed {self.witnessed or '-'}",
                 f"nudged {self.nudged or '-'}", f"escalated {self.escalated or '-'}"]
        if self.nudge_failed:
            parts.append(f"nudge failed {self.nudge_failed}")
        if self.nudges_held:
            parts.append(f"nudges held by a hold {self.nudges_held}")
        if self.nudges_deferred:
            parts.append(f"{self.nudges_deferred} nudges deferred to the next tick")
        if self.relaunching:
            parts.append("nudges held: a relaunch is under way")
        return "; ".join(parts)


def sentinel_tick(ctx: Context, now: Instant | float | None = None, *, notify: bool = True) -> SentinelReport:
    """One sentinel pass at `now` (default clock.now(); a bare wall time is measured by wall time
    alone). Raises LockHeld if another pass holds sentinel.lock past LOCK_TIMEOUT."""
    at = clock.now() if now is None else as_instant(now)
    report = SentinelReport(at.wall)
    # Two passes at once would both read the same new bytes and count every line twice.
    with locks.hold(ctx.state_dir, SENTINEL_LOCK, timeout=LOCK_TIMEOUT):
        running = scan_all(ctx, at, report)
        if notify:
            send_due(ctx, at, report, running)
    return report


# -- scanning ----------------------------------------------------------------------------


def clock_step(ctx: Context, at: Instant) -> float | None:
    """Where the wall clock landed if it was stepped since the last pass (`at.wall`), else None;
    `at` is kept as the next pass's reference."""
    if at.mono is None:
        return None  # a pass given a bare wall time (tests) cannot tell
    try:
        raw = json.loads(ctx.store.get_meta(CLOCK_KEY) or "null")
        before = Instant(float(raw["wall"]), float(raw["mono"]), raw.get("boot")) if raw else None
    except (ValueError, TypeError, KeyError):
        before = None
    ctx.store.set_meta(CLOCK_KEY, json.dumps({"wall": at.wall, "mono": at.mono, "boot": at.boot}))
    return at.wall if timing.stepped(before, at) else None


def scan_all(ctx: Context, at: Instant, report: SentinelReport) -> dict[str, list[Running]]:
    """Every job scanned; the runs still going, by job."""
    now = at.wall
    configured = {job.name for job in ctx.config.jobs}
    # Every job's position and last start in one read: an idle pass costs little more than a stat per job.
    # A start ahead of the wall clock (it was stepped back since) is no reference: schedule.wait_from.
    with ctx.store.read() as db:
        watches = jobscan.load_watches(db)
        last_starts = job_runs.last_starts_in(db, now + timing.JUMP_TOLERANCE)
    # Before the runs are read: a renamed job's ended runs are judged as its own, not as orphans.
    adopt_renamed(ctx, watches, configured, last_starts)
    retire_gone(ctx, configured, now)
    runs, running = unreviewed_runs(ctx, now)
    fold_renamed(watches, configured, runs, running, last_starts)
    orphans = [r.id for rs in runs.values() for r in rs if r.job not in configured]
    if orphans:  # runs of a job since removed from the config: nothing to judge them against
        with ctx.store.write() as db:
            job_runs.reviewed_in(db, orphans)
    scheduled = any(job.schedule for job in ctx.config.jobs)
    landed = clock_step(ctx, at) if scheduled else None
    slots = cron.in_zone(clock.local_zone()) if scheduled else None
    if slots is not None:
        running = with_allowances(ctx, running, slots)
    for job in ctx.config.jobs:
        report.jobs += 1
        scan_job(ctx, job, runs.get(job.name, []), at, report, watches.get(job.name, jobscan.NO_WATCH),
                 last_starts.get(job.name), slots, landed, running.get(job.name, []))
    return running


@dataclass(frozen=True)
class Running:
    """A run whose run-job is alive, its end not recorded; `overrun_at`: when it was told of as
    going on past its allowance, if it was; `allowance`: how long it may run (schedule.run_allowance,
    by its job's schedule in the config; None without one)."""

    run: JobRun
    overrun_at: float | None
    allowance: float | None = None


def with_allowances(ctx: Context, running: dict[str, list[Running]], slots: schedule.Cron) -> dict[str, list[Running]]:
    """The runs still going, each with its allowance: worked out once a pass, read by the scan (is
    it overrunning?) and by the nudges (may a claim wait for it?)."""
    grace = ctx.config.sentinel.missed_grace
    out: dict[str, list[Running]] = {}
    for name, goings in running.items():
        job = ctx.config.job(name)
        out[name] = [replace(g, allowance=schedule.run_allowance(job.schedule, g.run.started, grace, cron=slots))
                     for g in goings] if job is not None and job.schedule else goings
    return out


def adopt_renamed(ctx: Context, watches: dict[str, jobscan.Watch], configured: set[str],
                  last_starts: dict[str, float]) -> None:
    """A job renamed in the config, its log the same (no two jobs share a log), keeps its place in
    the log and its live items: read anew, the log's last 64 KB told its old failures again as new
    items under the new name, and the old name's items were nudged and claimed for good, never
    witnessed by a run of a job the config no longer has. Its runs that ended unjudged are its own
    (judged as orphans, a failure just before the rename was lost); one still going keeps the name
    it runs under (its run-job records its end by it). Its schedule's wait runs from the old name's
    last start, not from when the old name's watch began (a missed schedule told at once).
    `watches` is updated to match."""
    for job in ctx.config.jobs:
        if job.name in watches:
            continue
        old = [name for name, watch in watches.items() if name not in configured
               and watch.position is not None and watch.position.path == str(job.log)]
        if len(old) != 1:
            continue
        with ctx.store.write() as db:
            if queue_items.live_in(db, job.name):
                continue  # items under the new name already (none come without a position): leave both
            watch = watches[old[0]]
            since = max((c for c in (watch.watch_since, last_starts.get(old[0])) if c is not None), default=None)
            scan_offsets.rename_in(db, old[0], job.name, since)
            queue_items.rename_job_in(db, old[0], job.name)
            job_runs.rename_ended_in(db, old[0], job.name)
        watches[job.name] = replace(watches.pop(old[0]), watch_since=since, renamed_from=old[0])


def retire_gone(ctx: Context, configured: set[str], now: float) -> None:
    """The live items of a job gone from the config (not renamed: adopt_renamed moved those) are
    retired: no run of it will witness them, and until 2026-12-08 they were nudged to the agent and
    escalated to the operator for good (a job the operator removed on purpose). One ledger event
    each; the job added back opens new items. Not the memory replica's own queue (no job of the
    config). A read a pass; a write only when there is one to retire."""
    gone = [row for row in queue_items.unwitnessed(ctx.store)
            if row["job"] not in configured and row["job"] != MEMORY_QUEUE]
    if not gone:
        return
    with ctx.store.write() as db:
        for row in gone:
            queue_items.retire_in(db, row["id"], now)
            ledger.append_in(db, "queue_retire", source="sentinel", ts=now, agent=row["agent"], detail={
                "item": row["id"], "job": row["job"], "state": row["state"], "why": "its job is gone from the config"})


def fold_renamed(watches: dict[str, jobscan.Watch], configured: set[str], runs: dict[str, list[JobRun]],
                 running: dict[str, list[Running]], last_starts: dict[str, float]) -> None:
    """A run going under a job's old name when the job was renamed ends under that name (its run-job
    records its end by it): it is the renamed job's, judged at its end (as an orphan's, its failure
    was lost), timed by its schedule while it runs (never told when it hung), and its start the
    job's latest (its slots missed behind it told as "no run since"). In place; the store's rows keep
    the name they run under. Not while the old name is a configured job again: its runs are its own."""
    for name, watch in watches.items():
        old = watch.renamed_from
        if old is None or name not in configured or old in configured:
            continue
        if old in runs:
            runs[name] = sorted(runs.get(name, []) + [replace(r, job=name) for r in runs.pop(old)], key=lambda r: r.id)
        if old in running:
            running[name] = running.get(name, []) + [replace(g, run=replace(g.run, job=name)) for g in running.pop(old)]
        if old in last_starts:
            last_starts[name] = max(last_starts[old], last_starts.get(name, last_starts[old]))


def unreviewed_runs(ctx: Context, now: float) -> tuple[dict[str, list[JobRun]], dict[str, list[Running]]]:
    """The unreviewed runs by job: those that ended, or whose run-job died without recording an
    end; and those still running."""
    rows = []
    died = []
    running: dict[str, list[Running]] = {}
    for row in job_runs.unreviewed(ctx.store):
        if row["ended"] is None:
            # A reused pid is not our run-job; a row from before its start was kept (migration
            # 0011) is judged once the old way, so a job running across the upgrade stays running.
            if proctree.of(ctx).alive_since(row["pid"], row["pid_started"], row["started"]):
                running.setdefault(row["job"], []).append(Running(_job_run(row), row["overrun_at"]))
                continue
            died.append((now, "run-job ended without recording the exit (killed?)", row["id"]))
            continue
        rows.append(row)
    if died:
        with ctx.store.write() as db:
            job_runs.died_in(db, died)
            # Read again: a run-job that recorded its end between the read above and the look at its
            # process is judged by its own end (taken for killed, a clean run made an item and
            # reopened the claim it witnessed).
            rows += [again for _, _, run_id in died if (again := job_runs.get_in(db, run_id)) is not None]
    out: dict[str, list[JobRun]] = {}
    for row in sorted(rows, key=lambda r: r["id"]):
        out.setdefault(row["job"], []).append(_job_run(row))
    return out, running


def _job_run(row: sqlite3.Row) -> JobRun:
    return JobRun(row["id"], row["job"], row["started"], row["exit_code"], row["failure_lines"], row["error"],
                  row["started_mono"], row["boot"])


def job_matcher(ctx: Context, job: JobConfig) -> logscan.Matcher:
    cfg = ctx.config.sentinel
    return _matcher(tuple(cfg.patterns if job.patterns is None else job.patterns),
                    tuple(cfg.anti_patterns if job.anti_patterns is None else job.anti_patterns))


@functools.lru_cache(maxsize=256)
def _matcher(patterns: tuple[str, ...], anti_patterns: tuple[str, ...]) -> logscan.Matcher:
    # Built once per pattern list, not per job per tick: reading the needles out of the patterns
    # and compiling them for hyperscan cost more than an idle pass.
    return logscan.Matcher(list(patterns), list(anti_patterns), literal_search.finder)


def scan_job(ctx: Context, job: JobConfig, runs: list[JobRun], at: Instant, report: SentinelReport,
             watch: jobscan.Watch, last_start: float | None, slots: schedule.Cron | None,
             landed: float | None = None, running: list[Running] | None = None) -> None:
    """`landed`: where the wall clock landed when it was stepped since the last pass; `running`:
    the job's runs still going."""
    store = ctx.store
    now = at.wall
    path = str(job.log)
    failures: list[Failure] = []
    try:
        scanned = jobscan.scan_log(job.name, path, watch.position, job_matcher(ctx, job))
        position = scanned.position
        failures += scanned.failures.values()
        report.bytes_read += scanned.bytes_read
        report.lines += scanned.lines
        report.failure_lines += scanned.failure_lines
    except OSError as exc:
        # An unreadable log is a failure of the job's setup: the agent can often fix it.
        position = watch.position or logscan.Position(path)
        text = f"cannot read the log {path}: {exc.strerror or exc}"
        failures.append(Failure(job.name, SCAN, normalize(text), text, at=now))
    for run in runs:
        if run.exit_code != 0 or run.error:
            failures.append(exit_failure(run))
    watch_since = watch.watch_since if watch.watch_since is not None else now
    missed_mark = watch.missed_mark
    if landed is not None and job.schedule:
        missed_mark = landed  # the wait starts over where the stepped clock landed (schedule.py)
    reference = schedule.wait_from((last_start if last_start is not None else watch_since, missed_mark), now)
    gap = None
    overran: list[int] = []
    grace = ctx.config.sentinel.missed_grace
    if job.schedule and slots is not None:
        gap = schedule.missed(job.schedule, reference, now, grace, cron=slots)
        for going in running or []:
            if going.overrun_at is None and going.allowance is not None and age(going.run.start, at) > going.allowance:
                overran.append(going.run.id)
                failures.append(overrun_failure(job, going.run))
    # Slots missed behind the job's latest run, still going, are that run's overrun (told once, as
    # such): "no run since" would send the agent looking for why cron never started it.
    latest_going = last_start is not None and any(g.run.started == last_start for g in running or [])
    if gap is not None:
        first, last = gap
        missed_mark = last
        if not latest_going:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(first))
            failures.append(Failure(job.name, MISSED, "missed schedule", f"no run since {when} ({job.schedule})",
                                    at=last))
    changed = (watch.position != position or watch.watch_since is None or missed_mark != watch.missed_mark)
    if not (changed or failures or runs):
        return
    with store.write() as db:
        jobscan.save_watch(db, job.name, position, watch_since, missed_mark, now)
        merge(db, job, failures, runs, at, report)
        job_runs.reviewed_in(db, [r.id for r in runs])
        job_runs.overran_in(db, overran, now)
    report.runs_reviewed += len(runs)


def _lines_held(items: dict[tuple[str, str], Item]) -> int:
    """The job's live items of distinct failure lines (the overflow item not among them)."""
    return sum(1 for kind, signature in items if kind == LINE and signature != jobscan.OVERFLOW)


def exit_failure(run: JobRun) -> Failure:
    if run.error:
        text = f"run {run.id}: {run.error}"
        return Failure(run.job, EXIT, normalize(run.error), text, at=run.started, at_mono=run.started_mono,
                       at_boot=run.boot)
    return Failure(run.job, EXIT, f"exit code {run.exit_code}", f"run {run.id} exited {run.exit_code}",
                   at=run.started, at_mono=run.started_mono, at_boot=run.boot)


def overrun_failure(job: JobConfig, run: JobRun) -> Failure:
    """A run still going past its allowance (schedule.run_allowance): one signature a job, so a
    second hung run counts on the item the first made (and reopens it when it started after a claim)."""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(run.started))
    return Failure(job.name, OVERRUN, "still running after a whole period of its schedule",
                   f"run {run.id}, started {when}, is still running ({job.schedule})", at=run.started,
                   at_mono=run.started_mono, at_boot=run.boot)


def merge(db: sqlite3.Connection, job: JobConfig, failures: list[Failure], runs: list[JobRun],
          now: Instant | float, report: SentinelReport) -> None:
    """Failures into the job's live items (dedup, reopen), then finished runs against claims."""
    at = as_instant(now)
    now = at.wall
    items = queue.live(db, job.name)
    touched: dict[int, Item] = {}
    events: list[tuple[EventKind, dict]] = []
    for failure in failures:
        key = (failure.kind, failure.signature)
        if key not in items and _lines_held(items) >= jobscan.MAX_SIGNATURES and failure.kind == LINE:
            # The job holds its share of distinct failure lines already: a log whose errors differ by
            # words (a user, a feed, a file) added twenty items a scan, each nudged, then sent to the
            # operator, without end. More fold into the one item that says "read the log".
            failure = replace(failure, signature=jobscan.OVERFLOW)
            key = (LINE, jobscan.OVERFLOW)
        item = items.get(key)
        if item is None:
            item = queue.insert(db, failure, str(job.log), now, agent=job.agent)
            # Its backstop runs on the monotonic clock from here (saved with the touched items below).
            item = replace(item, first_seen_mono=at.mono, first_seen_boot=at.boot)
            touched[item.id] = item
            report.new_items.append(item.id)
        else:
            before = item.state
            item, evs = absorb(item, failure, at)
            events += evs
            (report.reopened if item.state == OPEN and before != OPEN else report.recurred).append(item.id)
            touched[item.id] = item
        items[key] = item
    for run in runs:
        for key, item in list(items.items()):
            item, evs = review(item, run, at)
            if evs:
                events += evs
                touched[item.id] = item
                items[key] = item
                (report.witnessed if evs[0][0] == "queue_witness" else report.reopened).append(item.id)
    for item in touched.values():
        queue.save(db, item)
    for kind, detail in events:
        ledger.append_in(db, kind, source=SOURCE, ts=now, detail=detail, agent=job.agent)


# -- nudges and the backstop -------------------------------------------------------------


def send_due(ctx: Context, at: Instant, report: SentinelReport,
             running: dict[str, list[Running]] | None = None) -> None:
    """`running`: the runs still going, by job (a claim's witness may be one of them)."""
    now = at.wall
    items = queue.unresolved_items(ctx.store)
    if not items:
        return
    cfg = ctx.config.sentinel
    agents: dict[str, Context] = {}
    relaunching: dict[str, bool] = {}
    spent: dict[str, int] = {}
    try:
        # An item not yet nudged (since it opened, or reopened) first: spent in id order, the pass's
        # budget went to the older items' renudges, and a new failure reached the human at its
        # backstop never nudged; and each agent its own budget (another's failing injections spent it).
        for item in sorted(items, key=lambda i: (not _owed_first_nudge(i), i.id)):
            # An item's nudges go to its job's agent as the config says now (a job moved to another
            # agent takes its live items along: they kept nudging the old one); an agent gone from
            # the config, to the agent the item was for, else the first (a job gone from it retired
            # its items: scan_all).
            job = ctx.config.job(item.job)
            owner = job.agent if job is not None and job.agent in ctx.config.agent_names else item.agent
            if owner != item.agent:
                # Re-homed for good: the status, the console, the escalation's name and its ledger
                # event read the item's agent too, not only its nudges.
                with ctx.store.write() as db:
                    queue_items.update_in(db, item.id, {"agent": owner})
                item = replace(item, agent=owner)
            name = owner if owner in ctx.config.agent_names else ctx.agent
            if name not in agents:
                agents[name] = ctx if name == ctx.agent else ctx.for_agent(name)
                # boot grace on the monotonic clock, not `now`
                relaunching[name] = launches.relaunch_under_way(agents[name])
            report.relaunching = report.relaunching or relaunching[name]
            going = witness_going(ctx, item, (running or {}).get(item.job, []), at)
            for action in decide(item, cfg, at, relaunching=relaunching[name],
                                 witness_window=witness_window(ctx, item), witness_going=going):
                if isinstance(action, Escalate):
                    escalate(ctx, item, action, now, report)
                elif spent.get(name, 0) >= MAX_NUDGES_PER_TICK:
                    report.nudges_deferred += 1
                else:
                    spent[name] = spent.get(name, 0) + 1
                    nudge(agents[name], item, action, now, report)
    finally:
        for other in agents.values():
            if other is not ctx:
                other.close()


def _owed_first_nudge(item: Item) -> bool:
    return item.last_nudge_at is None or (item.reopened_at is not None and item.reopened_at > item.last_nudge_at)


def witness_window(ctx: Context, item: Item) -> float | None:
    """How long a claim may wait for its witness run: until the job's next scheduled run (cron
    or `every`) after the claim, plus the missed-run grace. None without a schedule."""
    job = ctx.config.job(item.job)
    if job is None or not job.schedule or item.claimed_at is None:
        return None
    try:
        due = schedule.next_due(job.schedule, item.claimed_at, cron=cron.in_zone(clock.local_zone()))
        return due - item.claimed_at + ctx.config.sentinel.missed_grace
    except ValueError:
        return None


def witness_going(ctx: Context, item: Item, running: list[Running], at: Instant) -> bool:
    """Whether runs of a claimed item's job that started after the claim still run, each within its
    allowance (schedule.run_allowance): their end may witness the claim. One past it is no witness
    to wait for, and neither is the next (a job whose runs hang, each started before the last one's
    allowance ran out, held the message for as long as they hung). A job without a schedule has no
    allowance: its claim waits for no run."""
    job = ctx.config.job(item.job)
    claimed = item.claimed
    if job is None or not job.schedule or claimed is None or item.state != CLAIMED:
        return False
    after = [going for going in running if raw_age(claimed, going.run.start) > 0]
    return bool(after) and all(going.overrun_at is None and going.allowance is not None
                               and age(going.run.start, at) <= going.allowance for going in after)


# Nudges typed whose count the store refused (locked past its busy timeout twice: the line's ledger
# event, then the count): (store, item) → (the item's count then, when typed). The next pass records
# that nudge instead of typing the line again, if the item is as it was (not counted since, not
# reopened after). A daemon's passes share it; a one-shot `loom tick sentinel` cannot.
_TYPED_UNCOUNTED: dict[tuple[str, int], tuple[int, float]] = {}


def nudge(ctx: Context, item: Item, action: Nudge, now: float, report: SentinelReport) -> None:
    key = (str(ctx.store.path), item.id)
    uncounted = _TYPED_UNCOUNTED.pop(key, None)
    if uncounted is not None and uncounted[0] == item.nudges and \
            (item.reopened_at is None or item.reopened_at <= uncounted[1]):
        try:
            with ctx.store.write() as db:
                queue_items.nudged_in(db, item.id, uncounted[1])
        except StoreError:
            _TYPED_UNCOUNTED[key] = uncounted  # still locked: the pass after this one tries again
            raise
        report.nudged.append(item.id)
        return
    typed = ledger.nudge_typed(ctx.store, ctx.agent, item.id, item.nudges + 1)
    if typed is not None and (item.reopened_at is None or item.reopened_at <= typed):
        # Typed, its count lost (the daemon killed between the two writes, or restarted after the
        # store refused the count): counted now, as _TYPED_UNCOUNTED does within one daemon, not
        # typed a second time.
        with ctx.store.write() as db:
            queue_items.nudged_in(db, item.id, typed)
        report.nudged.append(item.id)
        return
    detail = {"item": item.id, "job": item.job, "nudge": item.nudges + 1, "renudge": action.renudge}
    try:
        result = actions.nudge(ctx, action.text, source=SOURCE, detail=detail)
        ok, error = result.ok, result.error
        if result.refused:
            # A hold: not tried, not counted; the backstop still reaches the human.
            report.nudges_held.append(item.id)
            return
    except LoomError as exc:
        ok, error = False, str(exc)
    if not ok:
        # Not counted: the next tick tries again (the failed attempt is in the ledger).
        report.nudge_failed.append(item.id)
        report.errors.append(f"nudge of item {item.id} failed: {error}")
        return
    try:
        with ctx.store.write() as db:
            queue_items.nudged_in(db, item.id, now)
    except StoreError:
        _TYPED_UNCOUNTED[key] = (item.nudges, now)  # typed: counted on the next pass, never typed twice
        raise
    report.nudged.append(item.id)


def escalate(ctx: Context, item: Item, action: Escalate, now: float, report: SentinelReport) -> None:
    with ctx.store.write() as db:
        row = queue_items.escalated_at_in(db, item.id)
        # Looked at again in the transaction that tells: the pass read its items before typing its
        # nudges, seconds ago, and an item claimed (or witnessed) meanwhile was told as still open.
        if row is None or row[0] is not None or row[1] != item.state:
            return
        # With several agents the human is told whose it was.
        text = action.text if len(ctx.config.agents) == 1 else f"[{item.agent}] {action.text}"
        # The ledger's head as it stands goes with every escalation: kept by the operator, it pins
        # the history up to it (`loom ledger verify --head`).
        text += f" ledger {ledger.format_head(*ledger.head_in(db))}"
        message_id = outbox.enqueue(db, redact.scrub(text), dedupe_key=action.dedupe_key, now=now)
        queue_items.escalate_in(db, item.id, now)
        ledger.append_in(db, "queue_escalate", source=SOURCE, ts=now, agent=item.agent,
                         detail={"item": item.id, "job": item.job, "outbox": message_id})
    report.escalated.append(item.id)
