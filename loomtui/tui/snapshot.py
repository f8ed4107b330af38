"""What the console shows, gathered in one go by a worker thread (never in a handler or timer).

Every source may fail on its own: a locked or unreadable store, a tmux server that is gone or
does not answer. Each failure becomes a plain sentence in the snapshot and the rest still loads,
so the console says what is wrong and keeps running.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from loomtui.agent import drivers, hold_rules, lifecycle
from loomtui.timing import Instant
from loomtui.agent.driver import GONE, UNKNOWN
from loomtui.canary import runs as canary
from loomtui.canary.runs import Probe
from loomtui.context import Context
from loomtui.durations import format_duration
from loomtui.hooks import turn_rules
from loomtui.pump import transcript
from loomtui.report import fleet, incidents
from loomtui.report import pane as pane_look
from loomtui.report import status as status_mod
from loomtui.report.check_rules import supervisor_stale_after
from loomtui.store import canary_runs, ledger, queue_items
from loomtui.store.db import DB_NAME, Store
from loomtui.text import dumps
from loomtui.tui import hold_words
from loomtui.tui.transcript_view import Entry, Follower

STORE_TIMEOUT = 2.0  # the console must say "store busy" promptly, not hang for the daemon's 10 s
# The overview reads bounded pages only, so a refresh costs the same with a million ledger events.
INCIDENT_EVENTS = 200     # the newest incident-kind events grouped for "last incident" and the latest list
LATEST_INCIDENTS = 8
RELAUNCH_EVENTS = 1000    # relaunches read for the per-hour plot (the ceiling keeps a day far below this)
DAY = 86400.0
SCROLLBACK = 1000         # lines of the agent pane's history above its screen the console keeps


REMOTE = "remote"  # a PaneView's state for another host's agent: its screen is not read from here


@dataclass(frozen=True)
class PaneView:
    state: str            # up / gone / unknown / dead / remote
    text: str = ""        # the captured screen, with its ANSI escapes
    why: str = ""
    # With the stream-json driver, the conversation from the pump's transcript (None: show the screen).
    conversation: tuple[Entry, ...] | None = None
    # The pane is dead or gone and the agent's last launch died booting: how it ended and the last
    # lines its pane printed (the launch_died event's), untrusted text.
    died: str = ""
    last_words: tuple[str, ...] = ()


@dataclass(frozen=True)
class Header:
    agent: str             # the agent's state, one phrase
    agent_level: str      # ok / warn / bad
    pinned: str | None
    canary: str
    canary_level: str
    supervisor: str
    supervisor_level: str
    open_items: int
    held: bool = False
    unsent: int = 0        # messages for the operator still in the outbox (Telegram off or failing)
    last_ack: str = ""     # the last canary ack and its age
    last_ack_level: str = "warn"
    queue_open: int = 0
    queue_claimed: int = 0
    incident: str = ""     # the last incident, one line
    incident_level: str = "ok"
    hold: str = ""         # why automatic relaunching is held, "" when it is not
    claim: str = ""        # the last relaunch while no canary has acked since, "" once one has
    name: str = ""         # the selected agent's name, with several agents ("" with one: nothing to tell apart)
    turn: str = ""         # the turn as the hooks (or the pump) tell it (TurnLook.describe); "" when neither does
    turn_level: str = "ok"


@dataclass(frozen=True)
class Overview:
    """What the overview's plots and latest-incidents list read, beyond the panels' own data."""

    relaunches: list[tuple[float, str]] = field(default_factory=list)   # (ts, cause) over the last day
    queue_spans: list[tuple[float, float | None]] = field(default_factory=list)  # (first seen, witnessed at)
    incidents: list[incidents.Incident] = field(default_factory=list)  # newest first


@dataclass(frozen=True)
class Snapshot:
    taken: float
    header: Header
    pane: PaneView
    canary: list[Probe] = field(default_factory=list)
    queue: list[Any] = field(default_factory=list)
    jobs: list[fleet.JobRow] = field(default_factory=list)
    ledger_count: int = 0
    store_error: str = ""
    overview: Overview = field(default_factory=Overview)
    agent: str = ledger.MAIN   # whose snapshot: a late one of the agent selected before is not shown
    host: str = ""             # "" this machine's agent, else the [[hosts]] name its snapshot was read from
    # Parts another host's Loom did not answer for ("queue", "jobs", "canary", "ledger") and why: an
    # empty list there is unknown, never "the queue is empty".
    unread: dict[str, str] = field(default_factory=dict)


def loading(now: float, agent: str, host: str = "") -> Snapshot:
    """What the panels show between choosing an agent and its first snapshot: nothing of the one
    chosen before (a row a key could act on)."""
    header = Header("loading…", "warn", None, "…", "warn", "…", "warn", 0)
    return Snapshot(now, header, PaneView(UNKNOWN, why=f"loading agent {agent}…"), agent=agent, host=host)


class Source:
    """One agent's view for the console: its store connection (opened lazily as that agent,
    reopened after a failure) and its driver. Every read is of that agent's rows only."""

    def __init__(self, ctx: Context, *, several: bool = False) -> None:
        # A context of its own: dropping a broken connection here never pulls one out from
        # under an action that is running in another worker.
        self.ctx = ctx.clone()
        self.agent = ctx.agent
        self.several = several  # the header names the agent only when there is another to tell it from
        self.driver = drivers.of(ctx)
        self._conversation = (Follower(transcript.path_in(self.ctx.agent_dir))
                              if self.driver.owns_turns else None)  # only a pump keeps a transcript
        self._store: Store | None = None
        self._inode: int | None = None
        self._lock = threading.Lock()  # the refresh and the timeline workers share the connection
        self._ledger_cache: tuple[int, list[tuple[float, str]], list[Any]] | None = None

    def store(self) -> Store:
        with self._lock:
            path = self.ctx.state_dir / DB_NAME
            try:
                inode = path.stat().st_ino
            except OSError:
                inode = None
            if self._store is not None and inode != self._inode:
                # The daemon replaced a damaged store: follow it to the new file.
                self._close()
            if self._store is None:
                self._store = Store.in_dir(self.ctx.state_dir, timeout=STORE_TIMEOUT, agent=self.agent,
                                           agent_dir=self.ctx.agent_dir)
                self.ctx._store = self._store
                self._inode = path.stat().st_ino
            return self._store

    def _from_ledger(self, store: Store, head: int, now: float) -> tuple[list[tuple[float, str]], list[Any]]:
        """The overview's ledger reads, read again only when the ledger grew: most refreshes see
        no new event, and then cost nothing here (the plots window the kept list by `now`)."""
        if self._ledger_cache is None or self._ledger_cache[0] != head:
            self._ledger_cache = (head, _relaunches(store, self.agent, now), _latest_incidents(store, self.agent))
        return self._ledger_cache[1], self._ledger_cache[2]

    def drop_store(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._store is not None:
            try:
                self._store.close()
            except Exception:  # closing a broken connection must not hide the original error
                pass
        self._store = None
        self.ctx._store = None
        self._ledger_cache = None  # a replaced store is another ledger

    def pane(self) -> PaneView:
        # With the conversation to show, the pane's screen is not captured: it would be thrown away.
        view = self._screen(capture=self._conversation is None)
        if self._conversation is None:
            return view
        try:
            conversation = self._conversation.look()
        except Exception as exc:  # noqa: BLE001 - OSError mostly; whatever it is, every other panel goes on
            return replace(view, why=f"transcript unreadable: {type(exc).__name__}: {exc}")
        return replace(view, conversation=conversation)

    def _screen(self, capture: bool = True) -> PaneView:
        seen = pane_look.look(self.driver, SCROLLBACK, capture=capture)
        return PaneView(seen.state, seen.text, seen.why)

    def load(self, now: float | None = None) -> Snapshot:
        now = time.time() if now is None else now
        pane = self.pane()
        try:
            store = self.store()
            return self._from_store(store, pane, now)
        except Exception as exc:  # locked, corrupt, vanished: say it, keep the console up
            self.drop_store()
            message = " ".join(str(exc).split()) or type(exc).__name__
            header = Header(_agent_text(pane, False, None)[0], _agent_text(pane, False, None)[1], None,
                            "unknown", "warn", f"store unavailable: {message}", "bad", 0,
                            name=self.agent if self.several else "")
            return Snapshot(now, header, pane, store_error=message, agent=self.agent)

    def _from_store(self, store: Store, pane: PaneView, now: float) -> Snapshot:
        ctx = self.ctx
        if pane.state in ("dead", GONE):
            pane = _with_last_words(store, self.agent, pane)
        # The pane is looked at above (with its text); everything else is the one status model.
        status = status_mod.gather(ctx, events=0, now=now, look=False)
        queue = _queue(store, self.agent)
        relaunches, latest = self._from_ledger(store, status.ledger_events, now)
        overview = Overview(relaunches, _queue_spans(store, self.agent, now), latest)
        header = header_from(status, pane, ctx.config, last_ack=_last_ack(store, self.agent),
                             incidents_=overview.incidents)
        if self.several:
            header = replace(header, name=self.agent)
        return Snapshot(now, header, pane, _probes(store, self.agent), queue, fleet.rows(ctx, store, queue, now),
                        status.ledger_events, overview=overview, agent=self.agent)


def _with_last_words(store: Store, agent: str, pane: PaneView) -> PaneView:
    """`pane` with why the agent's last launch died and the lines its pane printed, when that
    launch died booting (its launch_died event is newer than its relaunch): the pane's own screen
    then shows tmux's `Pane is dead`, the cause is in the lines before it."""
    died = ledger.newest_ids(store, agent, "launch_died", 1)
    launched = ledger.newest_ids(store, agent, "relaunch", 1)
    if not died or (launched and launched[0] > died[0]):
        return pane
    event = ledger.by_ids(store, died)[0]
    tail = str(event.detail.get("screen_tail") or "")
    status = event.detail.get("status")
    lines = tuple(line.strip() for line in tail.split(" | ") if line.strip())
    return replace(pane, died=f"the agent exited at once (status {status})" if status is not None
                   else "the agent exited at once", last_words=lines)


def _probes(store: Store, agent: str, limit: int = 100) -> list[Probe]:
    return [canary.probe_from(r) for r in canary_runs.newest(store, agent, limit)]


def _last_ack(store: Store, agent: str) -> tuple[float, float | None] | None:
    row = canary_runs.last_ack(store, agent, canary.OK)
    return None if row is None else (row["ack_at"] or row["sent_at"], row["latency"])


def _relaunches(store: Store, agent: str, now: float) -> list[tuple[float, str]]:
    """The agent's last day's relaunches, newest first, read back through the kind index in small
    pages until one reaches past the day (ts has no index; ids grow with time)."""
    out: list[tuple[float, str]] = []
    before = None
    while len(out) < RELAUNCH_EVENTS:
        rows = ledger.relaunch_page(store, agent, before, 100)
        out += [(r["ts"], r["cause"] or "") for r in rows if r["ts"] >= now - DAY]
        if len(rows) < 100 or rows[-1]["ts"] < now - DAY:
            break
        before = rows[-1]["id"]
    return out[:RELAUNCH_EVENTS]


def _queue_spans(store: Store, agent: str, now: float) -> list[tuple[float, float | None]]:
    rows = queue_items.spans(store, agent, now - DAY)
    return [(r["first_seen"], r["witnessed_at"]) for r in rows]


def _latest_incidents(store: Store, agent: str) -> list[incidents.Incident]:
    # One index range per kind (kind, id), merged: a single `kind IN (...)` query walks the whole
    # table backwards past ordinary traffic when trouble is rare, which is exactly when it is.
    ids: list[int] = []
    for kind in incidents.KINDS:
        ids += ledger.newest_ids(store, agent, kind, INCIDENT_EVENTS)
    events = event_detail(store, sorted(ids)[-INCIDENT_EVENTS:])  # oldest first
    return list(reversed(incidents.group(events)))[:LATEST_INCIDENTS]


def hold_text(hold: hold_rules.Hold | None, now: Instant | float) -> str:
    """Who holds automatic recovery, why and for how long ("" when nothing holds it): the hold
    rules' own line, so the summary says what `loom status` says; a hold the harness placed (the
    agent CLI reported a quota or a login) in plain words (hold_words)."""
    if hold is None or not hold_rules.active(hold, now):
        return ""
    return hold_words.line(hold, now) or hold_rules.describe(hold, now)


# A turn's state and how it reads: waiting on the operator is news, a quiet or too long turn counts
# toward a recycle.
TURN_LEVELS = {turn_rules.NO_TURN: "ok", turn_rules.TURN_BUSY: "ok", turn_rules.TURN_WAITING: "warn",
               turn_rules.TURN_QUIET: "bad", turn_rules.TURN_LONG: "bad"}


def turn_text(turn: status_mod.TurnLook | None) -> tuple[str, str]:
    """The turn as `loom status` says it, and how it reads ("" when neither hooks nor a pump tell it)."""
    if turn is None:
        return "", "ok"
    return turn.describe(), TURN_LEVELS.get(turn.state, "warn")


def incident_age(inc: incidents.Incident, now: float) -> str:
    """An incident's time in the one wording the summary and the timeline share: `for 30s` while
    it is open (ongoing or held: how long so far), `12m ago` once it ended (when it began)."""
    if inc.end is None:
        return f"for {format_duration(inc.duration(now))}"
    return f"{format_duration(max(now - inc.start, 0))} ago"


def took(inc: incidents.Incident, now: float) -> str:
    """The timeline's `took`: how long it lasted, or `for 30s` so far while open ("" for a note)."""
    if inc.status == incidents.NOTE:
        return ""
    return incident_age(inc, now) if inc.end is None else format_duration(inc.duration(now))


def incident_line(found: list[incidents.Incident], now: float) -> tuple[str, str]:
    """The last incident that was trouble (not a note), one line, and how bad it is."""
    for inc in found:
        if inc.status != incidents.NOTE:
            level = {incidents.RECOVERED: "ok", incidents.ONGOING: "bad", incidents.HELD: "bad"}.get(inc.status, "warn")
            return f"{inc.status} {incident_age(inc, now)}: {inc.title}", level
    return "none lately", "ok"


def header_from(status: status_mod.Status, pane: PaneView, config: Any, *,
                last_ack: tuple[float, float | None] | None = None,
                incidents_: list[incidents.Incident] | None = None) -> Header:
    hold = hold_text(status.hold, status.moment)
    held = bool(hold)
    since = status.since_launch
    booting = since is not None and lifecycle.booting(status.last_launch, config.agent.boot_grace, status.moment)
    agent, level = _agent_text(pane, held, since if booting else None, status.unwitnessed and status.relaunch is not None)
    claim = ""
    if status.unwitnessed and status.relaunch is not None:
        # Up is not heard: until a canary acks after the relaunch, recovery is only claimed.
        claim = (f"unwitnessed relaunch {format_duration(max(status.taken - status.relaunch.ts, 0))} ago "
                 f"({status.relaunch.cause})")
    stale_after = supervisor_stale_after(config.watchdog.interval)  # as `loom check` judges it
    beat = status.supervisor
    if beat is None:
        sup, sup_level = "no heartbeat", "bad"  # after "supervisor " in the summary
    elif beat.age > stale_after:
        sup, sup_level = f"STALE: beat {format_duration(beat.age)} ago", "bad"
    else:
        sup, sup_level = f"heartbeat {format_duration(max(beat.age, 0))} ago", "ok"
    last = status.canary_settled
    if last is None:
        can, can_level = "no probe yet", "warn"
    else:
        can = f"{last.result} {format_duration(max(last.age, 0))} ago"
        can += f" ({last.latency:.2f}s)" if last.latency is not None else ""
        can_level = "ok" if last.result == canary.OK else ("bad" if last.result == canary.MISS else "warn")
    if status.probing:
        can = "probing… · " + can
    unsent = status.outbox.get("pending", 0) + status.outbox.get("failed", 0)
    now = status.taken
    if last_ack is None:
        ack, ack_level = "never", "warn"
    else:
        ack = f"{format_duration(max(now - last_ack[0], 0))} ago"
        ack += f" ({last_ack[1]:.2f}s)" if last_ack[1] is not None else ""
        ack_level = "ok" if can_level == "ok" else "warn"
    incident, incident_level = incident_line(incidents_ or [], now)
    turn, turn_level = turn_text(status.turn)
    return Header(agent, level, status.pinned_session, can, can_level, sup, sup_level, status.unresolved, held,
                  unsent, ack, ack_level, status.queue.get("open", 0), status.queue.get("claimed", 0), incident,
                  incident_level, hold, claim, turn=turn, turn_level=turn_level)


def _agent_text(pane: PaneView, held: bool, booting_for: float | None, unwitnessed: bool = False) -> tuple[str, str]:
    if held:
        return "HELD: no automatic recovery", "bad"  # who, why and how long: the summary's hold line
    if pane.state == GONE:
        return "no tmux session", "bad"
    if pane.state == UNKNOWN:
        return "tmux not answering", "warn"
    if pane.state == "dead":
        return "exited", "bad"
    if pane.why:
        return pane.why, "warn"
    if booting_for is not None:
        return f"booting ({format_duration(booting_for)})", "warn"
    if unwitnessed:  # up is not heard: no canary has acked since the relaunch (`loom status` says so too)
        return "unwitnessed", "warn"
    return "running", "ok"


def _queue(store: Store, agent: str) -> list[Any]:
    """The agent's items: open and claimed oldest first, then the ten most recently witnessed
    (the sentinel's own listing, for one agent's rows)."""
    from loomtui.sentinel import queue as sentinel_queue

    live = queue_items.unwitnessed(store, agent)
    done = queue_items.last_witnessed(store, 10, agent)
    return [sentinel_queue.from_row(r) for r in live] + [sentinel_queue.from_row(r) for r in reversed(done)]


def event_detail(store: Store, event_ids: list[int]) -> list[ledger.Event]:
    return ledger.by_ids(store, event_ids)


def pretty(detail: dict[str, Any]) -> str:
    # JSON escapes the C0 controls; text.dumps escapes DEL, C1, bidi and surrogates as well.
    return dumps(detail, indent=2, sort_keys=True, default=str)
