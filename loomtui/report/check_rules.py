"""`loom check`'s verdict, pure: the facts of each agent and of the host → one line and the exit
code monitoring plugins use (Nagios, Icinga, Monit, cron and healthchecks wrappers).

0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN; the worst finding decides, CRITICAL over WARNING over
UNKNOWN (a tmux that did not answer says nothing about an agent that is also held). CRITICAL: an
agent down, the ceiling's hold (automatic recovery has stopped), no fresh supervisor heartbeat,
an agent's watchdog or canary tick stuck (nobody is watching), or a host-wide loop's step stuck (the
sentinel's tick, a Telegram service's step: no job watched, no message sent or command read). WARNING: an operator's hold, a relaunch unwitnessed past the time its canary
should have taken, queue items past their backstop, messages the operator has not been sent.
UNKNOWN: the agent could not be looked at. `loom status` stays descriptive; this is for alerting.
"""

from __future__ import annotations

from dataclasses import dataclass

OK, WARNING, CRITICAL, UNKNOWN = 0, 1, 2, 3
WORDS = {OK: "OK", WARNING: "WARNING", CRITICAL: "CRITICAL", UNKNOWN: "UNKNOWN"}
_RANK = {OK: 0, UNKNOWN: 1, WARNING: 2, CRITICAL: 3}

# The agent's states (lifecycle.STATES) as monitoring reads them.
_DOWN = {"gone": "its tmux server or session is gone", "exited": "its process exited",
         "no_process": "no agent process in its pane"}
_NOT_SEEN = {"unknown": "tmux did not answer", "process_unknown": "its process tree could not be read",
             "not_looked": "not looked at"}
# Messages waiting longer than this for Telegram are unsent, not on their way.
UNSENT_AFTER = 600.0
# What a step may take past its longest wait while all is well: a stuck one is news within about a
# quarter of an hour, a slow one never.
STUCK_MARGIN = 600.0


@dataclass(frozen=True)
class AgentFacts:
    name: str
    state: str                          # lifecycle.agent_state's word
    hold_reason: str = ""               # the hold in force, said
    unwitnessed_for: float | None = None  # seconds since a relaunch no canary has acked yet
    witness_within: float = 0.0         # how long a witness may take (boot grace and the canary's misses)
    past_backstop: int = 0              # queue items escalated to the operator, not yet witnessed
    supervised: bool | None = None      # the running daemon has its watchdog (None: it does not say)
    stuck: tuple[tuple[str, float], ...] = ()  # its loops whose tick under way has run too long, and how long


@dataclass(frozen=True)
class HostFacts:
    heartbeat_age: float | None         # the supervisor's last heartbeat (None: never)
    stale_after: float                  # a heartbeat older than this is not fresh
    telegram_on: bool
    pending: int = 0                    # outbox messages not yet sent
    oldest_pending_age: float | None = None
    failed: int = 0                     # outbox messages Telegram refused
    stuck: tuple[tuple[str, float], ...] = ()  # host-wide loops whose step under way has run too long, and how long


def supervisor_stale_after(watchdog_interval: float) -> float:
    """How old a supervisor heartbeat may be and still count as fresh (it beats every few seconds)."""
    return max(3 * min(watchdog_interval, 5.0), 15.0)


def witness_within(boot_grace: float, ack_timeout: float, misses_to_recycle: int, watchdog_interval: float) -> float:
    """The longest a relaunch stays unwitnessed while all is well: the agent boots, the canary
    probes it and waits out its misses (after which it would recycle), plus a watchdog tick."""
    return boot_grace + misses_to_recycle * ack_timeout + watchdog_interval


def tick_stuck_after(boot_grace: float, ack_timeout: float, resume_check: float, stop_grace: float) -> float:
    """How long one watchdog or canary tick may run while all is well: a probe waits out its ack
    (a booting stream-json pump's boot grace first), then a relaunch stops the agent, watches a
    resume boot and falls back to fresh once, each store write perhaps waiting out a locked store's
    busy time. Ten minutes more (STUCK_MARGIN): it also covers a stop's SIGKILL wait and a stopped
    pump's own (the stream-json driver's LAST_GRACE)."""
    return boot_grace + ack_timeout + 2 * (stop_grace + resume_check) + STUCK_MARGIN


def step_stuck_after(longest_wait: float) -> float:
    """How long one step of a host-wide loop may run while all is well: the longest it waits (the
    sentinel's interval, a Telegram poll's long poll), ten minutes more (STUCK_MARGIN)."""
    return longest_wait + STUCK_MARGIN


def stuck(ran: dict[str, float | None], bound: float) -> tuple[tuple[str, float], ...]:
    """The loops (by their word: watchdog, canary, sentinel) whose tick under way has run longer than `bound`."""
    return tuple((loop, seconds) for loop, seconds in ran.items() if seconds is not None and seconds > bound)


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def findings(agents: list[AgentFacts], host: HostFacts) -> list[tuple[int, str]]:
    """Every finding, worst first (each with its code); none when all is well."""
    found: list[tuple[int, str]] = []
    several = len(agents) > 1
    for a in agents:
        who = f"agent {a.name}" if several else "agent"
        if a.state in _DOWN:
            found.append((CRITICAL, f"{who} down: {_DOWN[a.state]}"))
        elif a.state in _NOT_SEEN:
            found.append((UNKNOWN, f"{who}: {_NOT_SEEN[a.state]}"))
        elif a.state == "held_ceiling":
            found.append((CRITICAL, f"{who} held at the ceiling (automatic recovery stopped): {a.hold_reason}"))
        elif a.state == "held_operator":
            found.append((WARNING, f"{who} held: {a.hold_reason}"))
        if a.unwitnessed_for is not None and a.unwitnessed_for > a.witness_within:
            found.append((WARNING, f"{who} relaunched {_age(a.unwitnessed_for)} ago and no canary has acked since"))
        if a.past_backstop:
            items = "1 queue item" if a.past_backstop == 1 else f"{a.past_backstop} queue items"
            found.append((WARNING, f"{who}: {items} past the backstop"))
        for loop, seconds in a.stuck:
            # The heartbeat beats on from the daemon's own loop while this one's thread is stuck
            # (a read of /proc hung on a process in D state, say): nobody is watching the agent.
            found.append((CRITICAL, f"{who}'s {loop} tick has run {_age(seconds)}: stuck, nobody is watching "
                                    "it (restart loom supervise)"))
        if a.supervised is False and host.heartbeat_age is not None and host.heartbeat_age <= host.stale_after:
            # The config names it, the running daemon (which read its config at its start) does not.
            found.append((CRITICAL, f"{who} is not supervised: the running loom supervise has no watchdog for it "
                                    "(started before it was configured): restart loom supervise"))
    for loop, seconds in host.stuck:
        # As an agent's tick: the heartbeat beats on while this loop's thread is stuck (a job's log on
        # a hung NFS mount, a store that never answers), and nobody does its work.
        found.append((CRITICAL, f"the {loop} loop's step has run {_age(seconds)}: stuck (restart loom supervise)"))
    if host.heartbeat_age is None:
        found.append((CRITICAL, "no supervisor heartbeat: loom supervise is not running"))
    elif host.heartbeat_age > host.stale_after or host.heartbeat_age < -host.stale_after:  # dated far ahead: not a beat
        found.append((CRITICAL, f"supervisor heartbeat {_age(host.heartbeat_age)} old: loom supervise is not running"))
    messages = "1 message" if host.pending == 1 else f"{host.pending} messages"
    if host.pending and not host.telegram_on:
        found.append((WARNING, f"{messages} for the operator unsent: Telegram is off (telegram.chat_id = 0); "
                               "read them with loom outbox, then loom outbox --read"))
    elif host.pending and (host.oldest_pending_age or 0.0) > UNSENT_AFTER:
        found.append((WARNING, f"{messages} for the operator unsent for {_age(host.oldest_pending_age or 0.0)}"))
    if host.failed:
        found.append((WARNING, f"{host.failed} message{'' if host.failed == 1 else 's'} refused by Telegram "
                               "(loom outbox: --retry or --forget)"))
    return sorted(found, key=lambda f: -_RANK[f[0]])


def verdict(agents: list[AgentFacts], host: HostFacts) -> tuple[int, str]:
    """(exit code, the one line): `LOOM STATE - what | perfdata`."""
    found = findings(agents, host)
    code = found[0][0] if found else OK
    if found:
        text = "; ".join(line for _, line in found)
    else:
        text = ", ".join(f"{a.name} {a.state}" for a in agents) + (
            f"; supervisor heartbeat {_age(host.heartbeat_age or 0.0)} old")
    perf = (f"agents={len(agents)} down={sum(a.state in _DOWN for a in agents)} "
            f"held={sum(a.state.startswith('held') for a in agents)} "
            f"past_backstop={sum(a.past_backstop for a in agents)} pending={host.pending}"
            + (f" heartbeat_age={host.heartbeat_age:.0f}s" if host.heartbeat_age is not None else ""))
    return code, f"LOOM {WORDS[code]} - {text} | {perf}"
