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
