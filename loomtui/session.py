"""The pinned session id: the one conversation a resume may continue (never "most recent")."""

from __future__ import annotations

import sqlite3

from .store import Store

KEY = "pinned_session"


def pinned(store: Store) -> str | None:
    return store.get_meta(KEY)


def pin_in(db: sqlite3.Connection, session_id: str) -> None:
    db.execute(
        "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (KEY, session_id),
    )
