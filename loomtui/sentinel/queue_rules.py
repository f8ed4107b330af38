"""The sentinel queue's rules, as pure functions of items, facts, config and an explicit now.

An item is `open` until someone runs `loom resolve` (then `claimed`); a claim is a promise,
not proof. It becomes `witnessed` only when the job's next run, started after the claim,
exits 0 without failure lines. A failure seen after the claim reopens it. Open items are
nudged to the agent and, past the backstop, reported to the operator exactly once.

The backstops run from an item's first sighting and from its claim on the monotonic clock when
the start was recorded on this boot (the item keeps both readings), so a wall clock stepped
forward does not report every open item at once, nor one stepped back silence them for a day;
across a reboot the stored wall times decide (timing.age).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, replace
from typing import Protocol

from loomtui.states import CLAIMED, OPEN, RETIRED, WITNESSED, EventKind  # noqa: F401  (re-exported: callers say queue_rules.OPEN)
from loomtui.timing import Instant, age, as_instant, raw_age

LINE, EXIT, MISSED, SCAN, OVERRUN = "line", "exit", "missed", "scan", "overrun"


class QueueSettings(Protocol):
    """The `[sentinel]` values the queue rules read (config.SentinelConfig has them)."""

    backstop: float
    renudge: float



@dataclass(frozen=True)
class Item:
    id: int
    job: str
    kind: str
    signature: str
    sample: str
    log: str
    first_seen: float
    last_seen: float
    count: int = 1
    state: str = OPEN
    nudges: int = 0
    last_nudge_at: float | None = None
    escalated_at: float | None = None
    reopened_at: float | None = None
    reopens: int = 0
    claimed_at: float | None = None
    claimed_by: str | None = None
    claimed_session: str | None = None
    claim_dev: int | None = None
    claim_inode: int | None = None
    claim_offset: int | None = None
    note: str | None = None
    witnessed_at: float | None = None
    witness_run: int | None = None
    agent: str = "main"  # the agent its nudges go to (the job's)
    # The monotonic clock at `first_seen` and at `claimed_at`, and the boot of each (None: wall only).
    first_seen_mono: float | None = None
    first_seen_boot: str | None = None
    claimed_mono: float | None = None
    claimed_boot: str | None = None
    reopened_mono: float | None = None
    reopened_boot: str | None = None

    @property
    def seen(self) -> Instant:
        return Instant(self.first_seen, self.first_seen_mono, self.first_seen_boot)

    @property
    def claimed(self) -> Instant | None:
        return None if self.claimed_at is None else Instant(self.claimed_at, self.claimed_mono, self.claimed_boot)

    @property
    def reopened(self) -> Instant | None:
        return None if self.reopened_at is None else Instant(self.reopened_at, self.reopened_mono, self.reopened_boot)

    def open_since(self, backstop: float) -> Instant:
        """Where its backstop runs from: its first sighting; or its last reopen, when the claim that
        reopen ended had held for a backstop at least. From the first sighting, a fix claimed in
        time and failing a day later reached the operator in the same pass as the agent's nudge; from
        every reopen, an agent whose fixes never held (a job every 15 minutes failing again after
        each claim) kept the operator from ever hearing."""
        reopened, claimed = self.reopened, self.claimed
        if reopened is not None and claimed is not None and raw_age(self.seen, reopened) > 0 \
                and raw_age(claimed, reopened) >= backstop:
            return reopened
        return self.seen


@dataclass(frozen=True)
class Failure:
    """One failure signature seen in one scan, with how many times and where."""

    job: str
    kind: str
    signature: str
    sample: str
    count: int = 1
    at: float | None = None  # when it happened (a run's start, a missed due time)
    # A run's start on the monotonic clock too, and its boot: told from the claim as `review` does.
    at_mono: float | None = None
    at_boot: str | None = None
    # Where in the log the latest occurrence is: a line after the claim's log position is new.
    position: tuple[int | None, int | None, int] | None = None  # (dev, inode, offset)


@dataclass(frozen=True)
class JobRun:
    id: int
    job: str
    started: float
    exit_code: int | None
    failure_lines: int
    error: str | None = None
    started_mono: float | None = None  # the monotonic clock at the start, on boot `boot` (None: wall only)
    boot: str | None = None

    @property
    def start(self) -> Instant:
        return Instant(self.started, self.started_mono, self.boot)

    @property
    def clean(self) -> bool:
        return self.exit_code == 0 and self.failure_lines == 0 and not self.error


def after_claim(item: Item, failure: Failure) -> bool:
    if item.claimed_at is None:
        return False
    if failure.position is not None:
        dev, inode, offset = failure.position
        if item.claim_inode is None:
            return True  # the log did not exist when the claim was made
        if (dev, inode) != (item.claim_dev, item.claim_inode):
            return True
        return offset >= (item.claim_offset or 0)
    if failure.at is None:
        return False
    claimed = item.claimed
    if failure.at_mono is not None and claimed is not None:
        # A run's start against the claim on one boot's monotonic clock, as `review` judges a witness:
        # a step of the wall clock between the two does not decide (a run from before the claim
        # reopened it, or one after it did not).
        return raw_age(claimed, Instant(failure.at, failure.at_mono, failure.at_boot)) > 0
    return failure.at > item.claimed_at


# Events: (kind, detail) pairs for the ledger, in order.
Events = list[tuple[EventKind, dict]]


def absorb(item: Item, failure: Failure, now: Instant | float) -> tuple[Item, Events]:
    """An existing, not yet witnessed item meets one more failure of its signature."""
    grown = replace(item, count=item.count + failure.count, last_seen=as_instant(now).wall)
    if item.state == CLAIMED and after_claim(item, failure):
        return reopen(grown, now, f"{failure.kind} failure seen after the claim")
    return grown, []


def reopen(item: Item, now: Instant | float, why: str) -> tuple[Item, Events]:
    if item.state != CLAIMED:
        return item, []
    at = as_instant(now)
    detail = {"item": item.id, "job": item.job, "why": why, "claimed_by": item.claimed_by,
              "claimed_session": item.claimed_session, "claimed_at": item.claimed_at}
    # The note says the claim did not hold; what the claimer wrote stays below it.
    note = f"claim did not hold ({why})" + (f"; earlier note: {item.note}" if item.note else "")
    return replace(item, state=OPEN, reopened_at=at.wall, reopened_mono=at.mono, reopened_boot=at.boot,
                   reopens=item.reopens + 1, note=note[:2000]), [
        ("queue_reopen", detail)]


def review(item: Item, run: JobRun, now: Instant | float) -> tuple[Item, Events]:
    """A claimed item meets a finished run of its job: witness on a clean run, reopen on a bad one."""
    claimed = item.claimed
    # Started after the claim: by the monotonic clock when both were read on one boot, else by wall.
    if item.state != CLAIMED or item.job != run.job or claimed is None or raw_age(claimed, run.start) <= 0:
        return item, []
    if run.clean:
        detail = {"item": item.id, "job": item.job, "run": run.id, "claimed_by": item.claimed_by,
                  "claimed_session": item.claimed_session}
        return replace(item, state=WITNESSED, witnessed_at=as_instant(now).wall, witness_run=run.id), [
            ("queue_witness", detail)]
    why = f"run {run.id} " + ("did not finish cleanly" if run.error
                              else f"exited {run.exit_code}" if run.exit_code != 0
                              else f"wrote {run.failure_lines} failure line(s)")
    return reopen(item, now, why)


# -- nudges and the backstop -------------------------------------------------------------


@dataclass(frozen=True)
class Nudge:
    item_id: int
    text: str
    renudge: bool


@dataclass(frozen=True)
class Escalate:
    item_id: int
    text: str
    dedupe_key: str


def decide(item: Item, cfg: QueueSettings, now: Instant | float, *, relaunching: bool = False,
           witness_window: float | None = None, witness_going: bool = False) -> list[Nudge | Escalate]:
    """What is due for one item now: a nudge to the agent, the operator's one message, or nothing.

    A claimed item waits for its witness run and is not nudged. But a claim is not proof: if no
    clean run witnesses it within `witness_window` (the job's period and grace, at least the
    backstop), the operator gets the item's one message, as for any item left open; not while
    `witness_going` (the runs of its job that started after the claim still run, each within its
    allowance: a backup of an hour is still the witness at its slot and 10 minutes).
    """
    at = as_instant(now)
    if item.state == CLAIMED:
        window = max(cfg.backstop, witness_window or 0.0)
        claimed = item.claimed
        if item.escalated_at is None and claimed is not None and age(claimed, at) >= window and not witness_going:
            return [Escalate(item.id, unwitnessed_text(item, at), backstop_key(item.id))]
        return []
    if item.state != OPEN:
        return []
    actions: list[Nudge | Escalate] = []
    if not relaunching and nudge_due(item, cfg.renudge, at.wall):
        actions.append(Nudge(item.id, nudge_text(item), item.nudges > 0))
    if item.escalated_at is None and age(item.open_since(cfg.backstop), at) >= cfg.backstop:
        actions.append(Escalate(item.id, escalation_text(item, at), backstop_key(item.id)))
    return actions


def nudge_due(item: Item, renudge: float, now: float) -> bool:
    last = item.last_nudge_at
    if last is None:
        return True
    if item.reopened_at is not None and item.reopened_at > last:
        return True  # reopened since its last nudge (one at the reopen itself is that nudge: renudge then)
    # A clock that went backwards must not silence nudges until it catches up.
    return now - last >= renudge or now < last


def backstop_key(item_id: int) -> str:
    return f"queue-{item_id}-backstop"


def resolve_command(item_id: int) -> str:
    return f'loom resolve {item_id} --note "<what you found and did>"'


def quoted(text: str) -> str:
    # Job names are untrusted: JSON quoting keeps them one visible, unambiguous token.
    return json.dumps(text, ensure_ascii=False)


MEMORY_CONFLICT = "memory_conflict"  # the memory replica kept both sides of a file (memory/replica.py)


def nudge_text(item: Item) -> str:
    if item.kind == MEMORY_CONFLICT:
        # The sample is Loom's own sentence around file names from the memory directory: quoted.
        return (f"[loom sentinel] Queue item {item.id}: the memory replica met a conflict and kept both sides: "
                f"{quoted(item.sample)}. Merge what is worth keeping into the file, delete the copy "
                f"{shlex.quote(item.log)}, then run: {resolve_command(item.id)}")
    what = {LINE: "failure lines in its log", EXIT: "a failed run", MISSED: "a missed schedule",
            SCAN: "an unreadable log",
            OVERRUN: "a run still going after a whole period of its schedule"}.get(item.kind, item.kind)
    what += f" (seen {item.count}x)" if item.count > 1 else ""
    again = " Reopened: the last claim did not hold." if item.reopens and item.state == OPEN else ""
    return (f"[loom sentinel] Queue item {item.id}: job {quoted(item.job)} shows {what}; "
            f"log: {shlex.quote(item.log)}.{again} Read the log and the script, decide whether it is current "
            f"or stale, fix it if safe, then run: {resolve_command(item.id)}")


def escalation_text(item: Item, now: Instant | float) -> str:
    from loomtui.durations import format_duration

    open_for = format_duration(age(item.seen, as_instant(now)))
    if item.kind == MEMORY_CONFLICT:
        return (f"Loom: a memory conflict has waited {open_for} for the agent to reconcile it (queue item "
                f"{item.id}, agent nudged {item.nudges}x): {item.signature[:120]}; this box's side is {item.log}. "
                "See loom queue.")
    return (f"Loom: job {quoted(item.job)} has an open failure for {open_for} "
            f"(queue item {item.id}, seen {item.count}x, agent nudged {item.nudges}x): {item.signature[:120]}. "
            f"Log: {item.log}. See loom queue.")


def unwitnessed_text(item: Item, now: Instant | float) -> str:
    from loomtui.durations import format_duration

    at = as_instant(now)
    since = 0.0 if item.claimed is None else age(item.claimed, at)
    return (f"Loom: job {quoted(item.job)}: queue item {item.id} was claimed fixed "
            f"{format_duration(since)} ago, but no clean run has witnessed it "
            f"(note: {quoted((item.note or '')[:120])}). Log: {item.log}. See loom queue.")
