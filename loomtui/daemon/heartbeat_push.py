"""The push heartbeats (`[[heartbeat]]`): the daemon's GETs to healthchecks.io, Uptime Kuma and the like.

The loop's tick decides (report.heartbeat_rules) and hands the GET to that heartbeat's own sender
thread; it never waits for one. A receiver that hangs holds up only its own next beat (one GET at a
time per heartbeat, each bounded by its `timeout`), never a tick of this or any other loop. The
last beat of each is kept in the store (meta `heartbeat_push:NAME`), shown by `loom status`, and
counted (`loom_heartbeat_push_total{heartbeat,result}`). The URL is a secret: only its scheme and
host are ever shown or logged (heartbeat_rules.shown).
"""

from __future__ import annotations

import http.client
import logging
import queue
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from loomtui import clock
from loomtui.agent import lifecycle
from loomtui.config import Config, HeartbeatConfig, is_loopback
from loomtui.context import Context
from loomtui.daemon import oneshot
from loomtui.report import heartbeat_rules as rules
from loomtui.report import status as status_mod
from loomtui.store import counters, heartbeat_pushes
from loomtui.text import printable
from loomtui.timing import age, as_instant

log = logging.getLogger("loom.heartbeat")

COUNTER = "loom_heartbeat_push_total"
# How often the loop looks: the shortest interval's beat is at most this late.
PERIOD = 5.0


def period(ctx: Context) -> float:
    return min([PERIOD, *(b.interval for b in ctx.config.heartbeat)])


def health(statuses: list[status_mod.Status], config: Config | None = None) -> list[rules.AgentHealth]:
    out = []
    for s in statuses:
        claim = s.relaunch
        # On the monotonic clock within a boot: a wall clock stepped ahead had failed the beat at
        # once, one stepped back hid an unwitnessed relaunch.
        waited = age(claim.at, as_instant(s.moment)) if claim is not None and s.unwitnessed else None
        state = s.agent_state()
        beneath = s.agent_state(with_hold=False) if state in lifecycle.HELD else None
        out.append(rules.AgentHealth(s.name, state, waited, _stuck(s, config), beneath))
    return out


def _stuck(s: status_mod.Status, config: Config | None) -> str:
    """The agent's loops whose tick under way has run too long (`loom check`'s rule), said."""
    found = oneshot.stuck_ticks(s.supervisor, config, s.name) if config is not None else ()
    return "; ".join(f"{loop} tick stuck for {int(seconds)}s" for loop, seconds in found)


def host_stuck(statuses: list[status_mod.Status], config: Config) -> str:
    """The host-wide loops (the sentinel, the Telegram services) whose step under way has run too
    long (`loom check`'s rule), said: every agent's beat fails with it."""
    found = oneshot.stuck_host_loops(statuses[0].supervisor, config) if statuses else ()
    return "; ".join(f"{loop} step stuck for {int(seconds)}s" for loop, seconds in found)


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def open_url(request: urllib.request.Request, timeout: float) -> Any:
    """urlopen, but never through a proxy to a loopback address: plain http:// is allowed only there
    (config), and an http_proxy in the daemon's environment would have had the URL, its secret
    path in clear, from urllib (which does not exempt loopback on its own)."""
    host = urllib.parse.urlsplit(request.full_url).hostname or ""
    if is_loopback(host):
        return _DIRECT.open(request, timeout=timeout)
    return urllib.request.urlopen(request, timeout=timeout)


class Sender:
    """One heartbeat's GETs, one at a time, in a thread of their own."""

    def __init__(self, ctx: Context, beat: HeartbeatConfig, halt: threading.Event,
                 opener: Callable[..., Any] = open_url) -> None:
        self.ctx, self.beat, self.halt, self.opener = ctx, beat, halt, opener
        self.slot: queue.Queue[tuple[str, str]] = queue.Queue(maxsize=1)
        self.last_offer: float | None = None  # monotonic: when the tick last handed it a beat
        self.thread = threading.Thread(target=self._run, name=f"loom-heartbeat-{beat.name}", daemon=True)
        self.thread.start()

    def offer(self, says: str, why: str) -> bool:
        """Hand a beat to the thread; False while it still sends the last one (this beat is dropped:
        the receiver hears the next)."""
        try:
            self.slot.put_nowait((says, why))
        except queue.Full:
            return False
        return True

    def _run(self) -> None:
        while not self.halt.is_set():
            try:
                says, why = self.slot.get(timeout=1.0)
            except queue.Empty:
                continue
            self._send(says, why)

    def _send(self, says: str, why: str) -> None:
        beat = self.beat
        error = ""
        try:
            request = urllib.request.Request(rules.ping_url(beat.url, says), method="GET",
                                             headers={"User-Agent": "loom-heartbeat"})
            with self.opener(request, timeout=beat.timeout) as response:
                response.read(1024)
        except urllib.error.HTTPError as exc:
            error = f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            error = f"{type(exc).__name__}: {reason}"
        except http.client.HTTPException as exc:
            # A reply that is no HTTP (urllib does not wrap these): named only, its text may quote
            # the URL's path, the secret in it. Uncaught it ended the thread, and every beat after.
            error = type(exc).__name__
        # Neither the URL nor any part of it: a reason that quotes it is cut to what is safe to show.
        error = printable(error.replace(beat.url, rules.shown(beat.url)))[:200]
        self.record(says, why, error)
        if error:
            log.warning("heartbeat %s to %s: %s", beat.name, rules.shown(beat.url), error)

    def record(self, says: str, why: str, error: str = "") -> None:
        """The beat in the store: what it said, why, whether it went (a skipped one did not try)."""
        beat = self.beat
        result = "error" if error else says
        record = {"at": clock.wall(), "says": says, "why": printable(why)[:200],
                  "sent": says != rules.SKIP and not error, **({"error": error} if error else {})}
        try:
            with self.ctx.store.write() as db:
                heartbeat_pushes.record_in(db, beat.name, record)
                counters.bump_in(db, COUNTER, {"heartbeat": beat.name, "result": result})
        except Exception as exc:  # noqa: BLE001  # the store's trouble is the other loops' to report
            log.warning("heartbeat %s: could not record the beat: %s", beat.name, exc)


def heartbeat_tick(ctx: Context, halt: threading.Event) -> Callable[[], object]:
    """The host-wide loop (the first agent's Context): each heartbeat due gets its verdict and a beat."""
    senders = [Sender(ctx, beat, halt) for beat in ctx.config.heartbeat]

    def step() -> object:
        now = clock.monotonic()
        due = [s for s in senders if rules.due_in(s.last_offer, s.beat.interval, now) <= 0]
        if not due:
            return None
        stuck = ""
        try:
            statuses = status_mod.gather_all(ctx, events=0)
            well, stuck = health(statuses, ctx.config), host_stuck(statuses, ctx.config)
        except Exception as exc:  # noqa: BLE001  # no look, no verdict: a skipped beat, not a wrong one
            well, unseen = None, f"status unavailable: {type(exc).__name__}"
        said = {}
        for sender in due:
            beat = sender.beat
            sender.last_offer = now
            if well is None:
                verdict = rules.Verdict(rules.SKIP, unseen)
            else:
                mine = [h for h in well if not beat.agents or h.name in beat.agents]
                verdict = rules.verdict(mine, hold_fails=beat.hold_fails, unwitnessed_after=beat.unwitnessed_after,
                                        stuck=stuck)
            if verdict.says == rules.SKIP:
                sender.record(rules.SKIP, verdict.why)
                said[beat.name] = f"skipped ({verdict.why})"
                continue
            said[beat.name] = verdict.says if sender.offer(verdict.says, verdict.why) else "still sending the last"
        return said

    return step
