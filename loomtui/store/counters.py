"""The loops' own counters (the loop KPIs), kept in the store so they survive restarts.

A counter is a name, a set of labels and a value; a histogram is kept as its Prometheus
parts (`_bucket` with `le`, `_sum`, `_count`). Hot paths (a tick every second) add into a
`Tally` in memory and flush it in one transaction now and then; rare events bump the store
directly, in the transaction of the change they count.
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from loomtui.store.db import Store

# Tick durations: a fast tick is milliseconds, a relaunch or a resume check tens of seconds.
TICK_BUCKETS = (0.005, 0.025, 0.1, 0.5, 2.5, 10.0, 60.0, math.inf)
# From a line typed to the prompt that carried it: a second when the CLI is idle, a turn's length
# when it queued the line behind one.
DISPATCH_BUCKETS = (0.25, 1.0, 2.5, 5.0, 15.0, 60.0, 300.0, 1800.0, math.inf)


def _labels(labels: dict[str, str]) -> str:
    return json.dumps({k: str(v) for k, v in labels.items()}, sort_keys=True, separators=(",", ":"))


def bump_in(db: sqlite3.Connection, name: str, labels: dict[str, str], by: float = 1.0) -> None:
    db.execute(
        "INSERT INTO counters(name, labels, value) VALUES (?, ?, ?) "
        "ON CONFLICT(name, labels) DO UPDATE SET value = value + excluded.value",
        (name, _labels(labels), by),
    )


def bump(store: Store, name: str, labels: dict[str, str], by: float = 1.0) -> None:
    with store.write() as db:
        bump_in(db, name, labels, by)


def observe_in(db: sqlite3.Connection, name: str, labels: dict[str, str], value: float,
               buckets: Iterable[float]) -> None:
    """A histogram observation in the caller's transaction (Tally.observe's parts)."""
    for bound in buckets:
        bump_in(db, f"{name}_bucket", {**labels, "le": le(bound)}, 1.0 if value <= bound else 0.0)
    bump_in(db, f"{name}_sum", labels, value)
    bump_in(db, f"{name}_count", labels)


@dataclass(frozen=True)
class Counter:
    name: str
    labels: dict[str, str]
    value: float


def read(store: Store, prefix: str = "") -> list[Counter]:
    rows = store.query("SELECT name, labels, value FROM counters WHERE name LIKE ? ORDER BY name, labels",
                       (prefix + "%",))
    return [Counter(r["name"], json.loads(r["labels"]), float(r["value"])) for r in rows]


def le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(bound)


class Tally:
    """Counts in memory, flushed to the store in one transaction (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], float] = {}

    def add(self, name: str, labels: dict[str, str], by: float = 1.0) -> None:
        key = (name, _labels(labels))
        with self._lock:
            self._pending[key] = self._pending.get(key, 0.0) + by

    def observe(self, name: str, labels: dict[str, str], value: float,
                buckets: Iterable[float] = TICK_BUCKETS) -> None:
        """A histogram observation: cumulative buckets, sum and count, as Prometheus keeps them."""
        for bound in buckets:
            if value <= bound:
                self.add(f"{name}_bucket", {**labels, "le": le(bound)})
            else:
                self.add(f"{name}_bucket", {**labels, "le": le(bound)}, 0.0)
        self.add(f"{name}_sum", labels, value)
        self.add(f"{name}_count", labels)

    def flush(self, store: Store) -> int:
        """Write what was counted; on a store error the counts stay for the next flush."""
        with self._lock:
            pending, self._pending = self._pending, {}
        if not pending:
            return 0
        try:
            with store.write() as db:
                for (name, labels), by in pending.items():
                    db.execute(
                        "INSERT INTO counters(name, labels, value) VALUES (?, ?, ?) "
                        "ON CONFLICT(name, labels) DO UPDATE SET value = value + excluded.value",
                        (name, labels, by),
                    )
        except Exception:
            with self._lock:
                for key, by in pending.items():
                    self._pending[key] = self._pending.get(key, 0.0) + by
            raise
        return len(pending)
