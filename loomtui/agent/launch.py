"""Relaunching the agent: resume the pinned session, or start fresh with a newly pinned id.

Resume only ever continues the pinned id ("most recent" once resumed a stranger's
conversation), and a fresh id is never passed together with a resume flag. A resume whose
agent exits at once saying it found no conversation is a `resume_failed`, and its fallback
is a fresh session. With the stream-json driver the pump tells more (watchdog_rules.
stream_boot_verdict): within `agent.resume_check` the resume failure on the CLI's stderr or in its
error `result`, or an error `result` before any `init`, fails the resume the same way; an exit
that says none of that is the launch's death, and the conversation is kept. Only the actions
module calls this, holding recycle.lock (actions.recover).
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loomtui import clock
from loomtui.agent import drivers, holds, launches
from loomtui.agent.hold_rules import Hold, refuses
from loomtui.agent.commands import memory_index_path, render_command  # noqa: F401  (memory_index_path: re-exported)
from loomtui.agent.launches import LAUNCH_KEY, record_processes, recorded_processes
from loomtui.agent.records import LaunchRecord
from loomtui.agent.policy import FRESH, RESUME
from loomtui.agent.ports import AgentDriver
from loomtui.agent.tmux import PaneInfo, TmuxError
from loomtui.agent.watchdog_rules import DIED, FAILED, READY, BootLook, said_last, stream_boot_verdict
from loomtui.context import Context
from loomtui.errors import LoomError
from loomtui.hooks import settings as hook_settings
from loomtui.states import passes_hook_settings
from loomtui.pump import transcript
from loomtui.store import ledger, locks, meta, session

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
    held: Hold | None = None  # an automatic relaunch found a hold in force as it was to be recorded: nothing done

    def describe(self) -> str:
        if not self.ok:
            return f"relaunch ({self.mode}) failed: {self.error}"
        note = " after the resume failed" if self.resume_failed else ""
        return f"relaunched {self.mode}{note}: session {self.session_id}"


def agent_env(ctx: Context, session_id: str) -> dict[str, str]:
    """What the agent needs to call back into Loom (`loom resolve`, the canary's ack dir): the
    shared state dir, and its name, so the `loom` commands it runs act as it."""
    env = {"LOOM_STATE_DIR": str(ctx.state_dir), "LOOM_AGENT": ctx.agent, "LOOM_SESSION_ID": session_id}
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
    driver: AgentDriver | None = None,
    evidence: dict[str, Any] | None = None,
    fallback: bool = False,
    automatic: bool = False,
) -> Outcome:
    """`automatic`: a cause of Loom's own, which a hold refuses. The caller judged the hold before
    it decided; it is judged again in the transaction that records the relaunch, so that an
    operator's `loom hold` written in between (during the second look, which can take seconds) is
    never overtaken by the relaunch it was placed to stop."""
    if mode not in (RESUME, FRESH):
        raise LoomError(f"unknown relaunch mode {mode!r}: use resume or fresh")
    agent = ctx.config.agent
    driver = driver or drivers.of(ctx)
    store = ctx.store
    old = session.pinned(store)
    if mode == RESUME and old is None:
        mode, reason = FRESH, (reason or "") + " (no pinned session to resume)"
    new = old if mode == RESUME else str(uuid.uuid4())
    assert new is not None
    template = agent.resume_command if mode == RESUME else agent.fresh_command
    if passes_hook_settings(template):
        hook_settings.write(ctx.agent_dir)  # refreshed for each launch: the file the command names
    command = render_command(ctx, template, new)
    outcome = Outcome(True, mode, new, old, cause, resume_failed=fallback)
    recorded = recorded_processes(ctx)
    launched_before = store.get_meta(store.agent_key(LAUNCH_KEY))
    # Pin and record before launching: a crash mid-launch still knows which session is ours,
    # and the attempt counts toward the fuse and ceiling whether or not it works.
    with store.write() as db:
        # Dated when written, not before the write waited for a locked store (its busy timeout, 10 s):
        # dated earlier, it left the ceiling's window that much early, and a seventh relaunch came
        # within the hour (hooked storm seed 62, day 22.87).
        at = clock.now()
        now = at.wall
        hold = holds.held_in(db) if automatic else None
        if refuses(hold, "relaunch", automatic=automatic, now=at):
            outcome.ok, outcome.held, outcome.error = False, hold, "a hold was placed before the relaunch was recorded"
            return outcome
        if mode == FRESH:
            session.pin_in(db, new)
        detail: dict[str, Any] = {"mode": mode, "old_session": old, "new_session": new, "mono": at.mono,
                                  "boot": at.boot}
        if reason:
            detail["reason"] = reason.strip()
        if evidence:
            detail["evidence"] = evidence
        event = ledger.append_in(db, "relaunch", source=source, cause=cause, detail=detail, ts=now)
        outcome.events.append(event.id)
        relaunch_id = event.id
        store.set_meta(store.agent_key(LAUNCH_KEY),
                       LaunchRecord(now, at.mono, at.boot, mode, new, cause).to_json(), db)
    stopped = False  # the old agent is gone: a launch failing from here leaves no agent at all
    try:
        # Nothing may be typed while the pane changes hands: a paste that landed in the new
        # agent without its Enter would be glued onto the next message (a fabricated message).
        with locks.hold(ctx.agent_dir, locks.INJECT, timeout=60):
            stubborn = driver.stop(agent.stop_grace, recorded=recorded)
            if stubborn:
                raise LoomError(f"processes {stubborn} of the old agent would not die")
            stopped = True
            mark = _transcript_mark(ctx.agent_dir)
            info = driver.launch(command, agent.cwd, agent_env(ctx, new), exit_signal=_exit_signal(ctx))
    except (TmuxError, LoomError, OSError) as exc:
        # Nothing was launched: a fresh relaunch's pin goes back to the session of the agent it was
        # to replace (left on the new one, never launched, the next crash resumed that, failed, and
        # started fresh: a conversation the old agent ran on, or could be resumed in, lost). Nothing
        # stopped either (processes that would not die, a tmux that stopped answering, the injection
        # lock held): the old agent runs on, and its launch record goes back too.
        try:
            _nothing_launched(ctx, launched_before, stopped=stopped, fresh=mode == FRESH, pinned_before=old)
        except LoomError as err:  # the store refused: the watchdog's next look finds what runs
            log.warning("could not put the launch record back: %s", err)
        outcome.ok, outcome.error = False, str(exc)
        # Names its relaunch: one that launched nothing is no relaunch off its session
        # (ledger.canary_recycled does not count it); `stopped` says whether the old agent runs on.
        event = ledger.append(store, "relaunch_failed", source=source, cause=cause,
                              detail={"mode": mode, "session": new, "error": str(exc), "relaunch": relaunch_id,
                                      "stopped": stopped})
        outcome.events.append(event.id)
        return outcome
    try:
        record_processes(ctx, driver, info.pane_pid)
    except (TmuxError, LoomError) as exc:
        # The launch worked; the watchdog records the processes on its next look.
        log.warning("could not record the new agent's processes: %s", exc)
    resuming = mode == RESUME and not fallback
    why = ""
    if driver.owns_turns:  # the pump's transcript tells the boot: init, the first result, a CLI exit
        failed = _watch_stream_boot(ctx, driver, info, new, now, resuming, mark)
        if failed is None:
            return outcome
        verdict, why, screen, status = failed
        resume_failed = resuming and verdict == FAILED
    else:
        died = _watch_boot(ctx, driver, info.pane_id, new, now)
        if died is None:
            return outcome
        screen, status = died
        resume_failed = resuming and said_last(agent.resume_failed_match, screen)
    if resume_failed:
        detail = {"session": new, "pane_pid": info.pane_pid}
        if why:
            detail["why"] = why
        event = ledger.append(store, "resume_failed", source=source, cause="resume_failed", detail=detail)
        outcome.events.append(event.id)
        # Its own relaunch, recorded as any: a hold placed while the resume booted refuses it too (the
        # fresh start would wipe the conversation the operator may be holding the agent to save).
        fresh = relaunch_locked(ctx, FRESH, cause="resume_failed", source=source,
                                reason=f"resume of {new} " + (f"failed: {why}" if why else "found no conversation"),
                                driver=driver, fallback=True, automatic=automatic)
        fresh.events[:0] = outcome.events
        fresh.old_session_id = old
        return fresh
    # An agent that exits while booting did not launch, whatever the command's own exit said.
    tail = " | ".join(line.strip() for line in screen.splitlines() if line.strip())[-300:]
    outcome.ok = False
    outcome.error = f"the agent exited at once (status {status}): {tail}"
    gone: dict[str, Any] = {"mode": mode, "session": new, "status": status, "screen_tail": tail}
    if why:
        gone["why"] = why
    event = ledger.append(store, "launch_died", source=source, cause=cause, detail=gone)
    outcome.events.append(event.id)
    return outcome


def _nothing_launched(ctx: Context, launched_before: str | None, *, stopped: bool, fresh: bool,
                      pinned_before: str | None) -> None:
    """No agent was launched. The relaunch stays in the ledger, counted toward the fuse and the
    ceiling as an attempt. A `fresh` one's pin goes back to `pinned_before` (none, when none was
    pinned: left on the session never launched, the next crash resumed it, failed, and started
    fresh). Unless the old agent was `stopped`, nothing was stopped either (the old agent would not
    die, or tmux stopped answering, or the injection lock stayed held): the old agent runs on, and a
    turn open in it too; the launch record goes back to what it was (`launched_before`), so that
    turn is not ended by a launch that never happened, nor is the old agent taken for one booting."""
    store = ctx.store
    with store.write() as db:
        if not stopped:
            if launched_before is None:
                meta.delete_in(db, store.agent_key(LAUNCH_KEY))
            else:
                store.set_meta(store.agent_key(LAUNCH_KEY), launched_before, db)
        if fresh:
            if pinned_before is None:
                session.unpin_in(db)
            else:
                session.pin_in(db, pinned_before)


def _exit_signal(ctx: Context) -> Path | None:
    directory = launches.signals_dir(ctx.agent_dir)
    try:
        directory.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None  # no hook: the exit poll alone notices
    return directory / launches.PANE_DIED


def _transcript_mark(state_dir: Path) -> tuple[int, int] | None:
    """Where the pump's transcript ends before a launch (inode, size): the new pump's records follow."""
    try:
        st = transcript.path_in(state_dir).stat()
    except OSError:
        return None
    return st.st_ino, st.st_size


class _SinceLaunch:
    """The transcript's records since the launch, read on: init seen, the first result (and whether
    it said the resume failed, or came before any init), the CLI's stderr saying so, a CLI exit."""

    def __init__(self, state_dir: Path, mark: tuple[int, int] | None, failed_match: str) -> None:
        self.path = transcript.path_in(state_dir)
        self.mark = mark
        self.failed_match = failed_match
        self.offset: int | None = None
        self.init = False
        self.first_error: bool | None = None
        self.error_before_init = False
        self.result_failed = False
        self.stderr_failed = False
        self.exit_status: int | None = None
        self.exited = False

    def advance(self) -> None:
        if self.offset is None:
            try:
                st = self.path.stat()
            except OSError:
                return
            # The same file, not shorter: read on from the mark. A new or truncated one is all new.
            same = self.mark is not None and st.st_ino == self.mark[0] and st.st_size >= self.mark[1]
            self.offset = self.mark[1] if same and self.mark else 0
        for record in transcript.read(self.path, self.offset):
            self.offset = record.end
            event = record.event
            if record.dir == transcript.OUT and event.get("type") == "system" and event.get("subtype") == "init":
                self.init = True
            elif record.dir == transcript.OUT and event.get("type") == "result" and self.first_error is None:
                self.first_error = bool(event.get("is_error"))
                self.error_before_init = self.first_error and not self.init
                self.result_failed = self.first_error and self._says_failed(_result_words(event))
            elif record.dir == transcript.ERR and not self.stderr_failed:
                self.stderr_failed = self._says_failed(record.data.get("line"))
            elif record.dir == transcript.PUMP and record.data.get("what") == "cli_exit":
                self.exited = True
                status = record.data.get("status")
                self.exit_status = status if isinstance(status, int) else None

    def _says_failed(self, text: object) -> bool:
        return isinstance(text, str) and re.search(self.failed_match, text) is not None


def _result_words(event: dict[str, Any]) -> str:
    """What an error result says in words: its `errors` and its `result` text."""
    errors = event.get("errors")
    words = [e for e in errors if isinstance(e, str)] if isinstance(errors, list) else []
    result = event.get("result")
    return "\n".join(words + ([result] if isinstance(result, str) else []))


def _watch_stream_boot(ctx: Context, driver: AgentDriver, launched: PaneInfo, session_id: str,
                       launched_ts: float, resuming: bool,
                       mark: tuple[int, int] | None) -> tuple[str, str, str, int | None] | None:
    """Watch a stream-json launch for `agent.resume_check` (or until it is plainly fine):
    (FAILED or DIED, why, its last screen, exit status), or None."""
    from loomtui.pump import render  # stream-json only

    agent = ctx.config.agent
    since = _SinceLaunch(ctx.agent_dir, mark, agent.resume_failed_match)
    start = clock.monotonic()
    while True:
        elapsed = clock.monotonic() - start
        try:
            info = driver.pane_info()
        except TmuxError:
            return None  # tmux does not answer: the watchdog's to tell, not a failed launch
        if info is None or info.pane_id != launched.pane_id:
            return None
        since.advance()
        facts = driver.stream_facts(None if info.dead else info.pane_pid)
        current = facts is not None and facts.current
        screen_failed = since.stderr_failed  # the pump keeps the CLI's stderr, after the pane is gone too
        if resuming and not info.dead and not screen_failed:
            try:
                said = render.stderr_said(driver.screen(pane_id=info.pane_id))
                screen_failed = re.search(agent.resume_failed_match, said) is not None
            except TmuxError:
                pass
        status = info.dead_status if info.dead_status is not None else since.exit_status
        look = BootLook(elapsed=elapsed, exited=info.dead or since.exited, exit_status=status,
                        screen_failed=screen_failed, pump_up=current, init_seen=since.init,
                        first_result_error=since.first_error, result_failed=since.result_failed,
                        error_before_init=since.error_before_init,
                        busy=bool(current and facts and (facts.running or facts.queue)))
        verdict, why = stream_boot_verdict(look, resume=resuming, resume_check=agent.resume_check)
        if verdict == READY:
            if current:
                launches.mark_ready(ctx, session_id, launched_ts)
            return None
        if verdict in (FAILED, DIED):
            try:
                screen = driver.screen(history=True)
            except TmuxError:
                screen = ""
            return verdict, why, screen, status
        clock.sleep(0.1)


# How often the boot watch looks at a new agent: a failed resume says so and exits within moments,
# and a quarter second more to see it costs nothing beside the relaunch; each look is a tmux call
# (a capture too, with a ready_match), which at 20 a second was most of a relaunch's work.
BOOT_POLL = 0.25


def _watch_boot(ctx: Context, driver: AgentDriver, pane_id: str, session_id: str,
                launched_ts: float) -> tuple[str, int | None] | None:
    """Watch a new agent for `agent.resume_check`, or until it shows `agent.ready_match`:
    (its last screen, exit status) if it died, else None.

    A resume that fails says so and exits within moments; an agent showing its prompt has got
    past that, so there is nothing left to wait for (and the canary can witness it at once).
    """
    ready_match = ctx.config.agent.ready_match
    deadline = clock.monotonic() + ctx.config.agent.resume_check
    while clock.monotonic() < deadline:
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
        clock.sleep(BOOT_POLL)
    return None
