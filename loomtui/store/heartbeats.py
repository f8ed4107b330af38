"""The heartbeats table: one row per beating loop (the supervisor's), its time, pid and detail."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from loomtui import clock

if TYPE_CHECKING:
    from loomtui.store.db import Store


def beat(store: Store, name: str, detail: dict[str, Any] | None = None, now: float | None = None) -> None:
    with store.write() as db:
        db.execute(
            "INSERT INTO heartbeats(name, ts, pid, detail) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(name) DO UPDATE SET ts = excluded.ts, pid = excluded.pid, detail = excluded.detail",
            (name, clock.wall() if now is None else now, os.getpid(), json.dumps(detail or {})),
        )


def read(store: Store) -> dict[str, dict[str, Any]]:
    """Every beat by name: ts, pid and detail."""
    out = {}
    for row in store.query("SELECT name, ts, pid, detail FROM heartbeats"):
        out[row["name"]] = {"ts": row["ts"], "pid": row["pid"], "detail": json.loads(row["detail"])}
    return out
