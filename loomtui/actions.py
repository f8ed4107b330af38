"""The one actions module: every trigger (ticks, console keys, CLI, Telegram) lowers into these.

Each action takes the locks it needs and records itself in the ledger with its source and
cause; no trigger keeps a private copy of an action.
"""

from __future__ import annotations

from . import launch, locks
from .context import Context
from .driver import TmuxDriver
from .inject import InjectResult
from .inject import inject as _inject

RECYCLE_LOCK_TIMEOUT = 120.0


def inject(ctx: Context, text: str, *, source: str) -> InjectResult:
    return _inject(ctx, text, source=source)


def recycle(
    ctx: Context,
    mode: str,
    *,
    cause: str,
    source: str,
    reason: str | None = None,
    lock_timeout: float | None = RECYCLE_LOCK_TIMEOUT,
    driver: TmuxDriver | None = None,
) -> launch.Outcome:
    """Relaunch under recycle.lock (one relaunch at a time, whoever asks)."""
    with locks.hold(ctx.state_dir, locks.RECYCLE, timeout=lock_timeout):
        return launch.relaunch_locked(ctx, mode, cause=cause, source=source, reason=reason, driver=driver)


def operator_recycle(ctx: Context, mode: str, *, source: str, reason: str | None = None) -> launch.Outcome:
    return recycle(ctx, mode, cause=f"operator_{mode}", source=source, reason=reason)


def canary_now(ctx: Context, *, source: str):
    """Probe now, or join the probe in flight."""
    from . import canary

    return canary.probe(ctx, source=source)


def resolve(ctx: Context, item_id: int, note: str, *, source: str, session_id: str | None = None):
    from . import sentinel_queue

    return sentinel_queue.resolve(ctx, item_id, note, source=source, session_id=session_id)


def queue_summary(ctx: Context, limit: int = 10) -> str:
    from . import sentinel_queue

    items = sentinel_queue.open_items(ctx.store)
    if not items:
        return "queue: nothing open"
    lines = [f"queue: {len(items)} open"]
    for item in items[:limit]:
        lines.append(f"#{item.id} {item.job} [{item.state}] x{item.count}")
    if len(items) > limit:
        lines.append(f"… and {len(items) - limit} more")
    return "\n".join(lines)


class OperatorActions:
    """What the Telegram command mode may do, through the same actions as every trigger."""

    def __init__(self, ctx: Context, source: str = "telegram") -> None:
        self.ctx = ctx
        self.source = source

    def status(self) -> str:
        from . import status as status_mod
        from .telegram.commands import format_status

        return format_status(status_mod.gather(self.ctx, events=0))

    def canary(self) -> str:
        return "canary " + canary_now(self.ctx, source=self.source).describe()

    def recycle(self, mode: str) -> str:
        return operator_recycle(self.ctx, mode, source=self.source, reason="asked over Telegram").describe()

    def queue(self) -> str:
        return queue_summary(self.ctx)
