"""The scan_offsets table: where the sentinel stopped reading each job's log, and since when it watches.

Rows come back as sqlite3.Row (sentinel/jobscan.py makes its `Watch` of one). Reads and the write
take the `db` of the caller's transaction: a position commits with the queue items its lines made.
"""

from __future__ import annotations

import sqlite3


def get_in(db: sqlite3.Connection, job: str) -> sqlite3.Row | None:
    return db.execute("SELECT * FROM scan_offsets WHERE job = ?", (job,)).fetchone()


def rename_in(db: sqlite3.Connection, old: str, new: str, watch_since: float | None) -> None:
    """The position of job `old` is job `new`'s now (the job renamed, its log the same), watched
    since `watch_since`; the old name kept as the one it was renamed from."""
    db.execute("UPDATE scan_offsets SET job = ?, watch_since = ?, renamed_from = ? WHERE job = ?",
               (new, watch_since, old, old))


def every_in(db: sqlite3.Connection) -> list[sqlite3.Row]:
    return db.execute("SELECT * FROM scan_offsets").fetchall()


def save_in(db: sqlite3.Connection, job: str, *, path: str, dev: int | None, inode: int | None, offset: int,
            carry: bytes, carry_len: int, carry_skip: bool, head: bytes, mtime_ns: int, prev_inode: int | None,
            prev_head: bytes | None, watch_since: float, missed_mark: float | None, updated: float) -> None:
    db.execute(
        "INSERT INTO scan_offsets(job, path, dev, inode, offset, carry, carry_len, carry_skip, head, mtime_ns, "
        "prev_inode, prev_head, watch_since, missed_mark, updated) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT(job) DO UPDATE SET "
        "path = excluded.path, dev = excluded.dev, inode = excluded.inode, offset = excluded.offset, "
        "carry = excluded.carry, carry_len = excluded.carry_len, carry_skip = excluded.carry_skip, "
        "head = excluded.head, mtime_ns = excluded.mtime_ns, prev_inode = excluded.prev_inode, "
        "prev_head = excluded.prev_head, "
        "watch_since = excluded.watch_since, missed_mark = excluded.missed_mark, updated = excluded.updated",
        (job, path, dev, inode, offset, carry, carry_len, int(carry_skip), head, mtime_ns, prev_inode, prev_head,
         watch_since, missed_mark, updated),
    )
