"""A corrupt or truncated store, met by the daemon: keep the old file, start a new one, carry over
what can still be read, and tell the operator. Never a crash loop.

A daemon that exits because its store is damaged gets restarted by its service manager, fails
again, and leaves the agent unsupervised and the operator uninformed. Instead `loom supervise`
moves the damaged file aside (it is evidence, never deleted), opens a fresh store, copies the
rows that still read (the pinned session first: resuming a stranger is worse than starting
fresh), starts a new ledger chain whose first event names the old file and how far its chain
could be read, and queues one message for the operator. The CLI and the console only report a
damaged store; they never move it.
"""

from __future__ import annotations

import datetime as dt
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from . import ledger, outbox
from .errors import StoreError
from .store import DB_NAME, Store

# Rows worth carrying over, newest first where a table can be long. The ledger is not copied
# row by row (a partial chain would not verify); its readable head is named instead.
CARRY = {
    "meta": "SELECT * FROM meta WHERE key != 'ledger_head'",
    "queue_items": "SELECT * FROM queue_items WHERE state != 'witnessed'",
    "outbox": "SELECT * FROM outbox WHERE state = 'pending' ORDER BY id",
    "job_runs": "SELECT * FROM job_runs ORDER BY id DESC LIMIT 2000",
    "scan_offsets": "SELECT * FROM scan_offsets",
    "canary_runs": "SELECT * FROM canary_runs ORDER BY id DESC LIMIT 500",
}
DAMAGE = ("malformed", "not a database", "file is encrypted", "database corrupt", "unsupported file format")


@dataclass
class Salvage:
    moved_to: Path
    copied: dict[str, int] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    ledger_events: int = 0
    ledger_head: str | None = None

    def summary(self) -> str:
        kept = ", ".join(f"{n} {t}" for t, n in self.copied.items() if n) or "nothing"
        return (f"Loom found its store damaged and started a new one. The old file is kept at {self.moved_to}. "
                f"Carried over: {kept}. The old ledger could be read for {self.ledger_events} events.")


def is_damage(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(marker in text for marker in DAMAGE)


def open_checked(state_dir: Path) -> Store:
    """Open the store and prove its pages read; raises StoreError naming the damage."""
    store = Store.in_dir(state_dir)
    try:
        verdict = str(store.query_one("PRAGMA quick_check")[0])
    except sqlite3.DatabaseError as exc:
        store.close()
        raise StoreError(f"store {store.path} is unusable: {exc}") from None
    if verdict != "ok":
        store.close()
        raise StoreError(f"store {store.path} is unusable: database disk image is malformed ({verdict[:200]})")
    return store


def open_or_salvage(state_dir: Path) -> tuple[Store, Salvage | None]:
    try:
        return open_checked(state_dir), None
    except StoreError as exc:
        if not is_damage(exc):
            raise
    salvage = _move_aside(state_dir)
    store = Store.in_dir(state_dir)
    _carry_over(salvage, store)
    with store.write() as db:
        ledger.append_in(db, "store_salvaged", source="supervisor", cause="store_damaged", detail={
            "moved_to": str(salvage.moved_to), "copied": salvage.copied, "unreadable": salvage.unreadable,
            "old_ledger_events": salvage.ledger_events, "old_ledger_head": salvage.ledger_head,
        })
        outbox.enqueue(db, salvage.summary(), dedupe_key=f"salvage-{salvage.moved_to.name}")
    return store, salvage


def _move_aside(state_dir: Path) -> Salvage:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    target = state_dir / f"{DB_NAME}.damaged-{stamp}"
    db = state_dir / DB_NAME
    os.replace(db, target)
    for suffix in ("-wal", "-shm"):
        side = state_dir / f"{DB_NAME}{suffix}"
        if side.exists():
            os.replace(side, state_dir / f"{target.name}{suffix}")
    return Salvage(target)


def _carry_over(salvage: Salvage, store: Store) -> None:
    try:
        old = sqlite3.connect(f"file:{salvage.moved_to}?mode=ro", uri=True, timeout=5)
        old.row_factory = sqlite3.Row
    except sqlite3.Error as exc:
        salvage.unreadable["*"] = str(exc)
        return
    try:
        salvage.ledger_events, salvage.ledger_head = _readable_chain(old)
        for table, sql in CARRY.items():
            _copy(old, store, table, sql, salvage)
    finally:
        old.close()


def _readable_chain(old: sqlite3.Connection) -> tuple[int, str | None]:
    count, head = 0, None
    try:
        for row in old.execute("SELECT id, hash FROM ledger ORDER BY id"):
            count, head = row[0], row[1]
    except sqlite3.DatabaseError:
        pass  # as far as it reads
    return count, head


def _copy(old: sqlite3.Connection, store: Store, table: str, sql: str, salvage: Salvage) -> None:
    rows: list[sqlite3.Row] = []
    try:
        for row in old.execute(sql):
            rows.append(row)
    except sqlite3.DatabaseError as exc:
        salvage.unreadable[table] = str(exc)
    if not rows:
        salvage.copied[table] = 0
        return
    new_columns = {r[1] for r in store.query(f"PRAGMA table_info({table})")}
    columns = [c for c in rows[0].keys() if c in new_columns]
    marks = ",".join("?" * len(columns))
    copied = 0
    with store.write() as db:
        for row in rows:
            try:
                db.execute(f"INSERT OR REPLACE INTO {table} ({','.join(columns)}) VALUES ({marks})",
                           tuple(row[c] for c in columns))
                copied += 1
            except sqlite3.Error as exc:
                salvage.unreadable[table] = str(exc)
    salvage.copied[table] = copied
