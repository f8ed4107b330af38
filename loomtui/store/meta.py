"""The meta table: small named values (the ledger's head, the pinned session, a hold, Telegram's
offset), read and written inside the caller's transaction. `Store.get_meta`/`set_meta` are the
same outside one."""

from __future__ import annotations

import sqlite3

UPSERT = "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value"


def get_in(db: sqlite3.Connection, key: str) -> str | None:
    row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return row[0] if row else None


def set_in(db: sqlite3.Connection, key: str, value: str) -> None:
    db.execute(UPSERT, (key, value))


def delete_in(db: sqlite3.Connection, key: str) -> bool:
    """Whether there was a value to delete."""
    return db.execute("DELETE FROM meta WHERE key = ?", (key,)).rowcount > 0
