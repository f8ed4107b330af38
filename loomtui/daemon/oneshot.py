"""`loom tick LOOP`: exactly one tick of one loop, for setups where cron, launchd or a systemd
timer fires the loops instead of `loom supervise`.

The scheduler only fires. Locks, admission and recording are the daemon's: each tick of a loop
runs under that loop's tick lock, taken without waiting, so two overlapping ticks of one loop
never both act (the second says `busy` and exits 75); a relaunch still goes through the actions
module under recycle.lock with its second look. What the watchdog remembers between ticks (how
many looks saw the pane gone, a modal pressed) is kept in the store, since each tick is a new
process.
"""

from __future__ import annotations

import asyncio
import logging
import dataclasses
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loomtui.context import Context
from loomtui.errors import LockHeld, LoomError, StoreUnavailable
from loomtui.store import counters, health, ledger, locks
from loomtui.report import check_rules
from loomtui.store.db import DB_NAME

if TYPE_CHECKING:
    from loomtui.config import Config
    from loomtui.report.status import Heartbeat

log = logging.getLogger("loom.tick")

LOOPS = ("watchdog", "canary", "sentinel", "notify")
AGENT_LOOPS = ("watchdog", "canary")  # one per agent; the sentinel and the sender serve every agent
EXIT_RAN, EXIT_FAILED, EXIT_BUSY = 0, 1, 75  # 75: EX_TEMPFAIL, "try again later"
EXIT_UNUSABLE = health.EX_IOERR  # 74: the store is damaged or gone (`loom supervise` salvages it at start)
LOOKS_KEY = "watchdog_looks"
# The daemon's Telegram services (daemon/loops.py), by the name their heartbeat entries have.
TELEGRAM_SERVICES = ("telegram_sender", "telegram_commands", "telegram_bridge")


class SenderBusy(Exception):
    """The outbox's one sender (the daemon's, or another tick) is delivering."""


def lock_name(loop: str) -> str:
    return f"tick-{loop}.lock"


def lock_dir(ctx: Context, loop: str) -> Path:
    """An agent's loop locks in that agent's directory (two agents' watchdogs never wait for each
    other); a host-wide loop in the state dir. The daemon's ticks take the same locks."""
    return ctx.agent_dir if loop in AGENT_LOOPS else ctx.state_dir


def loop_labels(loop: str, agent: str | None) -> dict[str, str]:
    """The loop KPIs' labels: an agent other than `main` is named, so `main`'s counters stay the
    series they were before there were several agents."""
    return {"loop": loop} if agent in (None, "main") else {"loop": loop, "agent": agent}


@dataclass(frozen=True)
class TickOutcome:
    loop: str
    status: str          # ran / busy / failed / unusable (the store)
    line: str
    seconds: float

    @property
    def exit_code(self) -> int:
        return {"ran": EXIT_RAN, "busy": EXIT_BUSY, "unusable": EXIT_UNUSABLE}.get(self.status, EXIT_FAILED)


def record(ctx: Context, loop: str, source: str, status: str, seconds: float | None) -> None:
    """The loop KPIs of one tick: the trigger, the run's outcome and how long it took. A count the
    store cannot take (locked past its busy timeout) is lost, logged, and never changes what the
    tick did: raised, a tick that ran (and may have relaunched) exited 1, "failed"."""
    labels = loop_labels(loop, ctx.agent if loop in AGENT_LOOPS else None)
    tally = counters.Tally()
    tally.add("loom_fire_total", {**labels, "source": source})
    tally.add("loom_run_total", {**labels, "status": status})
    if seconds is not None:
        tally.observe("loom_tick_duration_seconds", labels, seconds)
    try:
        tally.flush(ctx.store)
    except StoreUnavailable as exc:
        if health.classify(exc) != health.TRANSIENT:
            raise  # damage is the tick's news (exit 74), not a lost count
        log.warning("could not count the %s tick (%s): %s", loop, status, exc)


def loop_name(loop: str, agent: str | None) -> str:
    """A loop's name in logs, heartbeats and loop_error events: `watchdog:beta` for agent beta;
    `main`'s loops keep their names from before there were several agents (as its meta keys do)."""
    return loop if agent in (None, "main") else f"{loop}:{agent}"


def stuck_ticks(beat: Heartbeat | None, config: Config, agent: str) -> tuple[tuple[str, float], ...]:
    """`agent`'s watchdog and canary loops whose tick under way, as the supervisor's last fresh
    beat tells it, has run longer than any tick may (report/check_rules.py): `loom check`'s and the
    push heartbeats' one reading."""
    if beat is None:
        return ()
    view = config.for_agent(agent)
    fresh = check_rules.supervisor_stale_after(config.watchdog.interval)
    return check_rules.stuck({loop: beat.ran(loop_name(loop, agent), fresh) for loop in ("watchdog", "canary")},
                             check_rules.tick_stuck_after(view.agent.boot_grace, view.canary.ack_timeout,
                                                          view.agent.resume_check, view.agent.stop_grace))


def stuck_host_loops(beat: Heartbeat | None, config: Config) -> tuple[tuple[str, float], ...]:
    """The host-wide loops whose step under way, as the supervisor's last fresh beat tells it, has
    run longer than any may: the sentinel's tick (its interval, and the margin), a Telegram service's
    step (a poll's long poll, and the margin). `loom check`'s and the push heartbeats' one reading."""
    if beat is None:
        return ()
    fresh = check_rules.supervisor_stale_after(config.watchdog.interval)
    sentinel = check_rules.stuck({"sentinel": beat.ran("sentinel", fresh)},
                                 check_rules.step_stuck_after(config.sentinel.interval))
    return sentinel + check_rules.stuck({name: beat.ran(name, fresh) for name in TELEGRAM_SERVICES},
                                        check_rules.step_stuck_after(config.telegram.long_poll))


def tick_once(ctx: Context, loop: str, *, source: str = "cron") -> TickOutcome:
    if loop not in LOOPS:
        raise ValueError(f"unknown loop {loop!r}: one of {', '.join(LOOPS)}")
    began = time.monotonic()
    try:
        lock = locks.hold(lock_dir(ctx, loop), lock_name(loop), timeout=0)
    except LockHeld:
        return _counted(ctx, loop, source,
                        TickOutcome(loop, "busy", f"another {loop} tick is running; this one did nothing", 0.0), None)
    with lock:
        try:
            line = RUNNERS[loop](ctx)
        except SenderBusy as exc:  # the daemon's own sender is delivering: this tick has nothing to do
            return _counted(ctx, loop, source, TickOutcome(loop, "busy", str(exc), time.monotonic() - began), None)
        except Exception as exc:
            seconds = time.monotonic() - began
            path = ctx.state_dir / DB_NAME
            opened = ctx._store  # only a store the tick opened: opening one here could create it
            reason = opened.unusable(exc) if opened is not None else health.examine(path, None, exc)
            if reason:  # nothing is recorded into a store that is not the store any more
                return TickOutcome(loop, "unusable", f"store {path} is unusable: {reason}", seconds)
            try:
                name = loop_name(loop, ctx.agent if loop in AGENT_LOOPS else None)
                ledger.append(ctx.store, "loop_error", source=source,
                              detail={"loop": name, "type": type(exc).__name__, "error": str(exc)[:500]})
                record(ctx, loop, source, "failed", seconds)
            except Exception:  # the store itself may be what failed; the exit status still says it
                pass
            return TickOutcome(loop, "failed", f"{type(exc).__name__}: {exc}", seconds)
        seconds = time.monotonic() - began
        return _counted(ctx, loop, source, TickOutcome(loop, "ran", line, seconds), seconds)


def _counted(ctx: Context, loop: str, source: str, outcome: TickOutcome, seconds: float | None) -> TickOutcome:
    """`outcome`, counted (record, its duration `seconds`: None for a tick that did nothing); a
    store the count found damaged or unusable is the tick's news, exit 74, whatever the tick did (it
    exited 1, "failed", so a wrapper that salvages on 74 never did)."""
    try:
        record(ctx, loop, source, "ok" if outcome.status == "ran" else outcome.status, seconds)
    except StoreUnavailable as exc:
        return TickOutcome(loop, "unusable", f"{outcome.line}; then the store {ctx.state_dir / DB_NAME} "
                                             f"would not take its count: {exc}", outcome.seconds)
    return outcome


def _watchdog(ctx: Context) -> str:
    from loomtui.agent.watchdog import Watchdog
    from loomtui.agent.watchdog_rules import Looks

    watchdog = Watchdog(ctx)
    watchdog.memory = load_looks(ctx, Looks)
    report = watchdog.tick()
    ctx.store.set_meta(ctx.store.agent_key(LOOKS_KEY), json.dumps(dump_looks(watchdog.memory)))
    return "; ".join(report.results) if report.results else "nothing to do"


def _canary(ctx: Context) -> str:
    from loomtui.canary.loop import CanaryLoop
    from loomtui.hooks import settings as hook_settings

    said = ""
    # A running `loom supervise` records them in its hooks loop: two readers of one event file
    # recorded it twice (a permission prompt told twice, a line reported missing twice).
    if hook_settings.wanted(ctx.config.agent) and not locks.is_held(ctx.state_dir, locks.SUPERVISOR):
        # The daemon's hooks loop has no tick of its own: the agent's hook events are recorded here,
        # before the canary reads its turns. Unread, the files piled up (whole payloads: prompts,
        # tool output), no miss was excused by a busy turn, no rate limit held, no resume proven.
        from loomtui.daemon.loops import hooks_look

        missing, _ = hooks_look(ctx)()
        said = f"{missing} typed line(s) never dispatched; " if missing else ""
    loop = CanaryLoop(ctx, threading.Event())
    line = loop.tick() or "nothing due"
    if loop.unrecorded_error:
        # The daemon's loop keeps this for its next tick to record once the store takes writes;
        # this process has no next tick: the error is the tick's, and its exit status says so
        # (it had said "ran", exit 0, over a probe the locked store never let happen).
        raise LoomError(said + loop.unrecorded_error)
    return said + line


def _sentinel(ctx: Context) -> str:
    from loomtui.sentinel.tick import sentinel_tick

    return sentinel_tick(ctx).describe()


def _notify(ctx: Context) -> str:
    from loomtui.telegram.sender import send_due

    try:
        sent, left = asyncio.run(send_due(ctx))
    except LockHeld as exc:
        raise SenderBusy(str(exc)) from None
    return f"sent {sent}, {left} still pending"


RUNNERS = {"watchdog": _watchdog, "canary": _canary, "sentinel": _sentinel, "notify": _notify}


def dump_looks(looks: Any) -> dict[str, Any]:
    out = dataclasses.asdict(looks)
    out["alerted"] = sorted(out.get("alerted") or ())
    return out


def load_looks(ctx: Context, cls: type) -> Any:
    raw = ctx.store.get_meta(ctx.store.agent_key(LOOKS_KEY))
    try:
        data = json.loads(raw) if raw else {}
        names = {f.name for f in dataclasses.fields(cls)}
        data = {k: v for k, v in data.items() if k in names}
        if "alerted" in data:
            data["alerted"] = frozenset(data["alerted"])
        return cls(**data)
    except (ValueError, TypeError, AttributeError):  # AttributeError: JSON that is no object (a list)
        return cls()  # what earlier ticks saw is lost: a trigger is only delayed, never invented
