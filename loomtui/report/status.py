"""One snapshot of everything `loom status` and the console header show."""

from __future__ import annotations

import time
from typing import Any

from loomtui.agent import launches, recovery
from loomtui.agent.driver import TmuxDriver
from loomtui.canary import runs as canary
from loomtui.context import Context
from loomtui.sentinel import queue as sentinel_queue
from loomtui.store import ledger, outbox, session
from loomtui.telegram import state as telegram_state


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
        "agent": agent(ctx),
        "canary": _canary(ctx, now),
        "queue": sentinel_queue.counts(store),
        "hold": recovery.held(ctx),
        "last_launch": launches.last_launch(ctx),
    }


def agent(ctx: Context) -> dict[str, Any]:
    """One bounded look at the pane: tmux up/gone/unknown, and the agent and poller in its tree."""
    facts = TmuxDriver(ctx.config).observe()
    out: dict[str, Any] = {"tmux": facts.tmux, "why": facts.why}
    if facts.pane is not None:
        out.update(pane_pid=facts.pane.pane_pid, dead=facts.pane.dead, exit_status=facts.pane.dead_status)
    if facts.tree is not None:
        out.update(process=facts.tree.agent, pid=facts.tree.agent_pid, poller=facts.tree.poller)
    return out


def _canary(ctx: Context, now: float) -> dict[str, Any] | None:
    last = canary.last_probe(ctx)
    if last is None:
        return None
    return {"result": last.result, "age": now - last.sent_at, "latency": last.latency, "why": last.why}
