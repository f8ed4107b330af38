"""The durable outbox: every message to the operator is a row here before it is a request.

Whoever wants to tell the operator something enqueues a row (in its own transaction, if it has
one, so the message commits with the state change that caused it). One sender delivers rows
in id order and records each delivery in the same transaction as the ledger event, so a
message is never lost to a crash; see README for the one window where it can be sent twice.

A dedupe key is unique for the life of the store, not only while pending: "tell the operator
once about queue item 7" must stay once after the first message went out.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from loomtui import clock, redact
from loomtui.errors import LoomError
from loomtui.states import EventKind
from loomtui.store import counters, ledger
from loomtui.store.db import Store, inserted

PENDING, SENT, FAILED = "pending", "sent", "failed"
# The loop KPI of the notify loop: messages sent, attempts failed, rows given up, duplicates dropped.
NOTIFY, SINK = "loom_notify_total", "telegram"


@dataclass(frozen=True)
class Message:
    id: int
    created: float
    chat_id: int | None
    text: str
    dedupe_key: str | None
    state: str
    attempts: int
    next_attempt: float
    telegram_message_id: int | None
    sent: float | None
    last_error: str | None
    rejections: int = 0  # Telegram's refusals of this very message (400), apart from outages

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Message:
        return cls(**{k: row[k] for k in row.keys()})

    def as_dict(self, *, with_text: bool = True) -> dict[str, Any]:
        out = dict(self.__dict__)
        if not with_text:
            out.pop("text")
        return out


def enqueue(
    store_or_db: Store | sqlite3.Connection,
    text: str,
    *,
    dedupe_key: str | None = None,
    chat_id: int | None = None,
    now: float | None = None,
) -> int:
    """The row id; with a dedupe key already used, the existing row's id and nothing new.

    `chat_id=None` means the operator's chat (`telegram.chat_id`) as configured at send time.
    Pass an open write transaction to commit the message with the change that caused it.
    """
    if not isinstance(text, str) or not text.strip():
        raise LoomError("outbox: refusing an empty message (Telegram rejects them)")
    if isinstance(store_or_db, Store):
        with store_or_db.write() as db:
            return _enqueue_in(db, text, dedupe_key, chat_id, now)
    return _enqueue_in(store_or_db, text, dedupe_key, chat_id, now)


def _enqueue_in(db: sqlite3.Connection, text: str, dedupe_key: str | None, chat_id: int | None,
                now: float | None) -> int:
    if dedupe_key is not None:
        row = db.execute("SELECT id FROM outbox WHERE dedupe_key = ?", (dedupe_key,)).fetchone()
        if row:
            counters.bump_in(db, NOTIFY, {"sink": SINK, "result": "deduplicated"})
            return int(row[0])
    cur = db.execute(
        "INSERT INTO outbox(created, chat_id, text, dedupe_key) VALUES (?, ?, ?, ?)",
        (clock.wall() if now is None else now, chat_id, text, dedupe_key),
    )
    return inserted(cur)


# -- readers (console, status, sender) ---------------------------------------------------


def has_key(store: Store, dedupe_key: str) -> bool:
    """Whether a message with this dedupe key was ever enqueued (pending, sent or failed)."""
    return store.query_one("SELECT 1 FROM outbox WHERE dedupe_key = ?", (dedupe_key,)) is not None


def has_key_in(db: sqlite3.Connection, dedupe_key: str) -> bool:
    """`has_key`, inside the caller's transaction."""
    return db.execute("SELECT 1 FROM outbox WHERE dedupe_key = ?", (dedupe_key,)).fetchone() is not None


def oldest_pending_created(store: Store) -> float | None:
    """When the oldest pending message was enqueued (None: none pending)."""
    row = store.query_one("SELECT MIN(created) FROM outbox WHERE state = 'pending'")
    return row[0] if row else None


def get(store: Store, msg_id: int) -> Message | None:
    row = store.query_one("SELECT * FROM outbox WHERE id = ?", (msg_id,))
    return Message.from_row(row) if row else None


def head(store: Store) -> Message | None:
    """The oldest pending message: the only one the sender may try, so order holds."""
    row = store.query_one("SELECT * FROM outbox WHERE state = 'pending' ORDER BY id LIMIT 1")
    return Message.from_row(row) if row else None


def pending(store: Store, limit: int = 100) -> list[Message]:
    rows = store.query("SELECT * FROM outbox WHERE state = 'pending' ORDER BY id LIMIT ?", (limit,))
    return [Message.from_row(r) for r in rows]


def recent(store: Store, limit: int = 50) -> list[Message]:
    """Newest first, any state."""
    return [Message.from_row(r) for r in store.query("SELECT * FROM outbox ORDER BY id DESC LIMIT ?", (limit,))]


def last_sent_at(store: Store, chat_id: int) -> float | None:
    row = store.query_one(
        "SELECT MAX(sent) FROM outbox WHERE state = 'sent' AND chat_id = ?", (chat_id,)
    )
    return row[0] if row else None


def summary(store: Store, now: float | None = None) -> dict[str, Any]:
    now = clock.wall() if now is None else now
    counts = {PENDING: 0, SENT: 0, FAILED: 0}
    for row in store.query("SELECT state, COUNT(*) FROM outbox GROUP BY state"):
        counts[row[0]] = row[1]
    first = head(store)
    last = store.query_one("SELECT MAX(sent) FROM outbox WHERE state = 'sent'")
    return {
        **counts,
        "oldest_pending_age": (now - first.created) if first else None,
        "attempts": first.attempts if first else 0,
        "last_error": first.last_error if first else None,
        "last_sent_age": (now - last[0]) if last and last[0] is not None else None,
    }


# -- transitions (the sender's) ----------------------------------------------------------


def mark_sent(store: Store, msg_id: int, *, message_id: int, chat_id: int, length: int, truncated: bool,
              now: float | None = None) -> bool:
    """Record a delivery and its ledger event together; False if the row was not pending."""
    when = clock.wall() if now is None else now
    with store.write() as db:
        cur = db.execute(
            "UPDATE outbox SET state = 'sent', telegram_message_id = ?, sent = ?, attempts = attempts + 1, "
            "chat_id = ?, last_error = NULL WHERE id = ? AND state = 'pending'",
            (message_id, when, chat_id, msg_id),
        )
        if cur.rowcount != 1:
            return False
        detail = {"outbox_id": msg_id, "length": length, "message_id": message_id, "truncated": truncated}
        ledger.append_in(db, "telegram_sent", source="telegram", detail=detail, ts=when)
        counters.bump_in(db, NOTIFY, {"sink": SINK, "result": "sent"})
    return True


def defer(store: Store, msg_id: int, *, until: float, error: str, fail: bool = False, rejected: bool = False,
          event: EventKind | None = None, event_detail: dict[str, Any] | None = None) -> None:
    """Count a failed attempt (`rejected`: Telegram refused the message itself); `fail` gives the
    row up (it stays in the store, visible as failed)."""
    error = redact.scrub(error)[:500]
    with store.write() as db:
        db.execute(
            "UPDATE outbox SET attempts = attempts + 1, rejections = rejections + ?, next_attempt = ?, "
            "last_error = ?, state = CASE WHEN ? THEN 'failed' ELSE state END WHERE id = ? AND state = 'pending'",
            (int(rejected), until, error, fail, msg_id),
        )
        # Every attempt that did not deliver; a row given up is counted once more as given_up.
        counters.bump_in(db, NOTIFY, {"sink": SINK, "result": "failed"})
        if fail:
            counters.bump_in(db, NOTIFY, {"sink": SINK, "result": "given_up"})
        if event:
            ledger.append_in(db, event, source="telegram", detail={"outbox_id": msg_id, **(event_detail or {})})


def unsent(store: Store, limit: int = 100) -> list[Message]:
    """Messages that have not reached the operator, given up ones and those still to go, oldest first."""
    rows = store.query("SELECT * FROM outbox WHERE state != 'sent' ORDER BY id LIMIT ?", (limit,))
    return [Message.from_row(r) for r in rows]


def requeue_failed(store: Store, *, source: str) -> list[int]:
    """Give failed rows another go (an operator's decision, e.g. after fixing `telegram.chat_id`):
    their ids, recorded in the ledger with the change."""
    return _failed_rows(store, "UPDATE outbox SET state = 'pending', attempts = 0, rejections = 0, next_attempt = 0 "
                               "WHERE state = 'failed'", "outbox_requeued", source)


def forget_failed(store: Store, *, source: str) -> list[int]:
    """Delete the failed rows (an operator's decision: a chat that will never take them): their
    ids, recorded in the ledger with the deletion. `loom check` warns while any is kept."""
    return _failed_rows(store, "DELETE FROM outbox WHERE state = 'failed'", "outbox_forgotten", source)


SENDING_WITHIN = 24 * 3600.0  # a row sent this recently says a sender works this store


class Sending(LoomError):
    """The outbox shows a sender at work: its pending rows are on their way, not the operator's to read."""


def forget_read(store: Store, *, source: str, now: float) -> list[Message]:
    """Where Telegram is off, delete the pending rows, each returned whole for the caller to show
    (what is deleted is what the operator reads: no row goes unseen, a row added since a listing
    included), recorded in the ledger with the deletion. Refused (Sending) when the outbox shows a
    sender at work (a row sent in the last day, a pending one tried): the config this command read
    is then not the running daemon's."""
    with store.write() as db:
        busy = db.execute("SELECT 1 FROM outbox WHERE (state = 'sent' AND sent > ?) "
                          "OR (state = 'pending' AND attempts > 0) LIMIT 1", (now - SENDING_WITHIN,)).fetchone()
        if busy is not None:
            raise Sending("the outbox shows messages sent or being sent: a running loom sends them "
                          "(its config has a telegram.chat_id); nothing deleted")
        rows = [Message.from_row(r) for r in db.execute("SELECT * FROM outbox WHERE state = 'pending' ORDER BY id")]
        db.execute("DELETE FROM outbox WHERE state = 'pending'")
        if rows:
            ledger.append_in(db, "outbox_forgotten", source=source,
                             detail={"outbox_ids": [m.id for m in rows], "read": True})
        return rows


def _failed_rows(store: Store, change: str, event: EventKind, source: str) -> list[int]:
    """The failed rows' ids, then `change` made to them, and the `event` naming them, at once."""
    with store.write() as db:
        ids = [int(r[0]) for r in db.execute("SELECT id FROM outbox WHERE state = 'failed' ORDER BY id")]
        db.execute(change)
        if ids:
            ledger.append_in(db, event, source=source, detail={"outbox_ids": ids})
        return ids
