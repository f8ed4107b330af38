"""The heartbeats table: one row per beating loop (the supervisor's), its time, pid and detail."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from loomtui import clock
from loomtui.timing import Instant, raw_age, stored

if TYPE_CHECKING:
    from loomtui.store.db import Store


def beat(store: Store, name: str, detail: dict[str, Any] | None = None, now: float | None = None) -> None:
    """The beat, with the monotonic clock and the boot it was read on beside the wall time (in its
    detail): its age is the monotonic clock's within a boot, which no step of the wall clock moves
    (a beat dated ahead by a clock stepped back read fresh until the clock caught up)."""
    at = clock.now()
    stamp = {"mono": at.mono, "boot": at.boot} if now is None else {}
    with store.write() as db:
        db.execute(
            "INSERT INTO heartbeats(name, ts, pid, detail) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(name) DO UPDATE SET ts = excluded.ts, pid = excluded.pid, detail = excluded.detail",
            (name, at.wall if now is None else now, os.getpid(), json.dumps({**(detail or {}), **stamp})),
        )


def age(beat: dict[str, Any], now: Instant) -> float:
    """How old a beat `read` gave is at `now` (negative: dated ahead by a step of the wall clock).
    A beat of another boot is at least as old as this boot (the monotonic clock counts from it):
    its writer went with that boot, whatever the wall clock, set back at the restart, says."""
    detail = beat.get("detail")
    kept = detail if isinstance(detail, dict) else {}
    then = stored(beat["ts"], kept.get("mono"), kept.get("boot"))
    seconds = raw_age(then, now)
    if then.boot is not None and now.boot is not None and then.boot != now.boot and now.mono is not None:
        return max(seconds, now.mono)
    return seconds


def read(store: Store) -> dict[str, dict[str, Any]]:
    """Every beat by name: ts, pid and detail (a detail that is no JSON object reads as empty: the
    row is the store's, which the agent's user can write; `loom check` died of one with a traceback)."""
    out = {}
    for row in store.query("SELECT name, ts, pid, detail FROM heartbeats"):
        try:
            detail = json.loads(row["detail"])
        except (TypeError, ValueError):
            detail = {}
        out[row["name"]] = {"ts": row["ts"], "pid": row["pid"], "detail": detail if isinstance(detail, dict) else {}}
    return out
