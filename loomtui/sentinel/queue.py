"""The sentinel queue in the store: items as rows (claims are claims.py, reached through actions).

Every state change commits with its ledger event. Notes are untrusted text: they live in the
row, and the ledger records only their length and digest.
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
from typing import Any

from loomtui.sentinel.queue_rules import CLAIMED, OPEN, WITNESSED, Failure, Item
from loomtui.states import MAIN_AGENT
from loomtui.store import ledger
from loomtui.store.db import Store

MAX_NOTE = 2000
_FIELDS = [f.name for f in dataclasses.fields(Item)]
_MUTABLE = [f for f in _FIELDS if f not in ("id", "job", "kind", "signature", "first_seen", "agent")]


def from_row(row: sqlite3.Row) -> Item:
    return Item(**{name: row[name] for name in _FIELDS})


def as_dict(item: Item) -> dict[str, Any]:
    return dataclasses.asdict(item)


def live(db: sqlite3.Connection, job: str) -> dict[tuple[str, str], Item]:
    """The job's items that a new failure deduplicates into: open or claimed, keyed by (kind, signature)."""
    rows = db.execute("SELECT * FROM queue_items WHERE job = ? AND state != ?", (job, WITNESSED)).fetchall()
    return {(r["kind"], r["signature"]): from_row(r) for r in rows}


def insert(db: sqlite3.Connection, failure: Failure, log: str, now: float, *, source: str = "sentinel",
           agent: str = MAIN_AGENT) -> Item:
    """A new item for `agent`, the agent the failing job hands its failures to."""
    cur = db.execute(
        "INSERT INTO queue_items(job, kind, signature, sample, log, first_seen, last_seen, count, agent) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (failure.job, failure.kind, failure.signature, failure.sample, log, now, now, failure.count, agent),
    )
    item = from_row(db.execute("SELECT * FROM queue_items WHERE id = ?", (cur.lastrowid,)).fetchone())
    ledger.append_in(db, "queue_new", source=source, ts=now, agent=agent,
                     detail={"item": item.id, "job": item.job, "kind": item.kind, "count": item.count})
    return item


def save(db: sqlite3.Connection, item: Item) -> None:
    sets = ", ".join(f"{name} = ?" for name in _MUTABLE)
    db.execute(f"UPDATE queue_items SET {sets} WHERE id = ?", (*(getattr(item, n) for n in _MUTABLE), item.id))


def get(store: Store, item_id: int) -> Item | None:
    row = store.query_one("SELECT * FROM queue_items WHERE id = ?", (item_id,))
    return from_row(row) if row else None


def listing(store: Store, *, include_witnessed: int = 10) -> list[Item]:
    """Open and claimed items, oldest first, then the most recently witnessed few."""
    live_rows = store.query("SELECT * FROM queue_items WHERE state != ? ORDER BY id", (WITNESSED,))
    done = store.query("SELECT * FROM queue_items WHERE state = ? ORDER BY witnessed_at DESC, id DESC LIMIT ?",
                       (WITNESSED, max(0, include_witnessed)))
    return [from_row(r) for r in live_rows] + [from_row(r) for r in reversed(done)]


def open_items(store: Store) -> list[Item]:
    return [from_row(r) for r in store.query("SELECT * FROM queue_items WHERE state = ? ORDER BY id", (OPEN,))]


def unresolved_items(store: Store) -> list[Item]:
    """Open and claimed items: claimed ones are not done until a clean run witnesses them."""
    return [from_row(r) for r in store.query("SELECT * FROM queue_items WHERE state IN (?, ?) ORDER BY id",
                                             (OPEN, CLAIMED))]


def counts(store: Store) -> dict[str, int]:
    out = {OPEN: 0, CLAIMED: 0, WITNESSED: 0}
    for row in store.query("SELECT state, COUNT(*) FROM queue_items GROUP BY state"):
        out[row[0]] = row[1]
    return out


# -- resolve: the claim ------------------------------------------------------------------


def claimer_session(environ: dict[str, str] | None = None) -> str | None:
    """The agent runs with LOOM_SESSION_ID set: a claim made from its shell names its session."""
    env = os.environ if environ is None else environ
    return env.get("LOOM_SESSION_ID") or None
