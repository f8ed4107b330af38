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
from loomtui.store import ledger, queue_items
from loomtui.store.db import Store

MAX_NOTE = 2000
_FIELDS = [f.name for f in dataclasses.fields(Item)]
_MUTABLE = [f for f in _FIELDS if f not in ("id", "job", "kind", "signature", "first_seen", "agent")]


def from_row(row: sqlite3.Row) -> Item:
    # The row's columns by name once (a Row's lookup by name compares the column names one by one).
    columns = dict(zip(row.keys(), row))
    return Item(**{name: columns[name] for name in _FIELDS})


def as_dict(item: Item) -> dict[str, Any]:
    return dataclasses.asdict(item)


def live(db: sqlite3.Connection, job: str) -> dict[tuple[str, str], Item]:
    """The job's items that a new failure deduplicates into: open or claimed, keyed by (kind, signature)."""
    return {(r["kind"], r["signature"]): from_row(r) for r in queue_items.live_in(db, job)}


def insert(db: sqlite3.Connection, failure: Failure, log: str, now: float, *, source: str = "sentinel",
           agent: str = MAIN_AGENT) -> Item:
    """A new item for `agent`, the agent the failing job hands its failures to."""
    item = from_row(queue_items.insert_in(db, job=failure.job, kind=failure.kind, signature=failure.signature,
                                          sample=failure.sample, log=log, now=now, count=failure.count, agent=agent))
    ledger.append_in(db, "queue_new", source=source, ts=now, agent=agent,
                     detail={"item": item.id, "job": item.job, "kind": item.kind, "count": item.count})
    return item


def save(db: sqlite3.Connection, item: Item) -> None:
    queue_items.update_in(db, item.id, {name: getattr(item, name) for name in _MUTABLE})


def get(store: Store, item_id: int) -> Item | None:
    row = queue_items.get(store, item_id)
    return from_row(row) if row else None


def listing(store: Store, *, include_witnessed: int = 10) -> list[Item]:
    """Open and claimed items, oldest first, then the most recently witnessed few."""
    live_rows = queue_items.unwitnessed(store)
    done = queue_items.last_witnessed(store, max(0, include_witnessed))
    return [from_row(r) for r in live_rows] + [from_row(r) for r in reversed(done)]


def open_items(store: Store) -> list[Item]:
    return [from_row(r) for r in queue_items.opened(store)]


def unresolved_items(store: Store) -> list[Item]:
    """Open and claimed items: claimed ones are not done until a clean run witnesses them."""
    return [from_row(r) for r in queue_items.unwitnessed(store)]


def counts(store: Store) -> dict[str, int]:
    return queue_items.counts(store)


# -- resolve: the claim ------------------------------------------------------------------


def claimer_session(environ: dict[str, str] | None = None) -> str | None:
    """The agent runs with LOOM_SESSION_ID set: a claim made from its shell names its session."""
    env = os.environ if environ is None else environ
    return env.get("LOOM_SESSION_ID") or None
