"""The queue_items table: the sentinel's failures, one row per (job, kind, signature) while live.

Rows come back as sqlite3.Row, every column (sentinel/queue.py makes its `Item`s of them). Reads
take the Store; the writes take the `db` of the caller's `with store.write() as db:`, so an
item's change commits with its ledger event. `agent`, where a read takes it, narrows the rows
to the agent whose nudges they are; None reads every agent's.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from loomtui.states import CLAIMED, LIVE, OPEN, RETIRED, WITNESSED
from loomtui.store.db import Store, inserted


def _of(agent: str | None) -> tuple[str, tuple[Any, ...]]:
    return ("agent = ? AND ", (agent,)) if agent is not None else ("", ())


# -- inside a transaction --------------------------------------------------------------------------


def get_in(db: sqlite3.Connection, item_id: int) -> sqlite3.Row | None:
    return db.execute("SELECT * FROM queue_items WHERE id = ?", (item_id,)).fetchone()


def live_in(db: sqlite3.Connection, job: str) -> list[sqlite3.Row]:
    """The job's open and claimed items (what a new failure deduplicates into)."""
    return db.execute("SELECT * FROM queue_items WHERE job = ? AND state IN (?, ?)", (job, *LIVE)).fetchall()


def retire_in(db: sqlite3.Connection, item_id: int, now: float) -> None:
    db.execute("UPDATE queue_items SET state = ?, retired_at = ? WHERE id = ? AND state IN (?, ?)",
               (RETIRED, now, item_id, *LIVE))


def insert_in(db: sqlite3.Connection, *, job: str, kind: str, signature: str, sample: str, log: str, now: float,
              count: int, agent: str) -> sqlite3.Row:
    """A new open item, first and last seen `now`; the row as stored."""
    cur = db.execute(
        "INSERT INTO queue_items(job, kind, signature, sample, log, first_seen, last_seen, count, agent) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (job, kind, signature, sample, log, now, now, count, agent),
    )
    row = get_in(db, inserted(cur))
    if row is None:
        raise sqlite3.DatabaseError("a queue item inserted could not be read back")
    return row


def rename_job_in(db: sqlite3.Connection, old: str, new: str) -> None:
    """Job `old`'s live items are job `new`'s now (the job renamed); witnessed ones keep the name
    they were witnessed under."""
    db.execute("UPDATE queue_items SET job = ? WHERE job = ? AND state IN (?, ?)", (new, old, *LIVE))


def update_in(db: sqlite3.Connection, item_id: int, values: dict[str, Any]) -> None:
    """Set these columns of the item (the names are the caller's, from `Item`'s fields, never input)."""
    sets = ", ".join(f"{name} = ?" for name in values)
    db.execute(f"UPDATE queue_items SET {sets} WHERE id = ?", (*values.values(), item_id))


def nudged_in(db: sqlite3.Connection, item_id: int, now: float) -> None:
    db.execute("UPDATE queue_items SET nudges = nudges + 1, last_nudge_at = ? WHERE id = ?", (now, item_id))


def escalated_at_in(db: sqlite3.Connection, item_id: int) -> sqlite3.Row | None:
    """The item's escalated_at (None inside: not escalated yet) and its state, or None: no such item."""
    return db.execute("SELECT escalated_at, state FROM queue_items WHERE id = ?", (item_id,)).fetchone()


def escalate_in(db: sqlite3.Connection, item_id: int, now: float) -> None:
    db.execute("UPDATE queue_items SET escalated_at = ? WHERE id = ?", (now, item_id))


# -- reads -----------------------------------------------------------------------------------------


def get(store: Store, item_id: int) -> sqlite3.Row | None:
    return store.query_one("SELECT * FROM queue_items WHERE id = ?", (item_id,))


def unwitnessed(store: Store, agent: str | None = None) -> list[sqlite3.Row]:
    """Open and claimed items (the live ones: not witnessed, not retired), oldest first."""
    where, params = _of(agent)
    return store.query(f"SELECT * FROM queue_items WHERE {where}state IN (?, ?) ORDER BY id", (*params, *LIVE))


def last_witnessed(store: Store, limit: int, agent: str | None = None) -> list[sqlite3.Row]:
    """The `limit` most recently witnessed items, newest first."""
    where, params = _of(agent)
    return store.query(f"SELECT * FROM queue_items WHERE {where}state = ? ORDER BY witnessed_at DESC, id DESC "
                       "LIMIT ?", (*params, WITNESSED, limit))


def opened(store: Store) -> list[sqlite3.Row]:
    """Every open item, oldest first."""
    return store.query("SELECT * FROM queue_items WHERE state = ? ORDER BY id", (OPEN,))


def counts(store: Store, agent: str | None = None) -> dict[str, int]:
    """Items by state, every state named (0 when none); retired ones are not counted."""
    where, params = _of(agent)
    out = {OPEN: 0, CLAIMED: 0, WITNESSED: 0}
    for row in store.query(f"SELECT state, COUNT(*) FROM queue_items WHERE {where}state IN (?, ?, ?) GROUP BY state",
                           (*params, *out)):
        out[row[0]] = row[1]
    return out


def spans(store: Store, agent: str, since: float) -> list[sqlite3.Row]:
    """The agent's items live now or witnessed since `since`: first_seen, witnessed_at."""
    return store.query("SELECT first_seen, witnessed_at FROM queue_items WHERE agent = ? AND (state IN (?, ?) "
                       "OR witnessed_at >= ?)", (agent, *LIVE, since))
