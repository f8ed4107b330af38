"""The ledger's head, sent to the operator once a day: a copy of it off the machine.

The agent runs as the operator's user and could rewrite the whole store, hashes and head
recomputed, so the chain alone proves nothing against it (docs/DESIGN.md). A head that went out
over Telegram before such a rewrite makes `loom ledger verify --head SEQ:HASH` fail after it.

Once a day: the outbox row's dedupe key names the local date, and a dedupe key is unique for the
life of the store, so a restarted daemon does not send the day's line twice.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from datetime import tzinfo

from loomtui.context import Context
from loomtui.store import ledger, outbox

log = logging.getLogger("loom.head_notice")

# How often the loop looks whether today's line is out: at most this long after midnight. Its first
# look is one PERIOD after the daemon starts, not at once: a daemon restarted in a loop (or a test's)
# does not open each run with the head, and the day's line still goes out once it has run a while.
PERIOD = 600.0
KEY_PREFIX = "ledger_head:"


def day_key(now: float, zone: tzinfo | None) -> str:
    """The outbox dedupe key of the line for the local day `now` falls in."""
    return KEY_PREFIX + dt.datetime.fromtimestamp(now, zone).date().isoformat()


def line(seq: int, digest: str, day: str) -> str:
    head = ledger.format_head(seq, digest)
    return (f"Loom ledger head on {day}: {head} (keep it; `loom ledger verify --head {head}` "
            "proves the history up to it was not rewritten)")


def send_daily(ctx: Context, now: float, zone: tzinfo | None) -> int | None:
    """Enqueue today's line unless it is already in the outbox; its row id, or None if it was."""
    key = day_key(now, zone)
    if outbox.has_key(ctx.store, key):
        return None  # asked first, so a look every PERIOD does not count a duplicate each time
    seq, digest = ledger.head(ctx.store)
    # enqueue dedupes too: a second daemon racing for the same day gets the first one's row.
    return outbox.enqueue(ctx.store, line(seq, digest, key[len(KEY_PREFIX):]), dedupe_key=key, now=now)


def head_tick(ctx: Context, halt: threading.Event) -> Callable[[], object]:
    """The daemon's host-wide loop (the first agent's Context: the ledger is the store's)."""
    from loomtui.clock import local_zone

    zone = local_zone()
    started = [True]

    def step() -> object:
        if started:
            started.clear()  # the loop's first tick comes at the start: the first look is the next
            return None
        sent = send_daily(ctx, time.time(), zone)
        if sent is not None:
            log.info("ledger head sent to the operator (outbox %d)", sent)
        return sent

    return step
