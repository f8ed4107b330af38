"""A corrupt or truncated store, met by the daemon: keep the old file, start a new one, carry over
what can still be read, and tell the operator. Never a crash loop.

A daemon that exits because its store is damaged gets restarted by its service manager, fails
again, and leaves the agent unsupervised and the operator uninformed. Instead `loom supervise`
moves the damaged file aside (it is evidence, never deleted), opens a fresh store, copies the
rows that still read, starts a new ledger chain whose first event names the old file and how
far its chain could be read, and queues one message for the operator. The CLI and the console
only report a damaged store; they never move it.

The pinned session survives every kind of damage: the store's copy when its page reads,
otherwise the sidecar `pinned-session` (see session.py). A truncated file is read as far as it
goes (writable_schema lets SQLite open a file shorter than its header says). An empty `loom.db`
opens as a new database, so it counts as damage when something shows a store was there: the
sidecar, or a write-ahead log that SQLite would otherwise discard.
"""

from __future__ import annotations

import datetime as dt
import os
import sqlite3
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from loomtui.errors import StoreError
from loomtui.store import health, ledger, outbox, session
from loomtui.store.db import DB_NAME, Store, open_lock
from loomtui.store.statedir import create_private_file

# Rows worth carrying over, newest first where a table can be long. The ledger is not copied
# row by row (a partial chain would not verify); its readable head is named instead.
CARRY = {
    "meta": "SELECT * FROM meta WHERE key != 'ledger_head'",
    "queue_items": "SELECT * FROM queue_items WHERE state IN ('open', 'claimed')",
    "outbox": "SELECT * FROM outbox WHERE state != 'sent' ORDER BY id",  # failed ones wait for a requeue
    "job_runs": "SELECT * FROM job_runs ORDER BY id DESC LIMIT 2000",
    "scan_offsets": "SELECT * FROM scan_offsets",
    "canary_runs": "SELECT * FROM canary_runs ORDER BY id DESC LIMIT 500",
}
DAMAGE = health.DAMAGE


@dataclass
class Salvage:
    moved_to: Path
    copied: dict[str, int] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    ledger_events: int = 0
    ledger_head: str | None = None
    pinned_from: str | None = None  # "store", "sidecar", or None: the next relaunch starts fresh
    agents_pinned_from: dict[str, str | None] = field(default_factory=dict)  # the named agents', the same way

    def summary(self) -> str:
        kept = ", ".join(f"{n} {t}" for t, n in self.copied.items() if n) or "nothing"
        pin = (f"The pinned session was kept (from the {self.pinned_from})." if self.pinned_from
               else "No pinned session could be read; the next relaunch starts fresh.")
        others = "".join(f" Agent {name}: " + (f"pinned session kept (from the {where})." if where
                                                 else "no pinned session; its next relaunch starts fresh.")
                         for name, where in sorted(self.agents_pinned_from.items()))
        return (f"Loom found its store damaged and started a new one. The old file is kept at {self.moved_to}. "
                f"Carried over: {kept}. {pin}{others} The old ledger could be read for {self.ledger_events} events.")


def is_damage(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(marker in text for marker in DAMAGE)


def open_checked(state_dir: Path) -> Store:
    """Open the store and prove its pages read; raises StoreError naming the damage.

    Checked before migrating: a damaged file is evidence, and nothing is written into it.
    """
    store = Store.in_dir(state_dir, migrate=False)
    try:
        verdict = str(store.pragma("quick_check"))
        if verdict == "ok":
            store.migrate()
    except sqlite3.DatabaseError as exc:
        store.close()
        raise StoreError(f"store {store.path} is unusable: {exc}") from None
    except BaseException:
        store.close()
        raise
    if verdict != "ok":
        store.close()
        raise StoreError(f"store {store.path} is unusable: database disk image is malformed ({verdict[:200]})")
    return store


def open_or_salvage(state_dir: Path) -> tuple[Store, Salvage | None]:
    if _orphaned_log(state_dir):
        damage = "the file was missing beside its write-ahead log"
    elif _emptied(state_dir):
        damage = "the file is empty"
    else:
        try:
            store = open_checked(state_dir)
        except StoreError as exc:
            if not is_damage(exc):
                raise
            damage = str(exc)
        else:
            session.sync_sidecar(store)
            return store, None
    # No other connection may open the store while its files move, the new one is made and what
    # could be read of the old is copied in: a command that opened it in between (a cron tick, an
    # operator's recycle) wrote into the new store, and the copy then put the old rows, the old pin
    # among them, back over what it wrote. It waits for the salvage, as for any store busy opening.
    with open_lock(state_dir / DB_NAME, exclusive=True):
        salvage = _move_aside(state_dir)
        store = Store.in_dir(state_dir, lock_held=True)
        _carry_over(salvage, store)
        salvage.pinned_from = _carry_pin(store, state_dir)
        for name, directory in _agent_dirs(state_dir):
            own = Store(store.path, migrate=False, agent=name, agent_dir=directory, lock_held=True)
            try:
                salvage.agents_pinned_from[name] = _carry_pin(own, directory)
            finally:
                own.close()
        with store.write() as db:
            ledger.append_in(db, "store_salvaged", source="supervisor", cause="store_damaged", detail={
                "moved_to": str(salvage.moved_to), "damage": damage, "copied": salvage.copied,
                "unreadable": salvage.unreadable, "pinned_from": salvage.pinned_from,
                "old_ledger_events": salvage.ledger_events, "old_ledger_head": salvage.ledger_head,
                **({"agents_pinned_from": salvage.agents_pinned_from} if salvage.agents_pinned_from else {}),
            })
            outbox.enqueue(db, salvage.summary(), dedupe_key=f"salvage-{salvage.moved_to.name}")
    return store, salvage


def _orphaned_log(state_dir: Path) -> bool:
    """No store file, but a log that holds commits (the file removed by hand, or replaced by an
    emptied one): the log is evidence like an emptied file's. An empty file is put in the store's
    place so both are moved aside together, as for an emptied store."""
    db = state_dir / DB_NAME
    if db.exists() or not health.log_holds_commits(db):
        return False
    create_private_file(db)
    return True


def _emptied(state_dir: Path) -> bool:
    try:
        if (state_dir / DB_NAME).stat().st_size:
            return False
    except FileNotFoundError:
        return False  # no store yet, or the operator removed it: a fresh start, nothing to keep
    return health.pins_kept(state_dir) or health.log_holds_commits(state_dir / DB_NAME)


def _agent_dirs(state_dir: Path) -> list[tuple[str, Path]]:
    """The named agents' directories (agents/NAME/), whatever the config says now: a pin is kept
    for every agent that had one."""
    try:
        entries = sorted(os.scandir(state_dir / "agents"), key=lambda e: e.name)
    except OSError:
        return []
    return [(e.name, Path(e.path)) for e in entries if e.is_dir() and ledger.AGENT_NAME.fullmatch(e.name)]


def _carry_pin(store: Store, agent_dir: Path) -> str | None:
    """Where the agent's pin came from ("store", "sidecar"), or None: its next relaunch starts fresh."""
    # The old store's pin, if its page read, is newer than or equal to the sidecar's (see session.py).
    carried = session.pinned(store)
    where = None
    if carried is not None and session.is_session_id(carried):
        where = "store"
    else:
        sid = session.read_sidecar(agent_dir)
        if sid is not None:
            with store.write() as db:
                session.pin_in(db, sid)
            where = "sidecar"
    session.sync_sidecar(store)
    return where


def _move_aside(state_dir: Path) -> Salvage:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    target = state_dir / f"{DB_NAME}.damaged-{stamp}"
    n = 1
    while target.exists():  # evidence is never overwritten, even by a second salvage that second
        target, n = state_dir / f"{DB_NAME}.damaged-{stamp}-{n}", n + 1
    db = state_dir / DB_NAME
    os.replace(db, target)
    for suffix in ("-wal", "-shm"):
        side = state_dir / f"{DB_NAME}{suffix}"
        if side.exists():
            os.replace(side, state_dir / f"{target.name}{suffix}")
    return Salvage(target)


def open_evidence(path: Path) -> sqlite3.Connection:
    """A damaged store moved aside, opened read-only as the salvage reads it (and `loom ledger
    verify` after it: earlier_chains.py); sqlite3.Error when it cannot be."""
    wal = Path(f"{path}-wal")
    # With no log of its own to replay, the file is read as it lies (immutable): no -wal or -shm
    # is created beside the evidence.
    flags = "mode=ro" if wal.exists() and wal.stat().st_size else "mode=ro&immutable=1"
    db = sqlite3.connect(f"file:{urllib.parse.quote(str(path))}?{flags}", uri=True, timeout=5)
    try:
        # Read a truncated file up to where it ends, instead of refusing it whole for being
        # shorter than its header says. The connection is read-only: nothing is written.
        db.execute("PRAGMA writable_schema = ON")
    except sqlite3.Error:
        db.close()
        raise
    return db


def _carry_over(salvage: Salvage, store: Store) -> None:
    if salvage.moved_to.stat().st_size == 0:
        # Nothing to read, and SQLite would delete a log beside an empty file: keep it as it is.
        salvage.unreadable["*"] = "the file is empty"
        return
    try:
        old = open_evidence(salvage.moved_to)
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
