"""The hook_events table (what the agent CLI's hooks reported) and the dispatch witness's reads of
the ledger: the lines Loom typed and the ones already reported missing. Every query says whose."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from loomtui.store.db import Store
from loomtui.timing import Instant

# The ledger kinds of a line Loom typed: an operator's or the agent's inject, a sentinel nudge,
# a canary probe (agent/inject.py records each with its digest).
TYPED_KINDS = ("inject", "queue_nudge", "canary_sent")
PROMPT = "UserPromptSubmit"
TOOL = "PostToolUse"
TOOL_FAILED = "PostToolUseFailure"
# The events that begin, end or pause a turn (hooks.turn_rules); a tool's use is only a sign of life.
TURN_EVENTS = ("SessionStart", "UserPromptSubmit", "Stop", "StopFailure", "Notification")


def insert_in(db: sqlite3.Connection, agent: str, at: Instant, event: str, session_id: str, source: str,
              detail: dict[str, Any]) -> int:
    cur = db.execute(
        "INSERT INTO hook_events(agent, ts, mono, boot, event, session_id, source, detail)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (agent, at.wall, at.mono, at.boot, event, session_id or None, source or None,
         json.dumps(detail, sort_keys=True, separators=(",", ":"))),
    )
    return int(cur.lastrowid or 0)


def recent(store: Store, agent: str, limit: int = 50, event: str | None = None) -> list[sqlite3.Row]:
    """The agent's latest hook events, newest first (of one `event` where given)."""
    if event is None:
        return store.query("SELECT * FROM hook_events WHERE agent = ? ORDER BY id DESC LIMIT ?", (agent, limit))
    return store.query("SELECT * FROM hook_events WHERE agent = ? AND event = ? ORDER BY id DESC LIMIT ?",
                       (agent, event, limit))


def prompts_since(store: Store, agent: str, wall: float) -> list[sqlite3.Row]:
    """The agent's UserPromptSubmit events written at or after `wall`, oldest first."""
    return store.query("SELECT id, ts, mono, boot, detail FROM hook_events WHERE agent = ? AND event = ? "
                       "AND ts >= ? ORDER BY id", (agent, PROMPT, wall))


def ledger_floor(store: Store, back: int) -> int:
    """An id `back` events before the ledger's head: where a witness that just started looks from."""
    row = store.query_row("SELECT COALESCE(MAX(id), 0) FROM ledger")
    return max(0, int(row[0]) - back)


def typed_since(store: Store, agent: str, after_id: int) -> list[sqlite3.Row]:
    """The lines typed into the agent (ok) with a ledger id above `after_id`, oldest first."""
    marks = ", ".join("?" for _ in TYPED_KINDS)
    return store.query(f"SELECT id, ts, kind, detail FROM ledger WHERE agent = ? AND kind IN ({marks}) AND id > ? "
                       "AND json_extract(detail, '$.ok') = 1 ORDER BY id", (agent, *TYPED_KINDS, after_id))


def missing_since(store: Store, agent: str, after_id: int) -> list[sqlite3.Row]:
    """dispatch_missing events for lines typed above `after_id`: (the typed line's id, its time)."""
    return store.query("SELECT json_extract(detail, '$.typed') AS typed, json_extract(detail, '$.typed_at') AS "
                       "typed_at FROM ledger WHERE agent = ? AND kind = 'dispatch_missing' AND id > ? "
                       "ORDER BY id", (agent, after_id))


def last_missing_typed_at(store: Store, agent: str) -> float | None:
    """When the line of the agent's latest dispatch_missing was typed; None when none was ever
    missing, or when a probe typed after it was recorded acked (the ledger's order, whatever the
    wall clock did since: stepped back, every later ack read as older than the line, and the canary
    probed back to back until the clock caught up). A probe typed before the record, settled ok
    after it, answers nothing by this (its ack may have come before the line was typed)."""
    row = store.query_one(
        "SELECT json_extract(m.detail, '$.typed_at'), EXISTS(SELECT 1 FROM ledger c WHERE c.agent = m.agent "
        "AND c.kind = 'canary' AND c.id > m.id AND json_extract(c.detail, '$.result') = 'ok' "
        "AND EXISTS(SELECT 1 FROM ledger s WHERE s.agent = m.agent AND s.kind = 'canary_sent' AND s.id > m.id "
        "AND json_extract(s.detail, '$.run') = json_extract(c.detail, '$.run'))) FROM ledger m "
        "WHERE m.agent = ? AND m.kind = 'dispatch_missing' ORDER BY m.id DESC LIMIT 1", (agent,))
    if row is None or row[1]:
        return None
    value = row[0]
    return float(value) if isinstance(value, (int, float)) else None


def turn_marks(store: Store, agent: str, limit: int) -> list[sqlite3.Row]:
    """The agent's latest `limit` events that begin, end or pause a turn (TURN_EVENTS), oldest first."""
    return turn_marks_after(store, agent, 0, limit)


def turn_marks_after(store: Store, agent: str, after_id: int, limit: int) -> list[sqlite3.Row]:
    """The agent's turn events written after id `after_id` (the newest `limit` of them), oldest first:
    from 0, all of them; from a recent id, a range of the (agent, event, id) index per event, never a
    sort of every event the agent had."""
    marks = ", ".join("?" for _ in TURN_EVENTS)
    rows = store.query(f"SELECT id, ts, mono, boot, event, source, detail FROM hook_events WHERE agent = ? "
                       f"AND event IN ({marks}) AND id > ? ORDER BY id DESC LIMIT ?",
                       (agent, *TURN_EVENTS, after_id, limit))
    return rows[::-1]


def turn_marks_kept(store: Store, agent: str, first_id: int, last_id: int) -> tuple[int, float | None]:
    """How many of the agent's turn events lie between ids `first_id` and `last_id` (both kept), and
    the time of event `last_id` (None: gone): whether marks read before are still the table's.
    A prune forgets events by their time, which need not rise with their ids, and the id of the
    newest event forgotten is given to the next one written."""
    marks = ", ".join("?" for _ in TURN_EVENTS)
    count = store.query_row(f"SELECT count(*) FROM hook_events WHERE agent = ? AND event IN ({marks}) "
                            f"AND id BETWEEN ? AND ?", (agent, *TURN_EVENTS, first_id, last_id))[0]
    last = store.query_one("SELECT ts FROM hook_events WHERE id = ?", (last_id,))
    return int(count), (float(last["ts"]) if last is not None else None)


def last_tool_use(store: Store, agent: str) -> sqlite3.Row | None:
    """The agent's latest tool use, done or failed: the newest sign of life inside a turn, and its
    tool. The newest of each along the (agent, event, id) index, the later of the two."""
    last = ("SELECT id, ts, mono, boot, event, source, detail FROM hook_events WHERE agent = ? AND event = ? "
            "ORDER BY id DESC LIMIT 1")
    return store.query_one(f"SELECT * FROM ({last}) UNION ALL SELECT * FROM ({last}) ORDER BY id DESC LIMIT 1",
                           (agent, TOOL, agent, TOOL_FAILED))


def prune(store: Store, agent: str, before: float) -> int:
    """Forget the agent's hook events written before `before` (wall): how many went."""
    with store.write() as db:
        return db.execute("DELETE FROM hook_events WHERE agent = ? AND ts < ?", (agent, before)).rowcount


# The harness's holds and the resume's proof (hooks/harness.py, hooks/resume.py): the questions
# asked in the hooks loop's transaction (`_in`, on its `db`) and after it.

def last_harness_end_in(db: sqlite3.Connection, agent: str) -> sqlite3.Row | None:
    """How the agent's last hold placed by the harness ended: ts, cause, how (None: never held so)."""
    return db.execute("SELECT ts, cause, json_extract(detail, '$.how') AS how FROM ledger WHERE agent = ? "
                      "AND kind = 'hold_cleared' AND json_extract(detail, '$.held_by') = 'harness' "
                      "ORDER BY id DESC LIMIT 1", (agent,)).fetchone()


def stopped_since_in(db: sqlite3.Connection, agent: str, wall: float) -> bool:
    """Whether a turn of the agent succeeded (a Stop hook event) at or after `wall`."""
    return db.execute("SELECT 1 FROM hook_events WHERE agent = ? AND event = 'Stop' AND ts >= ? LIMIT 1",
                      (agent, wall)).fetchone() is not None


def session_starts(store: Store, agent: str, wall: float, limit: int) -> list[sqlite3.Row]:
    """The agent's first `limit` SessionStarts written at or after `wall` (a launch's), oldest
    first: id, ts, session_id, source."""
    return store.query("SELECT id, ts, session_id, source FROM hook_events WHERE agent = ? "
                       "AND event = 'SessionStart' AND ts >= ? ORDER BY id LIMIT ?", (agent, wall, limit))


def resume_judged(store: Store, agent: str, relaunch_id: int) -> sqlite3.Row | None:
    """The verdict on relaunch `relaunch_id`'s resume, if one was given: the first resume_proven or
    resume_failed event after it (kind, source)."""
    return store.query_one("SELECT id, kind, source FROM ledger WHERE agent = ? AND id > ? "
                           "AND kind IN ('resume_proven', 'resume_failed') ORDER BY id LIMIT 1", (agent, relaunch_id))


def hold_since(store: Store, agent: str, after_id: int) -> bool:
    """Whether a hold of the agent was placed or ended after ledger event `after_id`."""
    return store.query_one("SELECT 1 FROM ledger WHERE agent = ? AND id > ? AND kind IN ('hold_placed', "
                           "'hold_cleared') LIMIT 1", (agent, after_id)) is not None


def last_relaunch(store: Store, agent: str) -> sqlite3.Row | None:
    """The agent's last relaunch event: id, ts, detail."""
    return store.query_one("SELECT id, ts, detail FROM ledger WHERE agent = ? AND kind = 'relaunch' "
                           "ORDER BY id DESC LIMIT 1", (agent,))
