"""The job_runs table: one row per `loom run-job`, its start on both clocks, its end, its review.

Rows come back as sqlite3.Row. Writes take the `db` of the caller's `with store.write() as db:`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from loomtui.store.db import Store, inserted

_KEEP = object()  # finish_in without an error: the row's error stays as it is


def start_in(db: sqlite3.Connection, *, job: str, started: float, pid: int, pid_started: float | None,
             started_mono: float | None, boot: str | None) -> int:
    """A run that started: its id."""
    return inserted(db.execute("INSERT INTO job_runs(job, started, pid, pid_started, started_mono, boot) "
                               "VALUES (?, ?, ?, ?, ?, ?)", (job, started, pid, pid_started, started_mono, boot)))


def finish_in(db: sqlite3.Connection, run_id: int, *, ended: float, exit_code: int, duration: float,
              failure_lines: int, error: str | None | object = _KEEP, job: str | None = None,
              started: float | None = None) -> int:
    """The run's end; `error` as run-job saw it (without one, what the row says stays). With `job`
    and `started`, only the row that is that run's (a store made anew numbers its runs again).
    How many rows took it."""
    also, more = ("", ()) if job is None else (" AND job = ? AND started = ?", (job, started))
    if error is _KEEP:
        done = db.execute("UPDATE job_runs SET ended = ?, exit_code = ?, duration = ?, failure_lines = ? "
                          "WHERE id = ?" + also, (ended, exit_code, duration, failure_lines, run_id, *more))
    else:
        done = db.execute("UPDATE job_runs SET ended = ?, exit_code = ?, duration = ?, failure_lines = ?, error = ? "
                          "WHERE id = ?" + also, (ended, exit_code, duration, failure_lines, error, run_id, *more))
    return done.rowcount


def died_in(db: sqlite3.Connection, died: Iterable[tuple[float, str, int]]) -> None:
    """Runs whose run-job went away without an end: (ended, error, id) each, unless an end came meanwhile."""
    db.executemany("UPDATE job_runs SET ended = ?, error = ? WHERE id = ? AND ended IS NULL", list(died))


def get_in(db: sqlite3.Connection, run_id: int) -> sqlite3.Row | None:
    """One run, every column, in the caller's transaction."""
    row: sqlite3.Row | None = db.execute("SELECT * FROM job_runs WHERE id = ?", (run_id,)).fetchone()
    return row


def overran_in(db: sqlite3.Connection, run_ids: Iterable[int], at: float) -> None:
    """The sentinel has told of these runs still going past their allowance (once a run)."""
    db.executemany("UPDATE job_runs SET overrun_at = ? WHERE id = ? AND overrun_at IS NULL",
                   [(at, i) for i in run_ids])


def rename_ended_in(db: sqlite3.Connection, old: str, new: str) -> None:
    """Job `old`'s runs that ended and wait to be judged are job `new`'s (the job renamed); one still
    going keeps its name, by which its run-job records its end."""
    db.execute("UPDATE job_runs SET job = ? WHERE job = ? AND reviewed = 0 AND ended IS NOT NULL", (new, old))


def reviewed_in(db: sqlite3.Connection, run_ids: Iterable[int]) -> None:
    """The sentinel has judged these runs."""
    db.executemany("UPDATE job_runs SET reviewed = 1 WHERE id = ?", [(i,) for i in run_ids])


def last_starts_in(db: sqlite3.Connection, until: float) -> dict[str, float]:
    """Each job's latest start at or before `until`."""
    return dict(db.execute("SELECT job, MAX(started) FROM job_runs WHERE started <= ? GROUP BY job",
                           (until,)).fetchall())


def unreviewed(store: Store) -> list[sqlite3.Row]:
    """Runs the sentinel has not judged yet, oldest first, every column."""
    return store.query("SELECT * FROM job_runs WHERE reviewed = 0 ORDER BY id")


def last_of_each(store: Store) -> dict[str, sqlite3.Row]:
    """Each job's latest run, every column, by job."""
    return {r["job"]: r for r in store.query(
        "SELECT r.* FROM job_runs r JOIN (SELECT job, MAX(id) AS id FROM job_runs GROUP BY job) m ON r.id = m.id")}


def last_starts(store: Store, job: str, limit: int = 2) -> list[sqlite3.Row]:
    """The job's last `limit` runs' starts, newest first."""
    return store.query("SELECT started FROM job_runs WHERE job = ? ORDER BY id DESC LIMIT ?", (job, limit))
