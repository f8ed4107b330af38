"""The ledger: append-only, hash-chained events. Every action, every acting decision.

Each event's hash is sha256(previous hash + canonical JSON of its own fields, id included),
so an edit, a deletion or a reordering breaks the chain at a nameable event. An event of the
agent `main` hashes as events did before agents had names (so an old chain still verifies);
any other agent's name is hashed with its event. The head
(last id and hash) is kept beside the chain, written in the same transaction, so losing
events from the end is caught too.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from loomtui import clock, redact
from loomtui.states import AGENT_NAME_PATTERN, EVENT_KINDS, MAIN_AGENT, EventKind
from loomtui.store import meta
from loomtui.store.db import Store

GENESIS = "0" * 64
HEAD_KEY = "ledger_head"
MAIN = MAIN_AGENT  # the agent of a single-agent setup, and of every event written before names
AGENT_NAME = re.compile(AGENT_NAME_PATTERN)


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def event_hash(prev_hash: str, id: int, ts: float, kind: str, source: str, cause: str | None, detail: str,
               agent: str = MAIN) -> str:
    fields = {"id": id, "ts": ts, "kind": kind, "source": source, "cause": cause, "detail": detail}
    if agent != MAIN:
        fields["agent"] = agent
    body = canonical(fields)
    import hashlib  # here: reads (loom status, over ssh for `loom hosts`) hash nothing

    return hashlib.sha256((prev_hash + body).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Event:
    id: int
    ts: float
    kind: str
    source: str
    cause: str | None
    detail: dict[str, Any] = field(default_factory=dict)
    hash: str = ""
    agent: str = MAIN

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Event:
        try:
            detail = json.loads(row["detail"])
        except (TypeError, ValueError):
            detail = {"unparsed": str(row["detail"])}
        if not isinstance(detail, dict):
            detail = {"value": detail}
        return cls(row["id"], row["ts"], row["kind"], row["source"], row["cause"], detail, row["hash"],
                   row["agent"])

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "ts": self.ts,
            "kind": self.kind,
            "source": self.source,
            "cause": self.cause,
            "detail": self.detail,
            "hash": self.hash,
            "agent": self.agent,
        }


def append_in(
    db: sqlite3.Connection,
    kind: EventKind,
    *,
    source: str,
    cause: str | None = None,
    detail: dict[str, Any] | None = None,
    ts: float | None = None,
    agent: str | None = None,
) -> Event:
    """Append inside an open write transaction (so an event commits with the state it describes).

    The event belongs to `agent`, or to the agent whose store the connection came from."""
    agent = getattr(db, "agent", MAIN) if agent is None else agent
    if kind not in EVENT_KINDS:
        raise ValueError(f"unknown ledger event kind {kind!r}: every kind is named in states.EventKind")
    if not AGENT_NAME.fullmatch(agent):
        raise ValueError(f"bad agent name {agent!r}: expected [a-z0-9][a-z0-9-]{{0,31}}")
    detail_json = redact.scrub(canonical(detail or {}))
    head = meta.get_in(db, HEAD_KEY)
    if head is not None:
        last = json.loads(head)
        prev_id, prev_hash = int(last["id"]), str(last["hash"])
    else:
        prev_id, prev_hash = 0, GENESIS
    new_id = prev_id + 1
    when = clock.wall() if ts is None else float(ts)
    digest = event_hash(prev_hash, new_id, when, kind, source, cause, detail_json, agent)
    db.execute(
        "INSERT INTO ledger(id, ts, kind, source, cause, detail, prev_hash, hash, agent)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (new_id, when, kind, source, cause, detail_json, prev_hash, digest, agent),
    )
    meta.set_in(db, HEAD_KEY, canonical({"id": new_id, "hash": digest}))
    return Event(new_id, when, kind, source, cause, json.loads(detail_json), digest, agent)


def append(
    store: Store,
    kind: EventKind,
    *,
    source: str,
    cause: str | None = None,
    detail: dict[str, Any] | None = None,
    ts: float | None = None,
    agent: str | None = None,
) -> Event:
    with store.write() as db:
        return append_in(db, kind, source=source, cause=cause, detail=detail, ts=ts, agent=agent)


@dataclass(frozen=True)
class Verdict:
    ok: bool
    count: int
    bad_id: int | None = None
    reason: str = ""

    def describe(self) -> str:
        if self.ok:
            return f"ledger intact: {self.count} events"
        return f"ledger broken at event {self.bad_id}: {self.reason}"


HEAD_FORM = re.compile(r"(\d{1,19}):([0-9a-f]{64})")


def head(store: Store) -> tuple[int, str]:
    """The newest event's id and hash (0 and the genesis hash for an empty ledger): the whole
    store's, as there is one chain for every agent. Kept off the machine, it pins the history."""
    row = store.query_one("SELECT id, hash FROM ledger ORDER BY id DESC LIMIT 1")
    return (int(row[0]), str(row[1])) if row else (0, GENESIS)


def head_in(db: sqlite3.Connection) -> tuple[int, str]:
    """`head`, inside a transaction that is about to tell the operator something."""
    row = db.execute("SELECT id, hash FROM ledger ORDER BY id DESC LIMIT 1").fetchone()
    return (int(row[0]), str(row[1])) if row else (0, GENESIS)


def format_head(seq: int, digest: str) -> str:
    return f"{seq}:{digest}"


def parse_head(text: str) -> tuple[int, str]:
    """`SEQ:HASH` as `loom ledger head` prints it; ValueError naming the form otherwise."""
    match = HEAD_FORM.fullmatch(text.strip().lower())
    if match is None:
        raise ValueError(f"expected SEQ:HASH (an event number, a colon, 64 hex digits), not {text[:80]!r}")
    return int(match[1]), match[2]


def verify(store: Store, batch: int = 5000, *, kept: tuple[int, str] | None = None,
           checkpoints: Iterable[tuple[int, str]] = ()) -> Verdict:
    """Walk the chain in id order; the first event that does not hold is named.

    With `kept` (a head the operator kept elsewhere: `loom ledger head` earlier, an escalation,
    the daily line), the chain must also still lead to it: the event at that id has exactly that
    hash. The chain alone cannot see a rewrite that recomputed every later hash and the head (the
    agent runs as the same user and can do that); a head kept off the machine can.

    `checkpoints` are more such heads (every one the replica's remote holds): each must hold too."""
    wanted: dict[int, list[str]] = {}
    for seq, digest in checkpoints:
        wanted.setdefault(seq, []).append(digest)
    if any(d != GENESIS for d in wanted.get(0, [])):
        return Verdict(False, 0, 0, "a checkpoint of event 0 is not the genesis (event 0 is all zeros)")
    expected_id = 1
    prev_hash = GENESIS
    count = 0
    kept_seen = kept is not None and kept[0] == 0
    if kept is not None and kept_seen and kept[1] != GENESIS:
        return Verdict(False, 0, 0, f"the kept head 0:{kept[1]} is not the genesis (event 0 is all zeros)")
    with store.read() as db:
        head_value = meta.get_in(db, HEAD_KEY)
        cursor = db.execute("SELECT id, ts, kind, source, cause, detail, prev_hash, hash, agent FROM ledger ORDER BY id")
        while rows := cursor.fetchmany(batch):
            for r in rows:
                rid = r["id"]
                if rid != expected_id:
                    if rid > expected_id:
                        return Verdict(False, count, expected_id, f"missing (next present is {rid}): deleted")
                    return Verdict(False, count, rid, "out of order")
                if r["prev_hash"] != prev_hash:
                    return Verdict(
                        False, count, rid, "does not follow the event before it: an event was deleted or reordered"
                    )
                if (not isinstance(r["ts"], float | int) or not math.isfinite(r["ts"])
                        or not isinstance(r["detail"], str) or not isinstance(r["agent"], str)
                        or not isinstance(r["kind"], str) or not isinstance(r["source"], str)
                        or not isinstance(r["cause"], str | None)):
                    # A NaN time or a kind that is a number is no event Loom wrote; hashing it raised,
                    # and verify, the tool for an edited ledger, ended in a traceback.
                    return Verdict(False, count, rid, "a field has the wrong type: edited")
                digest = event_hash(prev_hash, rid, float(r["ts"]), r["kind"], r["source"], r["cause"], r["detail"],
                                    r["agent"])
                if digest != r["hash"]:
                    return Verdict(False, count, rid, "contents do not match its hash: edited")
                if kept is not None and rid == kept[0]:
                    kept_seen = True
                    if r["hash"] != kept[1]:
                        return Verdict(False, count, rid, f"its hash is {r['hash']}, not the kept head's "
                                                          f"{kept[1]}: the history up to it was rewritten")
                for digest in wanted.pop(rid, ()):
                    if r["hash"] != digest:
                        return Verdict(False, count, rid, f"its hash is {r['hash']}, not the checkpoint's "
                                                          f"{digest}: the history up to it was rewritten")
                prev_hash = r["hash"]
                expected_id += 1
                count += 1
    if head_value is None:
        if count:
            return Verdict(False, count, count, "the ledger head record is missing")
    else:
        head = _read_head(head_value)
        if head is None:
            return Verdict(False, count, count, "the ledger head record is unreadable: edited")
        head_id, head_hash = head
        if head_id != count or head_hash != prev_hash:
            if head_id > count:
                return Verdict(False, count, count + 1, f"missing: the head says {head_id} events exist: deleted")
            return Verdict(False, count, head_id, "the ledger head does not match the last event")
    wanted.pop(0, None)
    if wanted:
        return Verdict(False, count, min(wanted), f"the ledger ends at event {count}, before the checkpoint of "
                                                  f"event {min(wanted)}: events were removed and the chain rebuilt")
    if kept is not None and not kept_seen:
        return Verdict(False, count, kept[0], f"the ledger ends at event {count}, before the kept head: "
                                              "events were removed and the chain rebuilt")
    return Verdict(True, count)


def _read_head(value: object) -> tuple[int, str] | None:
    """The head record's (id, hash), or None when it is not one Loom wrote."""
    try:
        head = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        return None
    if not isinstance(head, dict) or not isinstance(head.get("hash"), str):
        return None
    ident = head.get("id")
    return (ident, head["hash"]) if isinstance(ident, int) and not isinstance(ident, bool) else None


def intact(db: sqlite3.Connection, batch: int = 5000) -> Iterator[tuple[int, str]]:
    """(id, hash) of each event from the first, as long as the chain holds: it stops before the first
    event that does not follow (missing, edited, reordered) and where the file stops reading (a
    damaged store's, opened read-only: store/earlier_chains.py)."""
    expected_id, prev_hash = 1, GENESIS
    try:
        cursor = db.execute("SELECT id, ts, kind, source, cause, detail, prev_hash, hash, agent FROM ledger ORDER BY id")
        while rows := cursor.fetchmany(batch):
            for rid, ts, kind, source, cause, detail, prev, digest, agent in rows:
                if rid != expected_id or prev != prev_hash or not isinstance(ts, float | int) \
                        or not isinstance(detail, str) or not isinstance(agent, str) \
                        or event_hash(prev_hash, rid, float(ts), kind, source, cause, detail, agent) != digest:
                    return
                yield rid, digest
                prev_hash, expected_id = digest, expected_id + 1
    except sqlite3.DatabaseError:
        return  # as far as it reads


def escalated_after(store: Store, seen: int, kinds: Iterable[str]) -> bool:
    """Whether an event of one of `kinds` (an escalation, an alert) came after event `seen`."""
    names = list(kinds)
    return store.query_one(f"SELECT 1 FROM ledger WHERE id > ? AND kind IN ({','.join('?' * len(names))}) LIMIT 1",
                           (seen, *names)) is not None


def count(store: Store) -> int:
    value = meta.get(store, HEAD_KEY)
    return int(json.loads(value)["id"]) if value is not None else 0


def tail(store: Store, n: int = 20, kinds: list[str] | None = None, agent: str | None = None) -> list[Event]:
    """The last `n` events (of `agent`, when named), oldest first."""
    return list(reversed(page(store, limit=n, kinds=kinds, agent=agent)))


def page(
    store: Store,
    *,
    before_id: int | None = None,
    limit: int = 200,
    kinds: list[str] | None = None,
    text: str | None = None,
    agent: str | None = None,
) -> list[Event]:
    """Newest first, `limit` events older than `before_id`: one index range scan, whatever the size."""
    where: list[str] = []
    params: list[object] = []
    if agent is not None:
        where.append("agent = ?")
        params.append(agent)
    if before_id is not None:
        where.append("id < ?")
        params.append(before_id)
    if kinds:
        where.append(f"kind IN ({','.join('?' * len(kinds))})")
        params.extend(kinds)
    if text:
        where.append("(kind LIKE ? ESCAPE '\\' OR cause LIKE ? ESCAPE '\\' OR detail LIKE ? ESCAPE '\\')")
        like = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        params.extend([like, like, like])
    sql = "SELECT * FROM ledger"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY id DESC LIMIT ?"
    params.append(limit)
    return [Event.from_row(r) for r in store.query(sql, tuple(params))]


# -- the questions asked of the ledger (rows as sqlite3.Row, newest first unless said) ------------


def after(store: Store, seen: int) -> list[sqlite3.Row]:
    """Every event past id `seen`, oldest first: id, ts, kind, cause, detail (the simulator's reading)."""
    return store.query("SELECT id, ts, kind, cause, detail FROM ledger WHERE id > ? ORDER BY id", (seen,))


def by_ids(store: Store, event_ids: list[int]) -> list[Event]:
    """The events with these ids, oldest first."""
    if not event_ids:
        return []
    marks = ",".join("?" * len(event_ids))
    return [Event.from_row(r) for r in
            store.query(f"SELECT * FROM ledger WHERE id IN ({marks}) ORDER BY id", tuple(event_ids))]


def newest_ids(store: Store, agent: str, kind: str, limit: int) -> list[int]:
    """The ids of the agent's last `limit` events of `kind` (one index range on (kind, id))."""
    return [r[0] for r in store.query("SELECT id FROM ledger WHERE kind = ? AND agent = ? ORDER BY id DESC LIMIT ?",
                                      (kind, agent, limit))]


def count_of(store: Store, agent: str, kind: str) -> int:
    row = store.query_one("SELECT COUNT(*) AS n FROM ledger WHERE agent = ? AND kind = ?", (agent, kind))
    return row["n"] if row else 0


# -- relaunches --


def last_relaunch_id(store: Store, agent: str) -> int:
    """The id of the agent's last relaunch event (0: none): the canary counts misses per launch."""
    row = store.query_row("SELECT MAX(id) FROM ledger WHERE agent = ? AND kind = 'relaunch'", (agent,))
    return int(row[0] or 0)


def last_relaunch(store: Store, agent: str) -> sqlite3.Row | None:
    """The agent's last relaunch: id, ts, cause, source, detail."""
    return store.query_one("SELECT id, ts, cause, source, detail FROM ledger WHERE agent = ? AND kind = 'relaunch' "
                           "ORDER BY id DESC LIMIT 1", (agent,))


def relaunches(store: Store, agent: str, limit: int) -> list[tuple[Any, ...]]:
    """The agent's last `limit` relaunches, and the operator's releases of the ceiling's hold
    (cause 'operator_release': a new budget, agent/policy.RELEASE), newest first: ts, cause, detail."""
    # Two reads along the (agent, kind, id) index, merged by id: one OR query walked the agent's
    # whole ledger backwards (a storm's backoff asks at every watchdog tick).
    launched = store.query("SELECT id, ts, cause, detail FROM ledger WHERE agent = ? AND kind = 'relaunch' "
                           "ORDER BY id DESC LIMIT ?", (agent, limit))
    released = store.query("SELECT id, ts, 'operator_release', detail FROM ledger WHERE agent = ? "
                           "AND kind = 'hold_cleared' AND json_extract(detail, '$.how') = 'release' "
                           "AND json_extract(detail, '$.held_by') = 'ceiling' ORDER BY id DESC LIMIT ?", (agent, limit))
    merged = sorted([*launched, *released], key=lambda row: row[0], reverse=True)[:limit] if released else launched
    return [tuple(row)[1:] for row in merged]


def relaunch_page(store: Store, agent: str, before_id: int | None, limit: int = 100) -> list[sqlite3.Row]:
    """The agent's relaunches older than `before_id` (any, when None): id, ts, cause."""
    return store.query("SELECT id, ts, cause FROM ledger WHERE kind = 'relaunch' AND agent = ?"
                       + (" AND id < ?" if before_id is not None else "") + " ORDER BY id DESC LIMIT ?",
                       (agent, before_id, limit) if before_id is not None else (agent, limit))


def relaunches_since(store: Store, agent: str, since: float) -> int:
    row = store.query_one("SELECT COUNT(*) FROM ledger WHERE agent = ? AND kind = 'relaunch' AND ts >= ?",
                          (agent, since))
    return int(row[0]) if row else 0


def relaunch_failed_after(store: Store, agent: str, relaunch_id: int) -> bool:
    """Whether a relaunch_failed or launch_died of the agent came after event `relaunch_id`."""
    return store.query_one("SELECT 1 FROM ledger WHERE id > ? AND agent = ? "
                           "AND kind IN ('relaunch_failed', 'launch_died') LIMIT 1",
                           (relaunch_id, agent)) is not None


def canary_recycled(store: Store, agent: str, session: str) -> bool:
    """Whether the agent was ever relaunched off `session` because the canary failed: a relaunch
    that launched nothing (its `relaunch_failed` names it) resumed nothing, revived no wedge, and is
    not one (counted, the next recovery started fresh a session never yet resumed: the old agent
    may even have run on in it, its stop failed)."""
    return store.query_one(
        "SELECT 1 FROM ledger AS r WHERE r.agent = ? AND r.kind = 'relaunch' AND r.cause = 'canary_failed' "
        "AND json_extract(r.detail, '$.old_session') = ? AND NOT EXISTS (SELECT 1 FROM ledger AS f "
        "WHERE f.agent = r.agent AND f.kind = 'relaunch_failed' AND f.id > r.id "
        "AND json_extract(f.detail, '$.relaunch') = r.id) LIMIT 1",
        (agent, session),
    ) is not None


def relaunched_agent(store: Store, session: str) -> str | None:
    """The agent whose last relaunch named `session`, as the new session or the old one."""
    row = store.query_one(
        "SELECT agent FROM ledger WHERE kind = 'relaunch' AND json_valid(detail) AND "
        "(json_extract(detail, '$.new_session') = ? OR json_extract(detail, '$.old_session') = ?) "
        "ORDER BY id DESC LIMIT 1", (session, session))
    return str(row[0]) if row is not None else None


def relaunch_counts(store: Store, agent: str) -> list[sqlite3.Row]:
    """The agent's relaunches counted by cause and mode: cause, mode, n."""
    return store.query(
        "SELECT cause, json_extract(detail, '$.mode') AS mode, COUNT(*) AS n FROM ledger "
        "WHERE agent = ? AND kind = 'relaunch' GROUP BY cause, mode", (agent,)
    )


def relaunch_witness_counts(store: Store, agent: str) -> sqlite3.Row:
    """The agent's relaunches (n) and how many of them a canary ack witnessed (w)."""
    return store.query_row(
        "SELECT COUNT(*) AS n, (SELECT COUNT(DISTINCT json_extract(detail, '$.witnessed')) FROM ledger "
        "WHERE agent = ?1 AND kind = 'canary' AND json_extract(detail, '$.witnessed') IS NOT NULL) AS w "
        "FROM ledger WHERE agent = ?1 AND kind = 'relaunch'", (agent,))


# -- the canary's and the queue's events --


def canary_witness(store: Store, agent: str, relaunch_id: int) -> sqlite3.Row | None:
    """The canary event that witnessed relaunch `relaunch_id` (id, ts, detail); an ack recorded
    before acks named their launch witnesses the relaunch before it."""
    return store.query_one(
        "SELECT id, ts, detail FROM ledger WHERE id > ? AND agent = ? AND kind = 'canary' "
        "AND (json_extract(detail, '$.witnessed') = ? OR (json_extract(detail, '$.result') = 'ok' "
        "AND json_extract(detail, '$.launch') IS NULL)) ORDER BY id LIMIT 1", (relaunch_id, agent, relaunch_id))


def nudge_typed(store: Store, agent: str, item_id: int, nudge: int) -> float | None:
    """When nudge number `nudge` of queue item `item_id` was typed (its queue_nudge event, ok), among
    the agent's last 200 nudges; None when it was not."""
    row = store.query_one(
        "SELECT ts FROM (SELECT ts, detail FROM ledger WHERE agent = ? AND kind = 'queue_nudge' ORDER BY id DESC "
        "LIMIT 200) WHERE json_extract(detail, '$.item') = ? AND json_extract(detail, '$.nudge') = ? "
        "AND json_extract(detail, '$.ok') = 1 LIMIT 1", (agent, item_id, nudge))
    return float(row[0]) if row is not None else None


def canary_sent(store: Store, agent: str, run_id: int) -> sqlite3.Row | None:
    """The detail of the canary_sent event of run `run_id`, among the last thousand events."""
    return store.query_one("SELECT detail FROM ledger WHERE agent = ? AND kind = 'canary_sent' AND id > "
                           "(SELECT COALESCE(MAX(id), 0) - 1000 FROM ledger) AND json_extract(detail, '$.run') = ? "
                           "ORDER BY id DESC LIMIT 1", (agent, run_id))


def queue_witness_counts(store: Store, agent: str) -> sqlite3.Row:
    """The agent's queue witnesses (w) and claims (c)."""
    return store.query_row("SELECT SUM(kind = 'queue_witness') AS w, SUM(kind = 'queue_claim') AS c FROM ledger "
                           "WHERE agent = ? AND kind IN ('queue_witness', 'queue_claim')", (agent,))
