"""A claim on a queue item: `loom resolve` (and the console's `d`), reached through actions.resolve.

A claim is not proof: the item is `claimed` until the job's next clean run witnesses it
(sentinel.py), and a failure after the claim reopens it.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from loomtui import clock
from loomtui.context import Context
from loomtui.errors import LoomError
from loomtui.sentinel.queue import MAX_NOTE, from_row, save
from loomtui.sentinel.queue_rules import CLAIMED, RETIRED, WITNESSED, Item
from loomtui.store import ledger, queue_items
from loomtui.text import digest, sanitize


def log_position(path: str | Path) -> tuple[int | None, int | None, int | None]:
    try:
        st = os.stat(path)
    except OSError:
        return None, None, None
    return st.st_dev, st.st_ino, st.st_size


def resolve(ctx: Context, item_id: int, note: str, *, source: str, session_id: str | None = None,
            now: float | None = None) -> tuple[Item, bool]:
    """Claim an item as handled; (the item, whether it changed). A claim waits for a witness run."""
    clean = sanitize(note).strip()
    if not clean:
        raise LoomError("resolve: --note must say what you found and did")
    if len(clean) > MAX_NOTE:
        raise LoomError(f"resolve: the note is {len(clean)} characters; keep it under {MAX_NOTE}")
    given = now
    with ctx.store.write() as db:
        # Dated when written, on both clocks at once: read before a write that waited out a locked
        # store (its busy timeout), a wall clock stepped meanwhile put the claim's monotonic instant
        # a day off (a claim a day old at once, or one no run could witness for a day).
        at = clock.now() if given is None else clock.at_wall(given)
        now = at.wall
        row = queue_items.get_in(db, item_id)
        if row is None:
            raise LoomError(f"resolve: there is no queue item {item_id} (see loom queue)")
        item = from_row(row)
        if item.state == WITNESSED:
            return item, False
        if item.state == RETIRED:
            raise LoomError(f"resolve: queue item {item_id} was retired: its job {item.job!r} is gone from the config")
        # Where the log ends now: a failure line past this point happened after the claim.
        job = ctx.config.job(item.job)
        dev, inode, size = log_position(job.log if job else item.log)
        claimed = dataclasses.replace(
            item, state=CLAIMED, claimed_at=now, claimed_by=source, claimed_session=session_id,
            claim_dev=dev, claim_inode=inode, claim_offset=size, note=clean,
            claimed_mono=at.mono, claimed_boot=at.boot)
        save(db, claimed)
        ledger.append_in(db, "queue_claim", source=source, ts=now, agent=item.agent, detail={
            "item": item.id, "job": item.job, "session": session_id, "again": item.state == CLAIMED,
            "note_length": len(clean), "note_digest": digest(clean)})
    return claimed, True
