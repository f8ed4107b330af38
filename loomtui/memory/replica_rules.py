"""The memory replica's decisions, as pure functions of what the last looks saw and an explicit now.

When to commit (the directory has been still for the quiet period, or a pull is due: a rebase
needs a clean tree), when to pull (at start, then every `pull_interval`, sooner after a push the
remote refused), when to push (commits not pushed yet, with a backoff while the remote is away),
when to checkpoint the ledger's head (every interval once it moved, at once after an escalation),
what a conflict copy is called, and the replica's lag in words. No clock, no git, no files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from loomtui.durations import format_duration

# While the remote is away, tries come at most this often at first, then back off to the cap.
RETRY_BASE = 10.0
RETRY_MAX = 600.0
# What stopped a sync: the remote (a fetch, ls-remote or push that failed: the backoff grows), or
# git here (a rebase refused for a dirty tree, a path it did not know: waiting mends nothing).
REMOTE, LOCAL = "remote", "local"
LOCAL_WORDS = "not synced (git refused here, not the remote)"
# The ledger events that reach the operator: each one is checkpointed off the box at once.
ESCALATIONS = ("escalation", "queue_escalate", "operator_alert")


@dataclass(frozen=True)
class Settings:
    quiet: float          # memory.sync_quiet
    pull_interval: float  # memory.pull_interval


@dataclass(frozen=True)
class Look:
    """What the replica loop knows before it acts: the tree, the remote, and when each last happened."""

    dirty: bool                      # changes not committed
    changed_at: float | None         # when the uncommitted changes last changed (as the loop saw them)
    ahead: int                       # local commits the remote has not got
    last_pull: float | None          # the last pull that reached the remote
    last_try: float | None           # the last time the remote was tried (pull or push), reached or not
    failures: int                    # tries in a row that did not reach the remote
    forced: bool = False             # `loom memory sync`: everything now
    starting: bool = False           # the daemon's first look: a pull, whatever the last one was
    rejected: bool = False           # the last push was refused (the remote moved): pull first


@dataclass(frozen=True)
class Plan:
    commit: bool
    pull: bool
    push: bool

    @property
    def idle(self) -> bool:
        return not (self.commit or self.pull or self.push)


def retry_wait(failures: int) -> float:
    """How long after a try that did not reach the remote the next one waits."""
    if failures <= 0:
        return 0.0
    return min(RETRY_BASE * 2 ** (failures - 1), RETRY_MAX)


def remote_due(look: Look, now: float) -> bool:
    """May the remote be tried now? Always when it answered last; after a backoff when it did not."""
    if look.forced or look.failures <= 0 or look.last_try is None:
        return True
    return now - look.last_try >= retry_wait(look.failures) or now < look.last_try


def pull_due(look: Look, now: float, settings: Settings) -> bool:
    """At start (never pulled, or the daemon's first look), every pull_interval, and before a push
    the remote refused."""
    if look.starting:
        return True
    if not remote_due(look, now):
        return False
    if look.forced or look.rejected or look.last_pull is None:
        return True
    # A wall clock stepped back must not stop the pulls until it catches up.
    return now - look.last_pull >= settings.pull_interval or now < look.last_pull


def commit_due(look: Look, now: float, settings: Settings, *, pulling: bool = False) -> bool:
    """Changes are committed once still for the quiet period; at once when forced or when a pull
    is about to rebase (a rebase needs a clean tree, and a pull every interval is at most one
    early commit per interval)."""
    if not look.dirty:
        return False
    if look.forced or pulling:
        return True
    if look.changed_at is None:
        return False  # first seen now: the quiet period starts here
    return now - look.changed_at >= settings.quiet or now < look.changed_at


def plan(look: Look, now: float, settings: Settings) -> Plan:
    pull = pull_due(look, now, settings)
    commit = commit_due(look, now, settings, pulling=pull)
    push = (look.ahead > 0 or commit) and remote_due(look, now)
    return Plan(commit=commit, pull=pull, push=push)


def next_look(look: Look, now: float, settings: Settings, period: float) -> float:
    """Seconds until something may be due (at most `period`): the quiet period's end, the next pull."""
    waits = [period]
    if look.dirty and look.changed_at is not None:
        waits.append(look.changed_at + settings.quiet - now)
    if look.last_pull is not None:
        waits.append(look.last_pull + settings.pull_interval - now)
    return max(min(waits), 0.5)


def checkpoint_due(head_seq: int, last_seq: int | None, last_at: float | None, escalated_after: bool,
                   now: float, interval: float) -> bool:
    """The ledger head goes off the box every `interval` once it moved, and at once after an
    escalation recorded since the last checkpoint (`escalated_after`)."""
    if head_seq <= 0 or head_seq == last_seq:
        return False
    if escalated_after or last_at is None or last_seq is None:
        return True
    if head_seq < last_seq:
        # A new chain (a salvage started one): its head goes off the box at once, and an escalation
        # in it would never count as after the old chain's checkpoint.
        return True
    return now - last_at >= interval or now < last_at


_STAMP = re.compile(r"[^0-9]")


def conflict_name(path: str, host: str, stamp: str) -> str:
    """Where this box's side of a conflicting file is kept: `notes.md.conflict-HOST-20270115T080000`.
    `stamp` is the local time as YYYYmmddTHHMMSS (the caller formats it; the rule keeps it plain)."""
    digits = _STAMP.sub("", stamp)
    return f"{path}.conflict-{host}-{digits[:8]}T{digits[8:14]}"


_COPY = re.compile(r"\.conflict-([A-Za-z0-9_-]+)-\d{8}T\d{6}(-\d+)?$")


def is_conflict_copy(path: str) -> bool:
    """A copy conflict_name made, or one made beside it in the same second (`-2`, `-3`: replica's
    _free_name), which went uncounted and left the conflict looking reconciled."""
    return _COPY.search(path) is not None


def conflicted_file(copy: str) -> str:
    """The file a conflict copy is a side of (its name without `.conflict-HOST-TIME`)."""
    found = _COPY.search(copy)
    return copy[:found.start()] if found else copy


def copy_host(copy: str) -> str | None:
    """The box that kept a conflict copy (None: not a copy). A host's name may hold `-`: the
    greedy match takes all of it up to the time."""
    found = _COPY.search(copy)
    return found.group(1) if found else None


@dataclass(frozen=True)
class Lag:
    """The replica as the last sync left it (stored beside the repository, read by status)."""

    last_push: float | None
    last_pull: float | None
    ahead: int
    error: str = ""
    error_since: float | None = None
    conflicts: int = 0
    error_kind: str = REMOTE


def lag_words(lag: Lag | None, now: float, *, short: bool = False) -> str:
    """`pushed 2m ago, pulled 1m ago, 0 commits to push`, or `remote unreachable (since 5m): ...`
    while the remote is away (an error here says so instead). `short` for the console's summary
    line at 80 columns."""
    if lag is None:
        return "not synced yet"

    def ago(at: float | None) -> str:
        return "never" if at is None else format_duration(max(now - at, 0.0)) + (" ago" if not short else "")

    if short:
        out = f"↑{ago(lag.last_push)} ↓{ago(lag.last_pull)}"
        if lag.ahead:
            out += f" {lag.ahead} to push"
        if lag.error:
            out += " offline" if lag.error_kind != LOCAL else " error"
        return out
    commits = f"{lag.ahead} commit{'s' * (lag.ahead != 1)} to push"
    out = f"pushed {ago(lag.last_push)}, pulled {ago(lag.last_pull)}, {commits}"
    if lag.error:
        since = ago(lag.error_since) if lag.error_since is not None else "now"
        what = "remote unreachable" if lag.error_kind != LOCAL else LOCAL_WORDS
        out = f"{what} (since {since.removesuffix(' ago')}): {lag.error}; " + out
    if lag.conflicts:
        out += f"; {lag.conflicts} conflict{'s' * (lag.conflicts != 1)} to reconcile"
    return out
