"""Migrations that make a table anew keep every row and every column of a store written before."""

from __future__ import annotations

import sqlite3

import pytest

from loomtui.states import RETIRED
from loomtui.store import queue_items
from loomtui.store.db import DB_NAME, Store, _statements
from loomtui.store.migrations import MIGRATIONS

RETIRED_AT = "0018_queue_retired"


def store_before(path, last: str) -> None:
    """A store as a Loom whose last migration was the one before `last` left it."""
    names = [name for name, _ in MIGRATIONS]
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    for name, sql in MIGRATIONS[:names.index(last)]:
        for statement in _statements(sql):
            conn.execute(statement)
        conn.execute("INSERT INTO schema_migrations VALUES (?, 1.0)", (name,))
    conn.execute(f"PRAGMA user_version = {names.index(last)}")
    conn.commit()
    conn.close()


def test_the_queue_made_anew_for_retired_items_keeps_every_row_and_column(tmp_path):
    path = tmp_path / DB_NAME
    store_before(path, RETIRED_AT)
    conn = sqlite3.connect(path)
    columns = [r[1] for r in conn.execute("PRAGMA table_info(queue_items)")]
    rows = []
    for n, state in enumerate(("open", "claimed", "witnessed")):
        values = {c: (f"{c}-{n}" if c in ("job", "kind", "signature", "sample", "log", "claimed_by", "claimed_session",
                                          "note", "agent", "first_seen_boot", "claimed_boot", "reopened_boot")
                      else n * 100 + i) for i, c in enumerate(columns)}
        values["state"] = state
        values["id"] = n + 1
        conn.execute(f"INSERT INTO queue_items ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
                     tuple(values.values()))
        rows.append(values)
    conn.commit()
    conn.close()
    with Store(path) as store:
        assert store.schema_version() == len(MIGRATIONS)
        for values in rows:
            row = queue_items.get(store, values["id"])
            assert row is not None and {c: row[c] for c in values} == values
            assert row["retired_at"] is None
        # Retired allowed now; no longer live, so the same failure opens a new item beside it.
        with store.write() as db:
            queue_items.retire_in(db, 1, 5.0)
            new = queue_items.insert_in(db, job="job-0", kind="kind-0", signature="signature-0", sample="s",
                                        log="l", now=6.0, count=1, agent="agent-0")
        assert (queue_items.get(store, 1)["state"], queue_items.get(store, 1)["retired_at"]) == (RETIRED, 5.0)
        assert [r["id"] for r in queue_items.unwitnessed(store)] == [2, new["id"]]
        with pytest.raises(sqlite3.IntegrityError), store.write() as db:  # two live ones of a key: still refused
            queue_items.insert_in(db, job="job-0", kind="kind-0", signature="signature-0", sample="s",
                                  log="l", now=7.0, count=1, agent="agent-0")
        indexes = {r[1] for r in store.query("PRAGMA index_list(queue_items)")}
        assert {"queue_live", "queue_state"} <= indexes
