"""What the store says about the agent's launches: the last one, its boot grace, and which
processes are ours. Read by every loop; written by a relaunch and by the watchdog's looks."""

from __future__ import annotations

import json
from typing import Any

from loomtui import clock
from loomtui.agent import proctree
from loomtui.agent.driver import TmuxDriver
from loomtui.agent.policy import Instant, age
from loomtui.agent.tmux import TmuxError
from loomtui.context import Context
from loomtui.store import locks

LAUNCH_KEY = "agent_launch"
# The pane process and tmux server last seen running the agent (pid + start), kept apart from
# LAUNCH_KEY so that a relaunch that fails half-way never forgets which processes are ours.
PROCS_KEY = "agent_processes"


def last_launch(ctx: Context) -> dict[str, Any] | None:
    raw = ctx.store.get_meta(LAUNCH_KEY)
    return json.loads(raw) if raw else None


def recorded_processes(ctx: Context) -> dict[str, Any] | None:
    raw = ctx.store.get_meta(PROCS_KEY)
    return json.loads(raw) if raw else None


def record_processes(ctx: Context, driver: TmuxDriver, pane_pid: int) -> None:
    """Remember the pane process and tmux server running the agent (pid and start), so a later
    "tmux gone" can be checked against the processes themselves."""
    try:
        server = driver.server_pid()
    except TmuxError:
        server = None
    ctx.store.set_meta(PROCS_KEY, json.dumps({
        "pane_pid": pane_pid, "pane_started": proctree.start_time(pane_pid),
        "server_pid": server, "server_started": proctree.start_time(server) if server else None,
    }))


def relaunch_under_way(ctx: Context, now: float | None = None) -> bool:
    """True while a relaunch holds recycle.lock or the agent is still inside its boot grace.

    Typing into an agent that is being replaced, or has not finished booting, loses the text.
    """
    if locks.is_held(ctx.state_dir, locks.RECYCLE):
        return True
    return in_boot_grace(ctx, None if now is None else Instant(now))


def since_launch(ctx: Context, at: Instant | None = None) -> float | None:
    """Seconds since the last launch, on the monotonic clock where it can be compared."""
    return launch_age(last_launch(ctx), at)


def launch_age(launched: dict[str, Any] | None, at: Instant | None = None) -> float | None:
    """Seconds since `launched` (a record from `last_launch`), or None when there was none."""
    if not launched:
        return None
    return age(clock.instant_from(launched, float(launched["ts"])), at or clock.now())


def in_boot_grace(ctx: Context, at: Instant | None = None) -> bool:
    elapsed = since_launch(ctx, at)
    return elapsed is not None and elapsed < ctx.config.agent.boot_grace
