"""The store's schema, as an ordered list of named forward migrations.

Migrations are named rather than numbered so that features built side by side cannot claim
the same number; each one runs once, inside the transaction that records it. Append only:
never edit or reorder a migration that has shipped.
"""

from __future__ import annotations

MIGRATIONS: list[tuple[str, str]] = [
    (
        "0001_foundation",
        """
        CREATE TABLE meta (
            key   TEXT PRIMARY KEY,
            value TEXT NOT NULL
        );
        CREATE TABLE ledger (
            id        INTEGER PRIMARY KEY,
            ts        REAL    NOT NULL,
            kind      TEXT    NOT NULL,
            source    TEXT    NOT NULL,
            cause     TEXT,
            detail    TEXT    NOT NULL,
            prev_hash TEXT    NOT NULL,
            hash      TEXT    NOT NULL
        );
        CREATE INDEX ledger_kind ON ledger(kind, id);
        CREATE TABLE heartbeats (
            name   TEXT PRIMARY KEY,
            ts     REAL NOT NULL,
            pid    INTEGER NOT NULL,
            detail TEXT NOT NULL DEFAULT '{}'
        );
        """,
    ),
    (
        "0002_outbox",
        """
        CREATE TABLE outbox (
            id                  INTEGER PRIMARY KEY,
            created             REAL    NOT NULL,
            chat_id             INTEGER,
            text                TEXT    NOT NULL,
            dedupe_key          TEXT,
            state               TEXT    NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'sent', 'failed')),
            attempts            INTEGER NOT NULL DEFAULT 0,
            next_attempt        REAL    NOT NULL DEFAULT 0,
            telegram_message_id INTEGER,
            sent                REAL,
            last_error          TEXT
        );
        CREATE UNIQUE INDEX outbox_dedupe ON outbox(dedupe_key) WHERE dedupe_key IS NOT NULL;
        CREATE INDEX outbox_state ON outbox(state, id);
        """,
    ),
]
