"""What the store says about the agent's launches: the last one, its boot grace, whether it was
seen ready, and which processes are ours. Read by every loop; written by a relaunch and by the
watchdog's and the canary's looks.

Also the signal files (`<state>/signals/`) that wake the daemon's loops at once: tmux's
pane-died hook writes one when the agent's process exits, a relaunch writes another once it has
let go of recycle.lock. A signal only hurries a look the loops would take anyway; a lost one costs
time, never a decision.
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path
from typing import Any

from loomtui import clock
from loomtui.agent import lifecycle, proctree
from loomtui.agent.watchdog_rules import said_last
from loomtui.agent.records import LaunchRecord
from loomtui.timing import Instant, age
from loomtui.agent.ports import AgentDriver
from loomtui.agent.tmux import TmuxError
from loomtui.context import Context
from loomtui.store import locks

LAUNCH_KEY = "agent_launch"
# The pane process and tmux server last seen running the agent (pid + start), kept apart from
# LAUNCH_KEY so that a relaunch that fails half-way never forgets which processes are ours.
PROCS_KEY = "agent_processes"

SIGNALS_DIR = "signals"
PANE_DIED = "pane-died"    # written by tmux itself (save-buffer of a fixed buffer: no shell, no pane text)
RELAUNCHED = "relaunched"  # written by actions.recover once the new agent may be probed
TYPED = "typed"            # written by inject once a line is typed: the hooks loop's witness looks


def last_launch(ctx: Context) -> LaunchRecord | None:
    raw = ctx.store.get_meta(ctx.store.agent_key(LAUNCH_KEY))
    return _launch_record(raw) if raw else None


# The record's text as a LaunchRecord, parsed once per text (the record is frozen): every look of
# every loop reads it, and it changes once a launch.
_launch_record = functools.lru_cache(maxsize=64)(LaunchRecord.from_json)


def recorded_processes(ctx: Context) -> dict[str, Any] | None:
    """The pane and server processes recorded at the last launch; None when there is none, or when
    it was recorded on another boot: none of its processes can be alive, and a pid and start
    (clock ticks since boot on Linux) that a deterministic boot gave again would name a stranger,
    whose tree a stop would kill."""
    raw = ctx.store.get_meta(ctx.store.agent_key(PROCS_KEY))
    if not raw:
        return None
    record = json.loads(raw)
    boot, now = record.get("boot") if isinstance(record, dict) else None, clock.boot_id()
    if boot is not None and now is not None and boot != now:
        return None
    return record


def record_processes(ctx: Context, driver: AgentDriver, pane_pid: int) -> None:
    """Remember the pane process and tmux server running the agent (pid and start), so a later
    "tmux gone" can be checked against the processes themselves."""
    try:
        server = driver.server_pid()
    except TmuxError:
        server = None
    ctx.store.set_meta(ctx.store.agent_key(PROCS_KEY), json.dumps({
        "pane_pid": pane_pid, "pane_started": proctree.of(ctx).start_time(pane_pid),
        "server_pid": server, "server_started": proctree.of(ctx).start_time(server) if server else None,
        "boot": clock.boot_id(),
    }))


def relaunch_under_way(ctx: Context, now: float | None = None) -> bool:
    """True while a relaunch holds recycle.lock or the agent is still inside its boot grace.

    Typing into an agent that is being replaced, or has not finished booting, loses the text.
    """
    if locks.is_held(ctx.agent_dir, locks.RECYCLE):
        return True
    return in_boot_grace(ctx, None if now is None else Instant(now))


def since_launch(ctx: Context, at: Instant | None = None) -> float | None:
    """Seconds since the last launch, on the monotonic clock where it can be compared."""
    return launch_age(last_launch(ctx), at)


def launch_age(launched: LaunchRecord | None, at: Instant | None = None) -> float | None:
    """Seconds since `launched` (a record from `last_launch`), or None when there was none."""
    if launched is None:
        return None
    return age(launched.at, at or clock.now())


def in_boot_grace(ctx: Context, at: Instant | None = None) -> bool:
    """Booting: launched less than `boot_grace` ago and not yet seen ready (`agent.ready_match`),
    as the lifecycle's one rule says (lifecycle.booting)."""
    return lifecycle.booting(last_launch(ctx), ctx.config.agent.boot_grace, at or clock.now())


def looks_ready(ctx: Context, screen: str) -> bool:
    """The screen shows `agent.ready_match`, and not the resume failure (which may share a prompt)."""
    agent = ctx.config.agent
    return bool(agent.ready_match) and re.search(agent.ready_match, screen) is not None \
        and not said_last(agent.resume_failed_match, screen)


def mark_ready(ctx: Context, session_id: str, launched_ts: float, at: Instant | None = None) -> bool:
    """Record that the launch made at `launched_ts` was seen ready: its boot grace is over.
    False when a newer launch has replaced it meanwhile (that one has its own boot)."""
    at = at or clock.now()
    with ctx.store.write() as db:
        launched = last_launch(ctx)
        if launched is None or launched.ts != launched_ts or launched.session_id != session_id:
            return False
        if not launched.seen_ready:
            ctx.store.set_meta(ctx.store.agent_key(LAUNCH_KEY), launched.readied(at).to_json(), db)
    return True


def agent_ready(ctx: Context, driver: AgentDriver) -> bool:
    """Ready for a probe: seen ready before, past its boot grace, or showing `ready_match` now
    (then recorded). One capture of the visible screen at most, and only while booting."""
    launched = last_launch(ctx)
    if not lifecycle.booting(launched, ctx.config.agent.boot_grace, clock.now()):
        return True  # never launched, seen ready before, or past its boot grace
    assert launched is not None
    if driver.owns_turns:  # a pump that is up never loses a line: no screen to wait for
        return _pump_ready(ctx, driver, launched)
    if not ctx.config.agent.ready_match:
        return False
    try:
        info = driver.pane_info()
        if info is None or info.dead:
            return False
        screen = driver.screen()
    except TmuxError:
        return False
    if not looks_ready(ctx, screen):
        return False
    mark_ready(ctx, launched.session_id, launched.ts)
    return True


def grace_left(ctx: Context, driver: AgentDriver) -> float:
    """Seconds until a booting agent is ready by its boot grace alone, when nothing a look can see
    would make it ready sooner (no `agent.ready_match`, no pump); 0 when a look may find it ready."""
    if driver.owns_turns or ctx.config.agent.ready_match:
        return 0.0
    since = launch_age(last_launch(ctx))
    return 0.0 if since is None else max(0.0, ctx.config.agent.boot_grace - since)


def _pump_ready(ctx: Context, driver: AgentDriver, launched: LaunchRecord) -> bool:
    """Stream-json: the pane's own pump is up and its CLI has not exited. A line handed to it
    then is never lost (written to the CLI's stdin, or queued behind a turn), so a probe may go."""
    try:
        info = driver.pane_info()
    except TmuxError:
        return False
    if info is None or info.dead:
        return False
    from loomtui.pump.facts import read_facts  # stream-json only: a tmux agent's users never load it

    # Read from the context's state dir, not the driver's: a driver made without one still works here.
    facts = read_facts(ctx.agent_dir, info.pane_pid)
    if facts is None or not facts.current or facts.cli_exit is not None:
        return False
    mark_ready(ctx, launched.session_id, launched.ts)
    return True


# -- signals ---------------------------------------------------------------------------------


def signals_dir(state_dir: Path) -> Path:
    return Path(state_dir) / SIGNALS_DIR


def ring(state_dir: Path, name: str) -> None:
    """Write the signal file `name`: a fixed byte, so a watcher of the directory sees a change."""
    directory = signals_dir(state_dir)
    try:
        directory.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(directory / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"x")
        finally:
            os.close(fd)
    except OSError:
        pass  # the loops' own periodic looks still see whatever this would have hurried
