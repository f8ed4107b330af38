"""The ledgers before a salvage, as evidence for the heads checkpointed off the box while they ran.

A salvage (salvage.py) moves the damaged store aside and starts a new chain, whose first event,
`store_salvaged`, names the file it moved. A head checkpointed before it is of that old chain: the
new one, restarted at event 1, never holds it, and `loom ledger verify --remote` failed on it for
good. Such a head is proven against the old file instead: its chain, read read-only from the
genesis for as long as it holds, must reach the head's event with exactly that hash. That proof is
as strong as before the salvage (a forged chain cannot hash to a kept head); a head beyond what the
damaged file still reads cannot be proven, and is said so. Salvages follow one another: an old
file's own first event may name the file before it.

What it proves is that history up to the last head kept before the salvage is intact in that file,
not in the ledger now in use: anyone who can write the store can begin a chain with a salvage of
their own. `loom ledger verify` says so whenever a salvage is crossed, and Loom's own salvage told
the operator when it was made (salvage.py).

Only files in the store's own directory, named as a salvage names them, are read: a first event
written by anyone else never points the proof at another file.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from loomtui.store import ledger, salvage
from loomtui.store.db import DB_NAME, Store

MOVED_NAME = re.compile(re.escape(DB_NAME) + r"\.damaged-[0-9TZ]+(-[0-9]+)?")
MAX_CHAINS = 16  # salvages followed back, at most (each one a damaged store kept as evidence)


@dataclass(frozen=True)
class Chain:
    """One ledger before a salvage: its file, when the salvage started the next, how far it holds."""

    path: Path
    salvaged_at: float
    reads_to: int = 0           # the last event whose chain holds from the genesis
    error: str = ""             # why the file could not be read at all


@dataclass
class Proof:
    chains: list[Chain] = field(default_factory=list)   # newest first
    proven: dict[tuple[int, str], Chain] = field(default_factory=dict)  # each head, the chain that holds it

    def unproven(self, heads: Iterable[tuple[int, str]]) -> list[tuple[int, str]]:
        return [h for h in heads if h not in self.proven]


def _salvaged_from(db: sqlite3.Connection, directory: Path) -> tuple[Path, float] | None:
    """The file the salvage that began this chain moved aside, and when: None if the chain did not
    begin with a salvage, or names no file of this directory."""
    try:
        row = db.execute("SELECT ts, kind, detail FROM ledger WHERE id = 1").fetchone()
    except sqlite3.DatabaseError:
        return None
    if row is None or row[1] != "store_salvaged":
        return None
    try:
        moved = json.loads(row[2]).get("moved_to")
    except (TypeError, ValueError, AttributeError):
        return None
    name = Path(moved).name if isinstance(moved, str) else ""
    path = directory / name
    if not MOVED_NAME.fullmatch(name) or path.is_symlink() or not path.is_file():
        return None  # a link named like one would point the proof at another file
    return path, float(row[0])


def prove(store: Store, heads: Iterable[tuple[int, str]]) -> Proof:
    """Which of `heads` the ledgers before this store's salvages hold (none without a salvage)."""
    wanted: dict[int, set[str]] = {}
    for seq, digest in heads:
        wanted.setdefault(seq, set()).add(digest)
    proof = Proof()
    directory = store.path.parent
    with store.read() as db:
        previous = _salvaged_from(db, directory)
    seen: set[Path] = set()
    while previous is not None and len(proof.chains) < MAX_CHAINS and previous[0] not in seen:
        path, salvaged_at = previous
        seen.add(path)
        try:
            old = salvage.open_evidence(path)
        except sqlite3.Error as exc:
            proof.chains.append(Chain(path, salvaged_at, error=str(exc)))
            break
        try:
            reads_to, held = 0, []
            for seq, digest in ledger.intact(old):
                reads_to = seq
                if digest in wanted.get(seq, ()):
                    held.append((seq, digest))
            chain = Chain(path, salvaged_at, reads_to)
            proof.proven.update((head, chain) for head in held)
            proof.chains.append(chain)
            previous = _salvaged_from(old, directory)
        finally:
            old.close()
    return proof
