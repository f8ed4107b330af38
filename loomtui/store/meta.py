"""The meta table: small named values (the ledger's head, an agent's pinned session and hold, the
sentinel's clock, Telegram's offset). `Store.get_meta`/`set_meta` read and write one on their own;
the `_in` forms do it inside the caller's transaction, with the change the value belongs to."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loomtui.store.db import Store

GET = "SELECT value FROM meta WHERE key = ?"
UPSERT = "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value"


def get(store: Store, key: str) -> str | None:
    row = store.query_one(GET, (key,))
    return row[0] if row else None


def get_in(db: sqlite3.Connection, key: str) -> str | None:
    row = db.execute(GET, (key,)).fetchone()
    return row[0] if row else None


def set_in(db: sqlite3.Connection, key: str, value: str) -> None:
    db.execute(UPSERT, (key, value))


def delete_in(db: sqlite3.Connection, key: str) -> bool:
    """Whether there was a value to delete."""
    return db.execute("DELETE FROM meta WHERE key = ?", (key,)).rowcount > 0
