"""One typed status model: what `loom status [--json]`, the console header, Telegram's /status
and the metrics endpoint all read, so they can never disagree about the same moment.

`gather` reads the store (and, unless told not to, takes one bounded look at the pane) for one
agent: the Context's; `gather_all` does it for every agent at once, each in its own thread with
its own Context, so one agent's stopped tmux server costs the others nothing.
`Status.as_json()` keeps the JSON keys `loom status --json` has always printed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from loomtui import clock
from loomtui.agent import drivers, holds, launches, lifecycle
from loomtui.agent.hold_rules import Hold
from loomtui.agent.records import LaunchRecord
from loomtui.timing import Instant, age, stored
from loomtui.canary import runs as canary
from loomtui.context import Context
from loomtui.durations import format_duration
from loomtui.hooks import source as turn_source
from loomtui.hooks import turn_rules
from loomtui.report import check_rules, heartbeat_rules
from loomtui.store import canary_runs, heartbeat_pushes, heartbeats, hook_events, ledger, outbox, queue_items, session, telegram_state
from loomtui.store.ledger import Event
from loomtui.text import printable

if TYPE_CHECKING:  # annotations only: a tmux agent's status never loads the pump's types
    from loomtui.pump.facts import StreamFacts


@dataclass(frozen=True)
class RelaunchClaim:
    """The last relaunch, and whether a canary ack has witnessed it: until one does, it is a claim."""

    event: int                      # the relaunch's ledger event id
    ts: float
    cause: str
    mode: str
    source: str
    witness: int | None = None      # the ledger event of the ack that witnessed it
    witnessed_at: float | None = None
    failed: bool = False            # the launch itself failed (relaunch_failed / launch_died)
    mono: float | None = None       # the relaunch on the monotonic clock, on boot `boot` (None: older records)
    boot: str | None = None

    @property
    def at(self) -> Instant:
        """When it was recorded, on both clocks where its record kept them: how long it has gone
        unwitnessed is measured on the monotonic clock within a boot (a wall clock stepped an hour
        ahead had failed a heartbeat at once)."""
        return stored(self.ts, self.mono, self.boot)

    @property
    def witnessed(self) -> bool:
        return self.witness is not None

    def as_json(self) -> dict[str, Any]:
        return {"event": self.event, "ts": self.ts, "cause": self.cause, "mode": self.mode, "source": self.source,
                "witnessed": self.witnessed, "witness_event": self.witness,
                "witnessed_after": None if self.witnessed_at is None else round(self.witnessed_at - self.ts, 3),
                "failed": self.failed}

    def describe(self, now: float) -> str:
        line = f"relaunched {format_duration(max(now - self.ts, 0))} ago ({self.cause}, {self.mode})"
        if self.failed:
            return line + ": the launch failed"
        if self.witness is None:
            return line + ": UNWITNESSED, no canary ack since"
        return line + f", witnessed by a canary ack {max((self.witnessed_at or self.ts) - self.ts, 0):.1f}s later"


@dataclass(frozen=True)
class AgentLook:
    """One bounded look at the pane: tmux up/gone/unknown, and the agent and poller in its tree;
    with the stream-json driver, the pump's facts too (turn, queue, last result)."""

    tmux: str
    why: str = ""
    pane: dict[str, Any] | None = None   # pane_pid, dead, exit_status: when tmux showed a pane
    tree: dict[str, Any] | None = None   # process, pid, poller: when the tree could be walked
    claim: str = ""                      # an unwitnessed last relaunch, said beside the process
    driver: str = "tmux"                 # the driver's name, as the config says it: said, never decided on
    owns_turns: bool = False             # the driver's capability: a pump whose facts are said
    stream: dict[str, Any] | None = None  # the current pump's facts (stream-json only)
    taken: float = 0.0

    def as_json(self) -> dict[str, Any]:
        out = {"tmux": self.tmux, "why": self.why, **(self.pane or {}), **(self.tree or {}), "driver": self.driver}
        if self.owns_turns:
            out["stream"] = self.stream
        return out

    def describe(self) -> str:
        # Said on a terminal, in a chat and in the console: tmux's words and the pump's are not ours.
        return printable(self._describe())

    def _describe(self) -> str:
        if self.tmux != "up":
            return f"tmux {self.tmux}: {self.why}"
        pane, tree = self.pane or {}, self.tree or {}
        if pane.get("dead"):
            return f"exited (status {pane.get('exit_status')})" + self._stream_note()
        line = f"process {tree.get('process')}" + (f" (pid {tree['pid']})" if tree.get("pid") else "")
        if tree.get("poller") and tree["poller"] != "unknown":
            line += f", poller {tree['poller']}"
        return line + self._stream_note() + (f"; {self.claim}" if self.claim else "")

    def _stream_note(self) -> str:
        if not self.owns_turns:
            return ""
        stream = self.stream
        if stream is None:
            return "; stream-json: no word from the pump"
        if stream.get("turn") == "running":
            since = stream.get("turn_started")
            turn = "turn running" + (f" {format_duration(max(self.taken - since, 0))}" if since else "")
        else:
            turn = "idle"
        note = f"; stream-json: {turn}, {stream.get('queue', 0)} queued"
        last = stream.get("last_result") or {}
        if last.get("is_error"):
            note += f", last turn failed ({last.get('subtype') or 'error'})"
        if last.get("denials"):
            note += f", last turn denied {', '.join(printable(str(d)) for d in last['denials'])}"
        if stream.get("cli_exit"):
            note += f", CLI exited (status {stream['cli_exit'].get('status')})"
        return note


@dataclass(frozen=True)
class CanaryLast:
    result: str
    age: float
    latency: float | None
    why: str

    def as_json(self) -> dict[str, Any]:
        return {"result": self.result, "age": self.age, "latency": self.latency, "why": self.why}

    def describe(self) -> str:
        line = f"{self.result} {format_duration(max(self.age, 0))} ago"
        return printable(line + (f" (acked in {self.latency:.2f}s)" if self.latency is not None else ""))


@dataclass(frozen=True)
class TurnLook:
    """The agent's turn as its hooks tell it, or its stream-json pump where no hooks are configured
    (hooks.turns, hooks.turn_rules): its state now, how long it has run, how long since its last
    event, the tool it last used, an open permission prompt's words; and the hooks' own last
    event. None in a Status whose agent has neither."""

    state: str                       # turn_rules: idle, busy, quiet, too long, waiting for permission
    age: float | None = None         # since the open turn began
    quiet: float | None = None       # since the open turn's last event
    tool: str = ""
    waiting: str = ""
    last_event: str = ""             # the hooks' latest event of any kind, and its age
    last_event_age: float | None = None
    source: str = turn_source.HOOKS  # hooks, or pump: which of them tells the turns (one per agent)

    def as_json(self) -> dict[str, Any]:
        return {"state": self.state, "age": self.age, "quiet": self.quiet, "tool": self.tool or None,
                "waiting": self.waiting or None, "source": self.source}

    def hooks_json(self) -> dict[str, Any]:
        return {"last_event": self.last_event or None, "age": self.last_event_age}

    def describe(self) -> str:
        """`busy 4m, last tool Bash`; `waiting for permission: Claude needs …`; `idle`."""
        if self.state == turn_rules.NO_TURN:
            line = "idle"
        elif self.state == turn_rules.TURN_WAITING:
            line = f"waiting for permission: {self.waiting}"
        else:
            line = f"{self.state} {format_duration(max(self.age or 0, 0))}"
            if self.state == turn_rules.TURN_QUIET:
                line += f" (nothing for {format_duration(max(self.quiet or 0, 0))}: its misses count)"
            elif self.state == turn_rules.TURN_LONG:
                line += " (past canary.max_turn: its misses count)"
            if self.tool:
                line += f", last tool {self.tool}"
        if self.source == turn_source.PUMP:
            line += "; told by the pump (no hooks)"
        elif self.last_event:
            line += f"; last hook {self.last_event} {format_duration(max(self.last_event_age or 0, 0))} ago"
        else:
            line += "; no hook event yet"
        return printable(line)


def turn_look(ctx: Context, at: Instant) -> TurnLook | None:
    """The turn now (None: the agent's commands pass no hooks settings and it has no pump, so no
    turn is known)."""
    told_by = turn_source.of(ctx)
    if told_by is None:
        return None
    from loomtui.hooks import turns  # here: an agent with neither source never loads the readers

    pumped = told_by == turn_source.PUMP
    cfg = ctx.config.canary
    now_turn = turn_rules.current(turns.read(ctx))
    state = turn_rules.state(now_turn, at, cfg.turn_quiet, cfg.max_turn)
    if pumped:
        if now_turn is None:
            return TurnLook(state, source=turn_source.PUMP)
        return TurnLook(state, age(now_turn.began, at), age(now_turn.last, at), printable(now_turn.tool),
                        source=turn_source.PUMP)
    newest = hook_events.recent(ctx.store, ctx.agent, 1)
    last_event, last_age = "", None
    if newest:
        last_event = printable(str(newest[0]["event"]))
        last_age = age(stored(newest[0]["ts"], newest[0]["mono"], newest[0]["boot"]), at)
    if now_turn is None:
        return TurnLook(state, last_event=last_event, last_event_age=last_age)
    return TurnLook(state, age(now_turn.began, at), age(now_turn.last, at), printable(now_turn.tool),
                    printable(now_turn.waiting) if state == turn_rules.TURN_WAITING else "", last_event, last_age)


# `loom status`'s words for each state (its per-agent line and the JSON's "state"): the words it
# has always printed, booting added by the one lifecycle.
STATE_WORDS: dict[str, str] = {
    lifecycle.NOT_LOOKED: "not looked at", lifecycle.UNKNOWN: "tmux unknown", lifecycle.GONE: "tmux gone",
    lifecycle.EXITED: "exited", lifecycle.HELD_CEILING: "held", lifecycle.HELD_OPERATOR: "held",
    lifecycle.NO_PROCESS: "no agent process", lifecycle.PROCESS_UNKNOWN: "no agent process",
    lifecycle.BOOTING: "booting", lifecycle.UNWITNESSED: "unwitnessed", lifecycle.RUNNING: "running",
}


@dataclass(frozen=True)
class ReplicaLook:
    """The memory replica as its last sync left it (its git directory's `loom-replica.json`; no git is run)."""

    remote: str
    dir: str
    lag: Any  # replica_rules.Lag, or None before the first sync
    at: float

    def describe(self, *, short: bool = False) -> str:
        from loomtui.memory import replica_rules

        return replica_rules.lag_words(self.lag, self.at, short=short)

    def as_json(self) -> dict[str, Any]:
        lag = self.lag
        return {"remote": self.remote, "dir": self.dir, "synced": lag is not None,
                "last_push": lag.last_push if lag else None, "last_pull": lag.last_pull if lag else None,
                "unpushed": lag.ahead if lag else None, "error": lag.error if lag else "",
                # Whose the error is, as `describe` words it: "remote" (unreachable, the backoff
                # grows) or "local" (git refused here: waiting for the remote mends nothing); "" with none.
                "error_kind": lag.error_kind if lag and lag.error else "",
                "error_since": lag.error_since if lag else None, "conflicts": lag.conflicts if lag else 0,
                "describe": self.describe()}


def replica_look(ctx: Context, now: float) -> ReplicaLook | None:
    """None where the agent's memory has no remote."""
    memory = ctx.config.memory
    if not memory.remote:
        return None
    from loomtui.memory import replica

    state = replica.state_of(ctx.state_dir, memory.dir)
    return ReplicaLook(memory.remote, str(memory.dir), state.lag() if state is not None else None, now)


@dataclass(frozen=True)
class Heartbeat:
    age: float
    pid: int | None
    loops: frozenset[str] | None = None  # the loops its writer runs (None: it does not say, an older Loom)
    # The loops whose tick was under way at the beat, and how long it had run then (seconds).
    busy: dict[str, float] = field(default_factory=dict)

    def ran(self, loop: str, stale_after: float) -> float | None:
        """How long `loop`'s tick under way has run by now: as long as it had at the beat, and the
        beat's age since (it may have ended meanwhile: the next beat says so). None: no tick under
        way, or a beat older than `stale_after` (a daemon gone, or one whose beats a locked store
        refuses): what it said of its ticks then is no word on them now."""
        busy = self.busy.get(loop)
        if busy is None or not 0.0 <= self.age <= stale_after:
            return None
        return busy + self.age


@dataclass(frozen=True)
class Status:
    taken: float
    state_dir: str
    config: str | None
    pinned_session: str | None
    ledger_events: int
    heartbeats: dict[str, Heartbeat]
    last_events: list[Event]
    outbox: dict[str, Any]
    conflict: dict[str, Any] | None
    agent: AgentLook | None            # None when the caller looks at the pane itself (the console)
    canary: CanaryLast | None          # the last probe, pending or settled
    canary_settled: CanaryLast | None  # the last probe with a result
    queue: dict[str, int]
    hold: Hold | None                  # the hold in force at `at`
    last_launch: LaunchRecord | None
    since_launch: float | None
    relaunch: RelaunchClaim | None = None   # the last relaunch and its witness
    name: str = "main"                      # the agent's name
    relaunches_last_hour: int = 0
    at: Instant | None = None               # `taken` on both clocks: what hold times are measured at
    boot_grace: float = 0.0                 # the agent's boot grace (agent.boot_grace): for the lifecycle
    turn: TurnLook | None = None            # the turn as the hooks tell it (None: no hooks configured)
    pushes: dict[str, dict[str, Any]] = field(default_factory=dict)  # each push heartbeat's last beat (the host's)
    replica: ReplicaLook | None = None      # the memory replica's lag (None: no memory.remote)
    supervisor_stale_after: float = check_rules.supervisor_stale_after(5.0)  # a beat older: nobody supervises

    @property
    def moment(self) -> Instant | float:
        """When this status was taken, on both clocks where known: for the hold rules."""
        return self.at if self.at is not None else self.taken

    def agent_state(self, *, with_hold: bool = True) -> lifecycle.AgentState:
        """The agent's state by the one lifecycle rule, from this status's facts. `with_hold=False`
        asks for the state beneath a hold (the console's agents view shows the hold in a column
        of its own)."""
        look = self.agent
        return lifecycle.agent_state(
            tmux=None if look is None else look.tmux, pane_dead=bool((look.pane or {}).get("dead")) if look else False,
            process=(look.tree or {}).get("process") if look else None, launched=self.last_launch,
            hold=self.hold if with_hold else None, unwitnessed=self.unwitnessed, boot_grace=self.boot_grace,
            now=self.moment)

    @property
    def state(self) -> str:
        """The agent in a word or two, for a line per agent: what the look saw, then a hold, then
        its process, its boot, a relaunch nobody has witnessed yet (lifecycle.agent_state)."""
        return STATE_WORDS[self.agent_state()]

    @property
    def unwitnessed(self) -> bool:
        """The last relaunch launched but no canary has acked since: recovery is only claimed."""
        return self.relaunch is not None and not self.relaunch.failed and not self.relaunch.witnessed

    @property
    def supervisor(self) -> Heartbeat | None:
        return self.heartbeats.get("supervisor")

    @property
    def unresolved(self) -> int:
        """Queue items still waiting for someone: open or claimed."""
        return self.queue.get("open", 0) + self.queue.get("claimed", 0)

    @property
    def probing(self) -> bool:
        return self.canary is not None and self.canary.result == canary.PENDING

    def as_json(self) -> dict[str, Any]:
        sup = self.supervisor
        return {
            "state_dir": self.state_dir,
            "config": self.config,
            "pinned_session": self.pinned_session,
            "ledger": {"events": self.ledger_events},
            # stale_after: this host's own rule for a beat too old (`loom check`'s), so that another
            # host's `loom hosts` and console say a dead supervisor as this host would.
            "supervisor": {"heartbeat_age": sup.age if sup else None, "pid": sup.pid if sup else None,
                           "stale_after": self.supervisor_stale_after},
            "heartbeats": {name: {"age": b.age, "pid": b.pid} for name, b in self.heartbeats.items()},
            "last_events": [e.as_dict() for e in self.last_events],
            "telegram": {"outbox": self.outbox, "conflict": self.conflict},
            **({"heartbeat_push": self.pushes} if self.pushes else {}),
            "agent": self._agent_json(),
            "canary": self.canary.as_json() if self.canary else None,
            "queue": self.queue,
            "hold": self.hold.record() if self.hold is not None else None,
            "last_launch": self.last_launch.as_dict() if self.last_launch is not None else None,
            "relaunch": self.relaunch.as_json() if self.relaunch else None,
            "replica": self.replica.as_json() if self.replica else None,
        }

    def _agent_json(self) -> dict[str, Any] | None:
        if self.agent is None:
            return None
        out = self.agent.as_json()
        if self.turn is not None:
            out["turn"] = self.turn.as_json()
            if self.turn.source != turn_source.PUMP:
                out["hooks"] = self.turn.hooks_json()
        return out

    def as_agent_json(self) -> dict[str, Any]:
        """`as_json` with whose it is, where several agents are shown: a single-agent setup's
        `loom status --json` keeps exactly the keys it always had."""
        return {"name": self.name, "state": self.state, "relaunches_last_hour": self.relaunches_last_hour,
                **self.as_json()}


def gather(ctx: Context, *, events: int = 5, now: float | None = None, look: bool = True) -> Status:
    """The status of `ctx`'s agent (with what is the host's: heartbeats, outbox, ledger size).
    `now` is the wall time shown; a hold is judged on both clocks at that moment (clock.at_wall),
    so the hold shown is the hold the loops enforce, whatever step the wall clock took."""
    at = clock.now() if now is None else clock.at_wall(now)
    now = at.wall
    store = ctx.store
    beats = heartbeats.read(store)
    launched = launches.last_launch(ctx)
    settled = canary_runs.last_settled(store, ctx.agent, canary.PENDING)
    claim = relaunch_claim(ctx)
    look_now = agent(ctx, now) if look else None
    if look_now is not None and claim is not None and not claim.failed and not claim.witnessed:
        look_now = replace(look_now, claim=claim.describe(now))
    return Status(
        taken=now,
        state_dir=str(ctx.state_dir),
        config=str(ctx.config_path) if ctx.config_path else None,
        pinned_session=session.pinned(store),
        ledger_events=ledger.count(store),
        heartbeats={name: Heartbeat(heartbeats.age(b, at), b["pid"], _loops(b), _busy(b)) for name, b in beats.items()},
        last_events=ledger.tail(store, events, agent=ctx.agent) if events else [],
        outbox=outbox.summary(store, now),
        conflict=telegram_state.conflict(store),
        agent=look_now,
        canary=_last(canary.last_probe(ctx), now),
        canary_settled=_last(canary.probe_from(settled), now) if settled else None,
        queue=queue_counts(ctx),
        hold=holds.current(ctx, at),
        last_launch=launched,
        since_launch=launches.launch_age(launched),
        relaunch=claim,
        name=ctx.agent,
        relaunches_last_hour=relaunches_since(ctx, now - 3600),
        at=at,
        boot_grace=ctx.config.agent.boot_grace,
        turn=turn_look(ctx, at),
        pushes=pushes(ctx, now),
        replica=replica_look(ctx, now),
        supervisor_stale_after=check_rules.supervisor_stale_after(ctx.config.watchdog.interval),
    )


def _loops(beat: dict[str, Any]) -> frozenset[str] | None:
    """The loop names a beat's writer says it runs (the daemon's `loops`), or None."""
    detail = beat.get("detail")
    loops = detail.get("loops") if isinstance(detail, dict) else None
    return frozenset(loops) if isinstance(loops, dict) and loops else None


def _busy(beat: dict[str, Any]) -> dict[str, float]:
    """The loops a beat's writer says had a tick under way, each with how long it had run."""
    detail = beat.get("detail")
    loops = detail.get("loops") if isinstance(detail, dict) else None
    if not isinstance(loops, dict):
        return {}
    out = {}
    for name, stats in loops.items():
        busy = stats.get("busy_for") if isinstance(stats, dict) else None
        if isinstance(busy, (int, float)) and not isinstance(busy, bool) and 0 <= busy < float("inf"):
            out[str(name)] = float(busy)
    return out


def pushes(ctx: Context, now: float) -> dict[str, dict[str, Any]]:
    """Each push heartbeat's last beat, by name, with where it goes as it may be shown (never the URL)
    and its age at `now` (what another host reads: its own clock may differ from this one's). A beat
    recorded after `now` was taken (the daemon beat while this status was read) is just now, never
    a negative age, as every age here (timing.age)."""
    out = {}
    for b in ctx.config.heartbeat:
        beat = heartbeat_pushes.last(ctx.store, b.name)
        at = beat.get("at")
        age = {"age": max(0.0, now - at)} if isinstance(at, (int, float)) and not isinstance(at, bool) else {}
        out[b.name] = {"url": heartbeat_rules.shown(b.url), **beat, **age}
    return out


def gather_all(ctx: Context, *, events: int = 5, now: float | None = None, look: bool = True) -> list[Status]:
    """Every agent's status, in the config's order; the looks run at once, each bounded by tmux's
    own timeout, so a hung server delays the answer by one timeout, never by one per agent."""
    now = time.time() if now is None else now
    names = ctx.config.agent_names
    if len(names) == 1:
        return [gather(ctx if ctx.agent == names[0] else ctx.for_agent(names[0]), events=events, now=now, look=look)]

    def one(name: str) -> Status:
        own = ctx.for_agent(name)  # a store connection of its own: the threads never share one
        try:
            return gather(own, events=events, now=now, look=look)
        finally:
            own.close()

    from concurrent.futures import ThreadPoolExecutor  # several agents only (it brings logging in)

    with ThreadPoolExecutor(max_workers=min(len(names), 8), thread_name_prefix="loom-status") as pool:
        return list(pool.map(one, names))


def queue_counts(ctx: Context) -> dict[str, int]:
    """The agent's queue items by state (the items whose nudges go to it)."""
    return queue_items.counts(ctx.store, ctx.agent)


def relaunches_since(ctx: Context, since: float) -> int:
    return ledger.relaunches_since(ctx.store, ctx.agent, since)


def relaunch_claim(ctx: Context) -> RelaunchClaim | None:
    """The last relaunch as the ledger tells it: witnessed by a canary ack, failed, or a claim."""
    row = ledger.last_relaunch(ctx.store, ctx.agent)
    if row is None:
        return None
    try:
        detail = json.loads(row["detail"])
    except ValueError:
        detail = {}
    detail = detail if isinstance(detail, dict) else {}
    failed = ledger.relaunch_failed_after(ctx.store, ctx.agent, row["id"])
    ack = canary.witness_of(ctx, row["id"])
    at = stored(row["ts"], detail.get("mono"), detail.get("boot"))
    return RelaunchClaim(row["id"], row["ts"], row["cause"] or "", str(detail.get("mode") or ""), row["source"] or "",
                         ack["event"] if ack else None, ack["ts"] if ack else None, failed, at.mono, at.boot)


def agent(ctx: Context, now: float | None = None) -> AgentLook:
    driver = drivers.of(ctx)
    facts = driver.observe()
    pane = tree = None
    if facts.pane is not None:
        pane = {"pane_pid": facts.pane.pane_pid, "dead": facts.pane.dead, "exit_status": facts.pane.dead_status}
    if facts.tree is not None:
        tree = {"process": facts.tree.agent, "pid": facts.tree.agent_pid, "poller": facts.tree.poller}
    return AgentLook(facts.tmux, facts.why, pane, tree, driver=driver.name, owns_turns=driver.owns_turns,
                     stream=stream_json(facts.stream),
                     taken=time.time() if now is None else now)


def stream_json(facts: StreamFacts | None) -> dict[str, Any] | None:
    """The pump's facts as `loom status --json` prints them (None: no pump of this pane has written)."""
    if facts is None:
        return None
    last = facts.last_result
    return {
        "current": facts.current, "pump_pid": facts.pump_pid, "cli_pid": facts.cli_pid,
        "session_id": facts.session_id, "turn": facts.turn, "turn_started": facts.turn_started,
        "turn_seq": facts.turn_seq, "queue": facts.queue, "turns": facts.turns,
        "last_result": None if last is None else {"ts": last.ts, "is_error": last.is_error, "subtype": last.subtype,
                                                  "seq": last.seq, "denials": list(last.denials)},
        "cli_exit": facts.cli_exit,
    }


def _last(probe: canary.Probe | None, now: float) -> CanaryLast | None:
    if probe is None:
        return None
    return CanaryLast(probe.result, now - probe.sent_at, probe.latency, probe.why)
