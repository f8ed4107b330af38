"""The modelled world Loom's code looks at and acts on (through machine.py's ports): the agent,
its pane and tmux server, the scheduled jobs, on a virtual clock. It holds the truth (is the agent
really deaf? is the poller really gone?) that the invariants judge Loom's decisions against; Loom
sees only what a look at it would show.

Nothing here decides anything Loom decides: that is Loom's own code, run by engine.py.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

EPOCH = 1_700_000_000.0  # wall time of virtual second 0 (a fixed instant: reports never depend on today)
STOP_TIME = 1.0          # killing the old agent's tree
BOOT = "sim-boot"        # the one boot a run lives in: its monotonic clock is comparable throughout
RESUME_FAILED_SCREEN = "No conversation found with session ID"
MODAL_SCREEN = "Do you trust the files in this folder?\n> 1. Yes, I trust this folder\n  2. No, exit"
PROMPT_SCREEN = "> "


@dataclass
class Agent:
    pid: int
    session: str
    mode: str
    started: float
    ready_at: float                  # reads its input from here on (boot); typed text waits till then
    alive: bool = True
    exit_status: int | None = None
    exit_signal: int | None = None
    died_at: float | None = None
    screen_tail: str = ""            # the pane's history once it is dead
    deaf_since: float | None = None  # wedged: probes are typed and never acted on
    busy_until: float = 0.0          # acks late, then catches up
    busy_next: bool = False          # the next probe finds it busy: acked after one ack timeout, before two
    modal: bool = False              # a dialog on screen eats what is typed
    poller: bool = True              # its Telegram poller child
    ignores_queue: bool = False      # acks canaries but never works its queue (incident 8)
    handled_nudges: int = 0
    # With hooks modelled (hooks_model.py): a turn the operator gave it runs since `turn_since`
    # (until `turn_until`, once known); what Loom could see of it: the last hook event written,
    # and whether the last turn boundary it got began a turn.
    turn_since: float | None = None
    turn_until: float | None = None
    seen_last: float = -1e18
    seen_open: bool = False
    seen_began: float = -1e18        # when the turn Loom saw open was reported begun (its prompt written)
    # The truth beside it: when its running turn last did something (its prompt, a tool's use),
    # whether or not its hook was lost or late. A turn quiet this long was quiet; one only Loom saw
    # quiet had lost its events.
    last_event: float = -1e18
    eaten_at: float = -1e18          # the last time a dialog on its screen ate a typed line
    probes_eaten: list[float] = field(default_factory=list)  # when a dialog ate each of the last probes
    # Its turn waits on a permission prompt since then, until the operator answers (`answer_at`);
    # what Loom could see: the prompt's notification written, no turn mark since (None: none open).
    waiting_since: float | None = None
    answer_at: float = -1e18
    seen_waiting: float | None = None
    # Its turn's chain of tool calls: a call scheduled before a prompt or an answer began another
    # chain is stale (hooks_model.tool), or a turn would run two chains at once.
    chain: int = 0

    def hearing(self) -> bool:
        return self.alive and self.deaf_since is None


@dataclass
class Job:
    name: str
    period: float
    phase: float
    broken_since: float | None = None  # runs fail until someone fixes it
    hangs: bool = False                # ... broken so that each run hangs (a dead mount) before it fails
    next_run: float = 0.0

    @property
    def schedule(self) -> str:
        return f"every {int(self.period)}s"


@dataclass
class World:
    rng: random.Random
    poller_configured: bool
    t: float = 0.0
    agent: Agent | None = None          # the agent in Loom's pane
    stray: list[Agent] = field(default_factory=list)  # agents no longer in Loom's pane but still running
    tmux_session: bool = False
    socket_lost: bool = False            # the server runs, its socket was deleted
    tmux_hang_until: float = -1.0
    store_locked_until: float = -1.0
    load_until: float = -1.0
    foreign_poller_since: float | None = None
    conversations: set[str] = field(default_factory=set)   # sessions a resume can find (membership only)
    sticky_wedges: set[str] = field(default_factory=set)   # sessions whose wedge comes back on resume
    crash_loop_until: float = -1.0
    slow_boot_next: bool = False
    ignore_queue_next: bool = False
    pinned_truth: str | None = None      # the session Loom minted last: what a resume may continue
    jobs: list[Job] = field(default_factory=list)
    impaired: list[tuple[float, float]] = field(default_factory=list)  # windows Loom could not see or write
    # [start, end or None, pid, reported]: the operator's turns (hooks or pump); `reported`: when Loom
    # was first told one began (its prompt hook, or the pump's init), None while never.
    turns: list[list] = field(default_factory=list)
    last_disturbance: float = -1e18      # last fault that makes probes late or lost (busy, modal, boot, load)
    heard_since_disturbance: bool = True  # a probe acked in time since then (the engine says, from the store)
    ack_timeout: float = 180.0
    # An ordinary ack's latency is at most this (doubled under load), whatever `ack_timeout` is: a
    # CLI answering a one-line probe takes seconds to tens of them, and a timeout shorter than that
    # misses acks that come (a config's fault the run should find, not one it should hide).
    latency_cap: float = 20.0
    poller_lost_at: float | None = None
    # The account's rate limit, or its bill or login (hooks modelled): every turn the CLI takes
    # fails with StopFailure `limit_error` until then (`rate_limit`, `billing_error`,
    # `authentication_failed`), a rate limit's payload giving the reset time or not (`limit_resets`).
    limited_until: float = -1.0
    limit_resets: bool = False
    limit_error: str = "rate_limit"
    limit_unreported: float = -1e18      # the last time a StopFailure of it was lost, or written late
    limit_told: float = 1e18             # when the first StopFailure of the current limit was written
    # When the CLI last wrote a Stop (a turn succeeded): under a limit, one of a turn taken before it
    # began (its model call answered), or written late. Either ends the harness's hold, by design.
    last_stop: float = -1e18
    # The StopFailures written lately, (wall, t) each: the hold Loom places for one begins when it
    # was written (its file's time), which the checker finds by the hold's ledger time.
    failures_written: list[tuple[float, float]] = field(default_factory=list)
    pids: int = 1000                     # the agents' pids (above init and the kernel's own)
    sessions: int = 0
    wall_offset: float = 0.0             # how far the wall clock has been stepped (clock_forward/clock_back)
    # Told of every death of an agent (the stream-json pump records its CLI's exit: pump_model.py).
    on_kill: Callable[[Agent], None] | None = field(default=None, repr=False)

    # -- clocks -----------------------------------------------------------------------------
    # Two clocks, as on a machine: `t` is the monotonic one (one boot, never stepped: the truth the
    # invariants judge by); `wall` is the wall clock, which a clock fault steps and nothing else.

    @property
    def wall(self) -> float:
        return EPOCH + self.t + self.wall_offset

    @property
    def mono(self) -> float:
        return self.t

    def job(self, name: str) -> Job | None:
        return next((j for j in self.jobs if j.name == name), None)

    def tmux_hangs(self) -> bool:
        return self.t < self.tmux_hang_until

    def store_locked(self) -> bool:
        return self.t < self.store_locked_until

    def loaded(self) -> bool:
        return self.t < self.load_until

    def limited(self) -> bool:
        return self.t < self.limited_until

    def turn_began(self, pid: int) -> None:
        """A turn of the operator's begins now in agent `pid` (the last hundred or so are kept)."""
        self.turns.append([self.t, None, pid, None])
        if len(self.turns) > 200:
            del self.turns[:100]

    def turn_ended(self, pid: int) -> None:
        for turn in self.turns:
            if turn[2] == pid and turn[1] is None:
                turn[1] = self.t

    def turn_reported(self, pid: int) -> None:
        """Loom is told now that agent `pid`'s open turn began (a prompt hook, late or not, or the pump)."""
        for turn in self.turns:
            if turn[2] == pid and turn[1] is None and turn[3] is None:
                turn[3] = self.t

    def busy_between(self, start: float, end: float) -> float:
        """Seconds of [start, end] the agent spent in a turn of the operator's (hooks modelled): a
        relaunch's witness waits for it, as it should."""
        total = 0.0
        for a, b, pid, _ in self.turns:
            if b is None:
                agent = self.agent
                b = self.t if agent is not None and agent.pid == pid and agent.alive else (
                    agent.died_at if agent is not None and agent.pid == pid and agent.died_at is not None else a)
            total += max(0.0, min(end, b) - max(start, a))
        return total

    def impaired_between(self, start: float, end: float) -> float:
        """Seconds of [start, end] during which Loom could not see or write: its bounds stretch by this."""
        return sum(max(0.0, min(end, b) - max(start, a)) for a, b in self.impaired)

    def impair(self, until: float) -> None:
        self.impaired.append((self.t, until))
        if len(self.impaired) > 200:
            del self.impaired[:100]

    # -- the agent --------------------------------------------------------------------------

    def mint_session(self) -> str:
        self.sessions += 1
        return f"sess-{self.sessions:05d}-{self.rng.getrandbits(32):08x}"

    def running_agents(self) -> int:
        if not self.stray:
            return 1 if self.agent is not None and self.agent.alive else 0
        return sum(1 for a in [self.agent, *self.stray] if a is not None and a.alive)

    def kill(self, agent: Agent, *, status: int | None, signal: int | None, screen: str = "") -> None:
        if not agent.alive:
            return
        agent.alive, agent.exit_status, agent.exit_signal, agent.died_at = False, status, signal, self.t
        agent.screen_tail = screen or f"[agent exited status={status} signal={signal}]"
        if self.on_kill is not None:
            self.on_kill(agent)

    def stop_current(self) -> None:
        """A relaunch ends the agent's tree, found from the pane or, when tmux lost it, from the
        pane process recorded at launch (driver.stop)."""
        if self.agent is not None and self.agent.alive:
            self.kill(self.agent, status=None, signal=15)

    def launch(self, session: str, mode: str, boot_grace: float, ack_timeout: float) -> Agent:
        if self.socket_lost:
            # A relaunch starts a new server beside the unreachable one.
            self.socket_lost = False
        self.tmux_session = True
        self.pids += 1
        start = self.t  # the old tree was ended first (machine.SimDriver.stop took STOP_TIME)
        ready = start + min(boot_grace * 0.5, 20.0)
        if self.slow_boot_next:
            self.slow_boot_next = False
            self.last_disturbance = self.t
            ready = start + boot_grace + self.rng.uniform(0.0, 0.5 * ack_timeout)
        agent = Agent(self.pids, session, mode, start, ready, ignores_queue=self.ignore_queue_next)
        if mode == "resume" and session not in self.conversations:
            self.kill(agent, status=1, signal=None, screen=f"{RESUME_FAILED_SCREEN}: {session}")
            agent.died_at = start + 0.5
        else:
            self.conversations.add(session)
            if mode == "resume" and session in self.sticky_wedges:
                agent.deaf_since = start  # the wedge is in the conversation: resuming revives it
        self.agent = agent
        return agent

    def screen(self) -> str:
        a = self.agent
        if a is None:
            return ""
        if not a.alive:
            return a.screen_tail
        return MODAL_SCREEN if a.modal else PROMPT_SCREEN

    # -- typing into the pane ---------------------------------------------------------------

    def can_type(self) -> str:
        """Why typing would fail now ('' when it works)."""
        if not self.tmux_session or self.socket_lost:
            return "no tmux session"
        if self.tmux_hangs():
            return "tmux did not answer"
        if self.agent is None or not self.agent.alive:
            return "the pane is dead"
        if self.loaded() and self.rng.random() < 0.3:
            return "tmux timed out under load"
        return ""

    def latency(self) -> float:
        base = self.rng.uniform(min(1.0, self.latency_cap), self.latency_cap)
        return base * (2.0 if self.loaded() else 1.0)

    def busy_end(self, sent: float) -> float:
        """When a `busy` turn the probe sent at `sent` waits behind ends: after one ack timeout, and
        early enough that the probe, answered at the slowest (under load), is acked before two. An
        ack timeout shorter than that slowest answer leaves no such instant: the turn ends after
        one, and its probes may miss twice, as they would (a config too tight for the agent)."""
        T = self.ack_timeout
        lo, hi = 1.05 * T, min(1.65 * T, 2.0 * T - 2.0 * self.latency_cap - 2.0)
        return sent + self.rng.uniform(lo, max(lo, hi))

    def ack_time(self, sent: float) -> float | None:
        """When the agent in the pane would act on a probe typed now; None if never."""
        a = self.agent
        if a is None or not a.alive or a.deaf_since is not None or a.modal:
            return None  # a dialog eats the text; a deaf agent never acts on it
        if a.busy_next:
            a.busy_next = False
            self.last_disturbance = sent
            a.busy_until = self.busy_end(sent)
        return max(sent, a.ready_at, a.busy_until) + self.latency()
