"""Relaunching the agent: resume the pinned session, or start fresh with a newly pinned id.

Resume only ever continues the pinned id ("most recent" once resumed a stranger's
conversation), and a fresh id is never passed together with a resume flag. A resume whose
agent exits at once saying it found no conversation is a `resume_failed`, and its fallback
is a fresh session. Only the actions module calls this, holding recycle.lock (actions.recover).
"""

from __future__ import annotations

import json
import logging
import re
import shlex
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loomtui import clock
from loomtui.agent import launches
from loomtui.agent.driver import TmuxDriver, make_driver
from loomtui.agent.launches import LAUNCH_KEY, record_processes, recorded_processes
from loomtui.agent.policy import FRESH, RESUME
from loomtui.agent.tmux import TmuxError
from loomtui.context import Context
from loomtui.errors import LoomError
from loomtui.store import ledger, locks, session

log = logging.getLogger("loom.launch")



@dataclass
class Outcome:
    ok: bool
    mode: str
    session_id: str
    old_session_id: str | None
    cause: str
    error: str = ""
    resume_failed: bool = False
    events: list[int] = field(default_factory=list)

    def describe(self) -> str:
        if not self.ok:
            return f"relaunch ({self.mode}) failed: {self.error}"
        note = " after the resume failed" if self.resume_failed else ""
        return f"relaunched {self.mode}{note}: session {self.session_id}"


def memory_index_path(ctx: Context) -> Path:
    return ctx.config.memory.dir / ctx.config.memory.index


def render_command(ctx: Context, template: str, session_id: str) -> str:
    # The session id is a uuid we minted or pinned; paths can hold anything, so they are quoted.
    return template.format(
        session_id=session_id,
        memory_index=shlex.quote(str(memory_index_path(ctx))),
        state_dir=shlex.quote(str(ctx.state_dir)),
    )


def agent_env(ctx: Context, session_id: str) -> dict[str, str]:
    """What the agent needs to call back into Loom (`loom resolve`, the canary's ack dir)."""
    env = {"LOOM_STATE_DIR": str(ctx.state_dir), "LOOM_SESSION_ID": session_id}
    if ctx.config_path is not None:
        env["LOOM_CONFIG"] = str(ctx.config_path)
    env.update(ctx.config.agent.env)
    return env


def relaunch_locked(
    ctx: Context,
    mode: str,
    *,
    cause: str,
    source: str,
    reason: str | None = None,
    driver: TmuxDriver | None = None,
    evidence: dict[str, Any] | None = None,
    fallback: bool = False,
) -> Outcome:
    if mode not in (RESUME, FRESH):
        raise LoomError(f"unknown relaunch mode {mode!r}: use resume or fresh")
    agent = ctx.config.agent
    driver = driver or make_driver(ctx.config)
    store = ctx.store
    old = session.pinned(store)
    if mode == RESUME and old is None:
        mode, reason = FRESH, (reason or "") + " (no pinned session to resume)"
    new = old if mode == RESUME else str(uuid.uuid4())
    assert new is not None
    template = agent.resume_command if mode == RESUME else agent.fresh_command
    command = render_command(ctx, template, new)
    outcome = Outcome(True, mode, new, old, cause, resume_failed=fallback)
    recorded = recorded_processes(ctx)
    at = clock.now()
    now = at.wall
    # Pin and record before launching: a crash mid-launch still knows which session is ours,
    # and the attempt counts toward the fuse and ceiling whether or not it works.
    with store.write() as db:
        if mode == FRESH:
            session.pin_in(db, new)
        detail = {"mode": mode, "old_session": old, "new_session": new, "mono": at.mono, "boot": at.boot}
        if reason:
            detail["reason"] = reason.strip()
        if evidence:
            detail["evidence"] = evidence
        event = ledger.append_in(db, "relaunch", source=source, cause=cause, detail=detail, ts=now)
        outcome.events.append(event.id)
        store.set_meta(LAUNCH_KEY, json.dumps({"ts": now, "mono": at.mono, "boot": at.boot, "mode": mode,
                                               "session_id": new, "cause": cause}), db)
    try:
        # Nothing may be typed while the pane changes hands: a paste that landed in the new
        # agent without its Enter would be glued onto the next message (a fabricated message).
        with locks.hold(ctx.state_dir, locks.INJECT, timeout=60):
            stubborn = driver.stop(agent.stop_grace, recorded=recorded)
            if stubborn:
                raise LoomError(f"processes {stubborn} of the old agent would not die")
            info = driver.launch(command, agent.cwd, agent_env(ctx, new), exit_signal=_exit_signal(ctx))
    except (TmuxError, LoomError, OSError) as exc:
        outcome.ok, outcome.error = False, str(exc)
        event = ledger.append(store, "relaunch_failed", source=source, cause=cause,
                              detail={"mode": mode, "session": new, "error": str(exc)})
        outcome.events.append(event.id)
        return outcome
    try:
        record_processes(ctx, driver, info.pane_pid)
    except (TmuxError, LoomError) as exc:
        # The launch worked; the watchdog records the processes on its next look.
        log.warning("could not record the new agent's processes: %s", exc)
    died = _watch_boot(ctx, driver, info.pane_id, new, now)
    if died is None:
        return outcome
    screen, status = died
    if mode == RESUME and not fallback and re.search(agent.resume_failed_match, screen):
        event = ledger.append(store, "resume_failed", source=source, cause="resume_failed",
                              detail={"session": new, "pane_pid": info.pane_pid})
        outcome.events.append(event.id)
        fresh = relaunch_locked(ctx, FRESH, cause="resume_failed", source=source,
                                reason=f"resume of {new} found no conversation", driver=driver, fallback=True)
        fresh.events[:0] = outcome.events
        fresh.old_session_id = old
        return fresh
    # An agent that exits while booting did not launch, whatever the command's own exit said.
    tail = " | ".join(line.strip() for line in screen.splitlines() if line.strip())[-300:]
    outcome.ok = False
    outcome.error = f"the agent exited at once (status {status}): {tail}"
    event = ledger.append(store, "launch_died", source=source, cause=cause,
                          detail={"mode": mode, "session": new, "status": status, "screen_tail": tail})
    outcome.events.append(event.id)
    return outcome


def _exit_signal(ctx: Context) -> Path | None:
    directory = launches.signals_dir(ctx.state_dir)
    try:
        directory.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None  # no hook: the exit poll alone notices
    return directory / launches.PANE_DIED


def _watch_boot(ctx: Context, driver: TmuxDriver, pane_id: str, session_id: str,
                launched_ts: float) -> tuple[str, int | None] | None:
    """Watch a new agent for `agent.resume_check`, or until it shows `agent.ready_match`:
    (its last screen, exit status) if it died, else None.

    A resume that fails says so and exits within moments; an agent showing its prompt has got
    past that, so there is nothing left to wait for (and the canary can witness it at once).
    """
    ready_match = ctx.config.agent.ready_match
    deadline = time.monotonic() + ctx.config.agent.resume_check
    while time.monotonic() < deadline:
        try:
            info = driver.pane_info()
        except TmuxError:
            return None
        if info is None or info.pane_id != pane_id:
            return None
        if info.dead:
            try:
                return driver.screen(history=True), info.dead_status
            except TmuxError:
                return "", info.dead_status
        if ready_match:
            try:
                screen = driver.screen(pane_id=pane_id)
            except TmuxError:
                screen = ""
            if launches.looks_ready(ctx, screen):
                launches.mark_ready(ctx, session_id, launched_ts)
                return None
        time.sleep(0.05)
    return None
