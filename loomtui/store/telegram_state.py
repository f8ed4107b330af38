"""What the Telegram loops keep in the store's meta table, readable without python-telegram-bot."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from loomtui.store import meta
from loomtui.store.db import Store

OFFSET_KEY = "telegram_update_offset"
CONFLICT_KEY = "telegram_conflict"
CONFLICT_TOLD_KEY = "telegram_conflict_told"  # when the operator was last told of a 409 (wall)
CONFLICT_NOTE = "another process polls this token (HTTP 409): Loom receives no commands"


def offset(store: Store) -> int | None:
    value = store.get_meta(OFFSET_KEY)
    return int(value) if value is not None else None


def set_offset_in(db: sqlite3.Connection, value: int) -> None:
    meta.set_in(db, OFFSET_KEY, str(value))


def conflict(store: Store) -> dict[str, Any] | None:
    value = store.get_meta(CONFLICT_KEY)
    return json.loads(value) if value else None


def set_conflict_in(db: sqlite3.Connection, since: float, pid: int) -> None:
    value = json.dumps({"since": since, "pid": pid, "note": CONFLICT_NOTE})
    meta.set_in(db, CONFLICT_KEY, value)


def clear_conflict_in(db: sqlite3.Connection) -> bool:
    return meta.delete_in(db, CONFLICT_KEY)


def conflict_told_in(db: sqlite3.Connection) -> float | None:
    value = meta.get_in(db, CONFLICT_TOLD_KEY)
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def set_conflict_told_in(db: sqlite3.Connection, at: float) -> None:
    meta.set_in(db, CONFLICT_TOLD_KEY, repr(at))


MIGRATED_KEY = "telegram_chat_migrated"  # the operator's group became a supergroup: {"from", "to"}


def migrated_to(store: Store, chat_id: int) -> int | None:
    """The supergroup the operator's group `chat_id` became, as Telegram's own service message
    said (None: it has not, or the config names another chat since)."""
    return _migrated(store.get_meta(MIGRATED_KEY), chat_id)


def migrated_to_in(db: sqlite3.Connection, chat_id: int) -> int | None:
    """`migrated_to`, in the caller's transaction."""
    return _migrated(meta.get_in(db, MIGRATED_KEY), chat_id)


def _migrated(value: str | None, chat_id: int) -> int | None:
    if not value:
        return None
    moved = json.loads(value)
    return int(moved["to"]) if moved.get("from") == chat_id else None


def set_migrated_in(db: sqlite3.Connection, old: int, new: int) -> None:
    meta.set_in(db, MIGRATED_KEY, json.dumps({"from": old, "to": new}))
