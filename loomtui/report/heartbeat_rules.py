"""What a push heartbeat says, and where (sealed: facts in, a verdict out).

The convention is healthchecks.io's, which Uptime Kuma's push monitors and most of their peers
follow: a GET to the URL while all is well, the URL with `/fail` added to its path when it is not,
and nothing at all when the machine or its supervisor is gone (the receiver alerts on the silence
after its own grace). So a dead box is noticed off the box.

Down is what the lifecycle can tell for sure: tmux said the session is gone, the pane's process
exited, the pane has no agent process, a relaunch stayed unwitnessed past its bound, or the agent's
watchdog or canary tick has run far past any tick's time (stuck: nobody watches it); so is every
agent when a host-wide loop's step has (the sentinel's, a Telegram service's: nobody does its work). A hold is a
failure where the heartbeat says so (an operator's hold is usually on purpose), but it hides
nothing: an agent down beneath a hold is down. Held by the ceiling it had read as held, and the
receiver heard "ok" at the very moment Loom gave up on a dead agent. A look that
could not tell (tmux did not answer, the process tree could not be walked) says neither: that beat
is skipped, and if it lasts, the receiver's grace turns the silence into an alert.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from loomtui.agent.lifecycle import EXITED, GONE, HELD, NO_PROCESS, NOT_LOOKED, PROCESS_UNKNOWN, \
    UNKNOWN, UNWITNESSED, AgentState

OK = "ok"
FAIL = "fail"
SKIP = "skip"

DOWN: frozenset[str] = frozenset((GONE, EXITED, NO_PROCESS))
UNSURE: frozenset[str] = frozenset((NOT_LOOKED, UNKNOWN, PROCESS_UNKNOWN))


@dataclass(frozen=True)
class AgentHealth:
    name: str
    state: AgentState
    unwitnessed_for: float | None = None  # seconds since the relaunch no ack has witnessed yet
    stuck: str = ""                       # its loops whose tick has run too long, said ("" when none)
    beneath: AgentState | None = None     # held: the state the facts give beneath the hold


@dataclass(frozen=True)
class Verdict:
    says: str   # ok, fail or skip
    why: str = ""


def verdict(agents: list[AgentHealth], *, hold_fails: bool, unwitnessed_after: float, stuck: str = "") -> Verdict:
    """What the heartbeat says for these agents: fail if any is down or a host-wide loop is `stuck`
    (said), skip if any could not be told (and none is down), else ok. An empty list is ok: the
    supervisor itself is up."""
    down, unsure = [stuck] if stuck else [], []
    for a in agents:
        if a.stuck:
            down.append(f"{a.name} {a.stuck}")  # nobody is watching it, whatever its state reads
        state, held = a.state, ""
        if state in HELD:
            if hold_fails:
                down.append(f"{a.name} held")
                continue
            if a.beneath is None:
                continue
            state, held = a.beneath, " (held)"
        if state in DOWN:
            down.append(f"{a.name} {state}{held}")
        elif state == UNWITNESSED:
            if a.unwitnessed_for is not None and a.unwitnessed_for >= unwitnessed_after:
                down.append(f"{a.name} unwitnessed for {int(a.unwitnessed_for)}s{held}")
        elif state in UNSURE:
            unsure.append(f"{a.name} {state}{held}")
    if down:
        return Verdict(FAIL, "; ".join(down))
    if unsure:
        return Verdict(SKIP, "; ".join(unsure))
    return Verdict(OK)


def due_in(last_sent: float | None, interval: float, now: float) -> float:
    """Seconds until the next beat (0: now), on one monotonic clock. None: never sent (this daemon)."""
    if last_sent is None:
        return 0.0
    elapsed = now - last_sent
    if elapsed < 0 or math.isnan(elapsed):
        return 0.0  # a clock that went back (a new boot): beat now rather than wait a mystery
    return max(0.0, interval - elapsed)


def ping_url(url: str, says: str) -> str:
    """The URL to GET: `url` for ok, its path with `/fail` added for fail (the query kept)."""
    if says != FAIL:
        return url
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/fail"))


def shown(url: str) -> str:
    """A push URL as it may be shown or logged: its scheme and host only (the path is the secret)."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}/…"
