"""One snapshot of everything `loom status` and the console header show."""

from __future__ import annotations

import time
from typing import Any

from . import ledger, outbox, session
from .context import Context
from .telegram import state as telegram_state


def gather(ctx: Context, *, events: int = 5, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    store = ctx.store
    beats = store.heartbeats()
    sup = beats.get("supervisor")
    return {
        "state_dir": str(ctx.state_dir),
        "config": str(ctx.config_path) if ctx.config_path else None,
        "pinned_session": session.pinned(store),
        "ledger": {"events": ledger.count(store)},
        "supervisor": {
            "heartbeat_age": (now - sup["ts"]) if sup else None,
            "pid": sup["pid"] if sup else None,
        },
        "heartbeats": {name: {"age": now - b["ts"], "pid": b["pid"]} for name, b in beats.items()},
        "last_events": [e.as_dict() for e in ledger.tail(store, events)],
        "telegram": {
            "outbox": outbox.summary(store, now),
            "conflict": telegram_state.conflict(store),
        },
    }
