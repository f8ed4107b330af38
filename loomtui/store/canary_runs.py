"""The canary_runs table: one row per probe, its send on both clocks and its result.

Rows come back as sqlite3.Row; canary/runs.py makes its `Probe`s and `ProbeRun`s of them. Reads
take the Store; the writes take the `db` of the caller's `with store.write() as db:`, so a run's
result commits with its ledger event.
"""

from __future__ import annotations

import sqlite3

from loomtui.store.db import Store, inserted


def insert_in(db: sqlite3.Connection, *, nonce: str, source: str, session_id: str | None, launch_seq: int,
              in_grace: bool, sent_at: float, deadline: float, result: str, why: str, agent: str,
              sent_mono: float | None, boot: str | None) -> int:
    cur = db.execute(
        "INSERT INTO canary_runs(nonce, source, session_id, launch_seq, in_grace, sent_at, deadline, result, why,"
        " agent, sent_mono, boot) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (nonce, source, session_id, launch_seq, int(in_grace), sent_at, deadline, result, why, agent, sent_mono,
         boot),
    )
    return inserted(cur)


def launch_seq_in(db: sqlite3.Connection, run_id: int) -> int:
    return db.execute("SELECT launch_seq FROM canary_runs WHERE id = ?", (run_id,)).fetchone()[0]


def unsettled_in(db: sqlite3.Connection, run_id: int, pending: str) -> sqlite3.Row | None:
    """The run's send (sent_at, source, launch_seq, agent) while its result is still `pending`."""
    return db.execute("SELECT sent_at, source, launch_seq, agent FROM canary_runs WHERE id = ? AND result = ?",
                      (run_id, pending)).fetchone()


def launch_has_in(db: sqlite3.Connection, agent: str, launch_seq: int, result: str) -> bool:
    """Whether some run of this launch already has `result` (the first ok of a launch witnesses it)."""
    return db.execute(
        "SELECT 1 FROM canary_runs WHERE agent = ? AND launch_seq = ? AND result = ? LIMIT 1",
        (agent, launch_seq, result)).fetchone() is not None


def settle_in(db: sqlite3.Connection, run_id: int, result: str, ack_at: float | None, latency: float | None,
              why: str) -> None:
    db.execute("UPDATE canary_runs SET result = ?, ack_at = ?, latency = ?, why = ? WHERE id = ?",
               (result, ack_at, latency, why, run_id))


def late_ack_in(db: sqlite3.Connection, run_id: int, miss: str, ack_at: float) -> sqlite3.Row | None:
    """Record the ack of a run already settled as `miss` (it came after the deadline), once: the
    run's (sent_at, source, launch_seq, agent) when this was the first to record it, else None."""
    row = db.execute("SELECT sent_at, source, launch_seq, agent FROM canary_runs WHERE id = ? AND result = ? "
                     "AND ack_at IS NULL", (run_id, miss)).fetchone()
    if row is not None:
        db.execute("UPDATE canary_runs SET ack_at = ?, latency = ? WHERE id = ?",
                   (ack_at, max(0.0, ack_at - row["sent_at"]), run_id))
    return row


# -- reads --------------------------------------------------------------------------------------


def get(store: Store, run_id: int) -> sqlite3.Row | None:
    return store.query_one("SELECT * FROM canary_runs WHERE id = ?", (run_id,))


def sent_of(store: Store, run_id: int) -> sqlite3.Row | None:
    """The run's send on the monotonic clock (sent_mono, boot)."""
    return store.query_one("SELECT sent_mono, boot FROM canary_runs WHERE id = ?", (run_id,))


def result_of(store: Store, run_id: int) -> sqlite3.Row | None:
    return store.query_one("SELECT result FROM canary_runs WHERE id = ?", (run_id,))


def newest(store: Store, agent: str, limit: int) -> list[sqlite3.Row]:
    """The agent's last `limit` runs, newest first, every column."""
    return store.query("SELECT * FROM canary_runs WHERE agent = ? ORDER BY id DESC LIMIT ?", (agent, limit))


def last(store: Store, agent: str) -> sqlite3.Row | None:
    return store.query_one("SELECT * FROM canary_runs WHERE agent = ? ORDER BY id DESC LIMIT 1", (agent,))


def recent_sends(store: Store, agent: str, limit: int) -> list[sqlite3.Row]:
    """The agent's last `limit` runs, newest first: what the canary's rules decide from (canary.runs
    unpacks these columns in this order)."""
    return store.query(
        "SELECT id, nonce, sent_at, result, launch_seq, in_grace, sent_mono, boot, ack_at, deadline FROM canary_runs "
        "WHERE agent = ? "
        "ORDER BY id DESC LIMIT ?",
        (agent, limit),
    )


def recent_with_result(store: Store, agent: str, result: str, limit: int) -> list[sqlite3.Row]:
    """The agent's last `limit` runs with `result`, newest first (in recent_sends' columns)."""
    return store.query(
        "SELECT id, nonce, sent_at, result, launch_seq, in_grace, sent_mono, boot, ack_at, deadline FROM canary_runs "
        "WHERE agent = ? AND result = ? "
        "ORDER BY id DESC LIMIT ?",
        (agent, result, limit),
    )


def with_result(store: Store, agent: str, result: str) -> list[sqlite3.Row]:
    """The agent's runs with `result` (the pending ones, to settle), for their deadlines and nonces."""
    return store.query("SELECT id, nonce, sent_at, sent_mono, boot, deadline FROM canary_runs "
                       "WHERE agent = ? AND result = ?", (agent, result))


def any_with_result(store: Store, agent: str, result: str) -> bool:
    return store.query_one("SELECT 1 FROM canary_runs WHERE agent = ? AND result = ?", (agent, result)) is not None


def last_of_launch(store: Store, agent: str, result: str, launch_seq: int) -> sqlite3.Row | None:
    """The agent's newest run of this launch with `result` (a pending probe worth joining)."""
    return store.query_one("SELECT * FROM canary_runs WHERE agent = ? AND result = ? AND launch_seq = ? "
                           "ORDER BY id DESC LIMIT 1", (agent, result, launch_seq))


def last_settled(store: Store, agent: str, pending: str) -> sqlite3.Row | None:
    """The agent's newest run whose result is not `pending`."""
    return store.query_one("SELECT * FROM canary_runs WHERE agent = ? AND result != ? ORDER BY id DESC LIMIT 1",
                           (agent, pending))


def last_ack(store: Store, agent: str, ok: str) -> sqlite3.Row | None:
    """The agent's newest acked run: ack_at, sent_at, latency."""
    return store.query_one("SELECT ack_at, sent_at, latency FROM canary_runs WHERE result = ? AND agent = ? "
                           "ORDER BY id DESC LIMIT 1", (ok, agent))


def last_ok_latency(store: Store, agent: str) -> sqlite3.Row | None:
    """The agent's newest run with result 'ok': latency, sent_at (for the metrics)."""
    return store.query_one("SELECT latency, sent_at FROM canary_runs WHERE agent = ? AND result = 'ok' "
                           "ORDER BY id DESC LIMIT 1", (agent,))


def counts_by_result(store: Store, agent: str) -> list[sqlite3.Row]:
    """The agent's settled runs by result: a counter's values, so never the pending ones (a run
    counted pending and then ok made the pending count fall, which no counter may)."""
    return store.query("SELECT result, COUNT(*) AS n FROM canary_runs WHERE agent = ? AND result != 'pending' "
                       "GROUP BY result", (agent,))


def first_sent(store: Store, agent: str) -> float | None:
    """When the agent's first probe still kept was sent (wall), None when it never had one."""
    row = store.query_one("SELECT sent_at FROM canary_runs WHERE agent = ? ORDER BY id LIMIT 1", (agent,))
    return float(row["sent_at"]) if row is not None else None


def from_id(store: Store, first: int) -> list[sqlite3.Row]:
    """Every run from id `first` on, oldest first: id, result, launch_seq (the simulator's reading)."""
    return store.query("SELECT id, result, launch_seq FROM canary_runs WHERE id >= ? ORDER BY id", (first,))
