"""The watchdog tick: observe at bounded cost, let watchdog_rules decide, act through the actions module.

With the stream-json driver it also records what the pump saw that a human should know of: each
`result` whose tool calls the CLI's permissions denied, once (a denied `touch` is a canary that
can never ack).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loomtui import actions, clock
from loomtui.agent import drivers, holds, launches, proctree
from loomtui.agent.driver import GONE, UP
from loomtui.agent.ports import AgentDriver, AgentFacts
from loomtui.agent.proctree import MISSING, PRESENT, UNKNOWN
from loomtui.agent.tmux import TmuxError
from loomtui.agent.watchdog_rules import Looks, Observation, Step, assess, settings_from
from loomtui.context import Context
from loomtui.errors import LoomError
from loomtui.pump import render, transcript
from loomtui.store import ledger
from loomtui.text import printable


@dataclass
class WatchdogReport:
    observation: Observation | None = None
    steps: list[Step] = field(default_factory=list)
    results: list[str] = field(default_factory=list)


class Watchdog:
    def __init__(self, ctx: Context, driver: AgentDriver | None = None, stop: threading.Event | None = None) -> None:
        """`stop`: set when the daemon stops (its halt); no relaunch is begun once it is, as the
        canary's probe gives up its wait (a relaunch begun then outlived the daemon's stop)."""
        self.ctx = ctx
        self.driver = driver or drivers.of(ctx)
        self.stop = stop or threading.Event()
        self._others: dict[str, AgentDriver] = {}  # the other configured agents' drivers, by name
        self.settings = settings_from(ctx.config, has_dialogs=self.driver.has_dialogs)
        self.memory = Looks()
        self.last_foreign_scan: float | None = None

    # -- observe ---------------------------------------------------------------------------

    def observe(self) -> tuple[Observation, AgentFacts]:
        # With modals to look for, the screen comes with the pane: one tmux call, not two.
        facts = self.driver.observe(with_screen=bool(self.settings.modals))
        launched = launches.last_launch(self.ctx)
        since = launches.launch_age(launched)  # the record just read, not a second read of it
        agent = self.ctx.config.agent
        screen = None
        pane = facts.pane
        if facts.tmux == UP and pane is not None:
            try:
                if pane.dead:
                    screen = self.driver.screen(history=True)
                elif self.settings.modals and facts.tree is not None and facts.tree.agent == PRESENT:
                    screen = facts.screen if facts.screen is not None else self.driver.screen()
            except TmuxError:
                screen = None
        if screen is not None and self.driver.owns_turns:
            # A pump's pane echoes every line sent in and answered: only the CLI's stderr says a
            # resume failed (any message could hold "No conversation found").
            screen = render.stderr_said(screen)
        tree = facts.tree
        socket_lost = facts.tmux == GONE and self.socket_lost()
        if facts.tmux == UP and pane is not None and not pane.dead:
            self.remember_processes(pane.pane_pid)
        obs = Observation(
            tmux=facts.tmux,
            pane_dead=bool(pane and pane.dead),
            dead_status=pane.dead_status if pane else None,
            dead_signal=pane.dead_signal if pane else None,
            agent=tree.agent if tree else UNKNOWN,
            poller=tree.poller if tree else UNKNOWN,
            poller_configured=bool(agent.poller_match),
            since_launch=since,
            last_mode=launched.mode if launched else None,
            screen=screen,
            why=facts.why,
            socket_lost=socket_lost,
        )
        return obs, facts

    # -- ticks -----------------------------------------------------------------------------

    def fast_tick(self) -> WatchdogReport | None:
        """One cheap tmux call; a dead pane gets a full tick at once instead of at the next interval."""
        try:
            info = self.driver.pane_info()
        except TmuxError:
            return None
        if info is not None and info.dead:
            return self.tick()
        return None

    def tick(self) -> WatchdogReport:
        # A timed hold ends by itself: recorded here even when nothing asks to act meanwhile.
        holds.expire(self.ctx, source="watchdog", now=clock.now())  # a timed hold ends by the monotonic clock
        obs, facts = self.observe()
        steps, self.memory = assess(obs, self.memory, self.settings, clock.monotonic())
        report = WatchdogReport(obs, steps)
        for step in steps:
            report.results.append(self.act(step, obs, facts))
        # After a relaunch the facts are stale: the new agent's poller would look foreign.
        if not any(step.kind == "recover" for step in steps) and self.due_foreign_scan():
            report.results.extend(self.reap_foreign())
        if self.driver.owns_turns:  # only a pump records each turn's result, and the calls it denied
            report.results.extend(record_denials(self.ctx))
        return report

    # -- act -------------------------------------------------------------------------------

    def act(self, step: Step, obs: Observation, facts: AgentFacts) -> str:
        if step.kind == "ambiguous":
            ledger.append(self.ctx.store, "observation_ambiguous", source="watchdog", detail={"why": step.note})
            return f"ambiguous: {step.note}"
        if step.kind == "alert":
            return actions.alert(self.ctx, step.note, source="watchdog")
        if step.kind == "repair_socket":
            return actions.repair_socket(self.ctx, source="watchdog")
        if step.kind == "dismiss_modal":
            result = actions.dismiss_modal(self.ctx, list(step.keys), source="watchdog",
                                           detail={"match": step.note})
            if result.refused:
                return f"modal left on screen: {result.error}"
            return "modal dismissed" if result.ok else f"modal dismissal failed: {result.error}"
        assert step.kind == "recover" and step.cause
        cause = step.cause
        if self.stop.is_set():
            # The daemon stops: a relaunch (stop, launch, a boot watched for its grace) would hold up
            # the stop, and the store it records into is about to close. The next daemon's look finds it.
            return f"{cause}: not relaunched, the daemon is stopping"
        evidence: dict[str, object] = {"note": step.note}
        if obs.pane_dead:
            evidence["status"] = obs.dead_status
            if obs.dead_signal:
                evidence["signal"] = obs.dead_signal
        pane_pid = facts.pane.pane_pid if facts.pane is not None else None
        outcome = actions.recover(self.ctx, cause, source="watchdog", evidence=evidence,
                                  still_failing=lambda: self.still_failing(cause, pane_pid),
                                  driver=self.driver)
        return f"{cause}: {outcome.describe()}"

    def socket_lost(self) -> bool:
        """Our tmux server runs but does not answer on its socket (a /tmp cleaner deleted it).
        A server that answers, but has no agent session, is a plain "gone"."""
        recorded = launches.recorded_processes(self.ctx) or {}
        if not proctree.of(self.ctx).alive_as(recorded.get("server_pid"), recorded.get("server_started")):
            return False
        try:
            return not self.driver.server_running()
        except TmuxError:
            return False

    def remember_processes(self, pane_pid: int) -> None:
        """Keep the record of our processes current (after an upgrade, or a relaunch that
        could not record them): only when what runs differs from what is recorded."""
        recorded = launches.recorded_processes(self.ctx) or {}
        if recorded.get("pane_pid") == pane_pid and recorded.get("server_pid"):
            return
        try:
            launches.record_processes(self.ctx, self.driver, pane_pid)
        except (TmuxError, LoomError):
            pass  # tried again on the next look

    def still_failing(self, cause: str, pane_pid: int | None) -> bool:
        """The second look, under recycle.lock: has someone else handled this already?"""
        try:
            info = self.driver.pane_info()
        except TmuxError:
            return False
        if cause == "tmux_gone":
            return info is None and not self.socket_lost()
        if info is None:
            return False
        if cause in ("exit", "crash", "resume_failed") and info.dead:
            return info.pane_pid == pane_pid
        if info.dead:
            return False
        tree = proctree.of(self.ctx).inspect(info.pane_pid, self.ctx.config.agent.process_match,
                                self.ctx.config.agent.poller_match)
        if cause == "exit":
            return tree.agent == MISSING
        if cause == "poller_missing":
            return tree.agent == PRESENT and tree.poller == MISSING
        return False

    # -- foreign pollers -------------------------------------------------------------------

    def due_foreign_scan(self) -> bool:
        if not self.ctx.config.agent.poller_match:
            return False
        now = clock.monotonic()
        if self.last_foreign_scan is not None and now - self.last_foreign_scan < self.ctx.config.watchdog.foreign_scan:
            return False
        self.last_foreign_scan = now
        return True

    def reap_foreign(self) -> list[str]:
        """Find pollers outside the agent's tree, only when the tree is plainly seen (a live pane
        that tmux answered for, and no relaunch under way: a new agent's poller is not foreign),
        and have the actions module reap each that a second look confirms."""
        pane_pid = self._live_pane_pid()
        if pane_pid is None or launches.relaunch_under_way(self.ctx):
            return []
        panes = self._agents_panes(pane_pid)
        if panes is None:
            return []
        try:
            # Every configured agent's tree, not only this one's: two agents running the same
            # plugin have pollers of one pattern (each with its own token), and each agent's
            # watchdog reaped the other's, recycled it for a missing poller, and so on to the fuse.
            ours = {pid for pane in panes for pid in proctree.of(self.ctx).walk(pane)[0]}
        except proctree.Ambiguous:
            return []
        results = []
        for pid, _line in proctree.of(self.ctx).foreign_pollers(self.ctx.config.agent.poller_match, ours):
            result = actions.reap_foreign(self.ctx, pid, source="watchdog",
                                          still_foreign=functools.partial(self._confirm_foreign, pid))
            if result is not None:
                results.append(result)
        return results

    def _live_pane_pid(self) -> int | None:
        try:
            info = self.driver.pane_info()
        except TmuxError:
            return None
        return info.pane_pid if info is not None and not info.dead else None

    def _agents_panes(self, pane_pid: int) -> list[int] | None:
        """This agent's live pane and every other configured agent's (a dead or missing one has no
        tree to spare); None when another agent's pane cannot be told: a poller that may be its is
        no stranger's, so nothing is reaped until a look can tell.

        Another agent's pane is the one its last launch recorded while that process still runs as
        recorded (no tmux call: its tmux server may hang, and this agent's tick must not wait on
        it); else tmux is asked, as for an agent started before Loom recorded its processes."""
        panes = [pane_pid]
        for name in self.ctx.config.agent_names:
            if name == self.ctx.agent:
                continue
            other = self.ctx.for_agent(name)
            try:
                if other.driver is None and self.ctx.driver is not None:
                    # This agent's driver port was filled in (the simulator's world, a test): its
                    # world holds this agent alone, and the machine's tmux is none of its business.
                    continue
                recorded = launches.recorded_processes(other)
                if recorded is not None and proctree.of(self.ctx).alive_as(recorded.get("pane_pid"),
                                                                            recorded.get("pane_started")):
                    panes.append(int(recorded["pane_pid"]))
                    continue
                if name not in self._others:  # made once: a driver may keep a tmux control client
                    self._others[name] = drivers.of(other)
            finally:
                other.close()
            try:
                info = self._others[name].pane_info()
            except TmuxError:
                return None
            if info is not None and not info.dead:
                panes.append(info.pane_pid)
        return panes

    def _confirm_foreign(self, pid: int) -> bool:
        # Second look, just before the kill: still there, still a poller, and no ancestor is any
        # agent's pane as it is now (a poller an agent just spawned may have been missed).
        pane_pid = self._live_pane_pid()
        if pane_pid is None:
            return False
        panes = self._agents_panes(pane_pid)
        if panes is None:
            return False
        try:
            line = proctree.of(self.ctx).cmdline(pid)
            ancestors = proctree.of(self.ctx).ancestors(pid)
        except proctree.Ambiguous:
            return False
        if not re.search(self.ctx.config.agent.poller_match, line):
            return False
        return not ancestors & set(panes)


# How far the watchdog has read the pump's transcript for denials: {"ino", "offset"}.
DENIALS_READ_KEY = "stream_denials_read"
MAX_TOOL_NAME = 80


def record_denials(ctx: Context) -> list[str]:
    """A `permission_denied` event for each result in the pump's transcript, since the last read,
    that carries permission denials: tool names and the turn's origin, never the call's input.
    And for each message the pump set aside (pump.rules.MAX_UNREAD launches exited before reading
    it), a `pump_set_aside` event and a word to the operator: the pump has no store and no outbox,
    and a line of theirs was no longer delivered without anyone being told. The events, the
    messages and the new read offset commit together, so each is recorded once."""
    path = transcript.path_in(ctx.agent_dir)
    try:
        st = path.stat()
    except OSError:
        return []
    raw = ctx.store.get_meta(ctx.store.agent_key(DENIALS_READ_KEY))
    mark = json.loads(raw) if raw else {}
    head = _head(path)
    # The same file read on; a new one (another inode, or a reused inode whose first line differs)
    # or a truncated one is read from its start.
    same = mark.get("ino") == st.st_ino and mark.get("head") == head and mark.get("offset", 0) <= st.st_size
    offset = mark.get("offset", 0) if same else 0
    if offset == st.st_size:
        return []
    found: list[dict[str, Any]] = []
    aside: list[dict[str, Any]] = []
    origin: str | None = None
    seq: int | None = None
    end = offset
    for record in transcript.read(path, offset):
        end = record.end
        if record.dir == transcript.IN:
            origin = record.data.get("origin") if isinstance(record.data.get("origin"), str) else None
            seq = record.data.get("seq") if isinstance(record.data.get("seq"), int) else None
            continue
        if record.dir == transcript.PUMP and record.data.get("what") == "set_aside":
            number, unread, whence = record.data.get("seq"), record.data.get("unread"), record.data.get("origin")
            aside.append({"seq": number if isinstance(number, int) else None,
                          "unread": unread if isinstance(unread, int) else None, "ts": record.ts,
                          "origin": printable(whence)[:32] if isinstance(whence, str) else None})
            continue
        event = record.event
        if record.dir != transcript.OUT or event.get("type") != "result":
            continue
        tools = _denied_tools(event.get("permission_denials"))
        if tools:
            found.append({"tools": tools, "count": len(event["permission_denials"]), "seq": seq, "origin": origin,
                          "subtype": printable(str(event.get("subtype") or ""))[:40], "ts": record.ts})
    if end == offset:
        return []
    with ctx.store.write() as db:
        for detail in found:
            ledger.append_in(db, "permission_denied", source="watchdog", detail=detail)
        for detail in aside:
            actions.told_set_aside_in(db, ctx, detail, source="watchdog")
        ctx.store.set_meta(ctx.store.agent_key(DENIALS_READ_KEY), json.dumps({"ino": st.st_ino, "head": head, "offset": end}), db)
    return [f"permission denied to {', '.join(d['tools'])}" for d in found] + \
        [f"message #{d['seq']} set aside by the pump" for d in aside]


def _head(path: Path) -> str:
    """A digest of the file's first line: tells a new transcript from the one read before."""
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.readline(4096)).hexdigest()[:16]
    except OSError:
        return ""


def _denied_tools(denials: object) -> list[str]:
    if not isinstance(denials, list):
        return []
    names = []
    for denial in denials:
        name = denial.get("tool_name") if isinstance(denial, dict) else denial
        text = printable(str(name or "?"))[:MAX_TOOL_NAME]
        if text not in names:
            names.append(text)
    return names

