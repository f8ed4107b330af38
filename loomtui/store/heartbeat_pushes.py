"""The last beat of each push heartbeat ([[heartbeat]]), kept in meta as `heartbeat_push:NAME`:
when, what it said (ok, fail, skip), why, and whether it went (its error if not). Never the URL."""

from __future__ import annotations

import json
import sqlite3
from typing import TYPE_CHECKING, Any

from loomtui.store import meta

if TYPE_CHECKING:
    from loomtui.store.db import Store

KEY_PREFIX = "heartbeat_push:"


def record_in(db: sqlite3.Connection, name: str, beat: dict[str, Any]) -> None:
    meta.set_in(db, KEY_PREFIX + name, json.dumps(beat))


def last(store: Store, name: str) -> dict[str, Any]:
    """The last beat recorded for `name` ({} if it never beat, or the record is unreadable)."""
    raw = meta.get(store, KEY_PREFIX + name)
    try:
        doc = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}
