"""The events the agent's hooks left in its directory, recorded and removed (the daemon's hooks loop).

Each file is untrusted: opened without following a link, read up to a bound, parsed by
events.parse (which never raises), recorded as one hook_events row (and, for the few events worth
it, a ledger event in the same transaction), then deleted. Prompt submitted, turn stopped and
tool use go to the table only: they are too frequent for the ledger. A file that does not parse
is taken for one still being written (a JSON object is whole only at its last byte) until it is
PARTIAL_GRACE old; then it is recorded as unreadable, like any other. A turn that failed for a
quota or a login holds the agent, and the next that succeeds ends the hold, in the same
transaction as the event's row (hooks/harness.py).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from dataclasses import dataclass
from pathlib import Path

from loomtui import clock
from loomtui.context import Context
from loomtui.hooks import events as hook_events
from loomtui.hooks import harness, harness_rules
from loomtui.hooks.events import HookEvent
from loomtui.hooks.settings import PREFIX, SUFFIX, events_dir
from loomtui.states import EventKind
from loomtui.store import hook_events as table
from loomtui.store import counters, ledger, outbox
from loomtui.text import printable

log = logging.getLogger(__name__)

SOURCE = "hooks"
# Turns ended, by outcome (and a failure's error type), for the metrics: counted as they are recorded,
# so a retention of hook_events never makes the counter go back.
TURNS_TOTAL = "loom_turns_total"
TURN_OUTCOME = {"Stop": "stopped", "StopFailure": "failed"}
PERMISSION = "permission_prompt"  # a Notification's type when a tool waits for the operator's yes
PARTIAL_GRACE = 30.0  # a file that does not parse and is older than this is no longer being written
BATCH = 200          # files recorded per transaction
KEEP = 7 * 86400.0   # how long a hook event is kept in the store (a tool's use is one row each)
PRUNE_EVERY = 3600.0  # how often the hooks loop forgets the older ones

# The ledger's kind for each event worth one; the rest are the table's alone.
LEDGER_KIND: dict[str, EventKind] = {"SessionStart": "session_started", "StopFailure": "turn_failed",
               "Notification": "agent_notification", "PreCompact": "compaction"}


@dataclass(frozen=True)
class Recorded:
    path: Path
    event: HookEvent
    wall: float
    mtime_ns: int = 0  # as the directory's listing saw it: with the name, which file this was


def pending(directory: Path) -> list[tuple[int, str]]:
    """(mtime in ns, name) of the event files (plain files named as the hook names them), oldest first."""
    out: list[tuple[int, str]] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return out
    for entry in entries:
        if not (entry.name.startswith(PREFIX) and entry.name.endswith(SUFFIX)):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode):
            out.append((info.st_mtime_ns, entry.name))
    out.sort()
    return out


def read_event(path: Path) -> tuple[HookEvent, float] | None:
    """The event in `path` and when it was written; None when it vanished or is not a plain file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        size = info.st_size
        want = size if size <= hook_events.MAX_PARSED else hook_events.HEAD
        chunks, got = [], 0
        while got < want:
            chunk = os.read(fd, min(1 << 20, want - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except OSError as exc:
        return HookEvent(hook_events.UNREADABLE, detail={"error": f"unreadable: {exc.strerror or exc}"}), clock.wall()
    finally:
        os.close(fd)
    return hook_events.parse(b"".join(chunks), size), info.st_mtime


# Per events directory, the files recorded that could not be deleted (name, mtime in ns): never
# recorded again by this process. Read again at every look, a permission prompt's would have told
# the operator once a look, and a quota's failure held the agent anew each time.
_UNREMOVED: dict[str, set[tuple[str, int]]] = {}


def unremoved(directory: Path) -> frozenset[tuple[str, int]]:
    """The files of `directory` (name, mtime in ns) recorded by this process that could not be
    removed: still there, never recorded again (their events are in the store)."""
    return frozenset(_UNREMOVED.get(str(directory), ()))


def collect(ctx: Context) -> list[Recorded]:
    """Record every complete event file in the agent's events directory, oldest first, and delete it."""
    directory = events_dir(ctx.agent_dir)
    done: list[Recorded] = []
    found = pending(directory)
    # What is no longer there as it was (gone, or written anew) is forgotten; what is, is tried
    # again (the directory writable again: a remount, a chmod), never recorded again. Left there,
    # its name would also keep a later hook of the same pid from writing its event (noclobber).
    # Read, not popped: a probe's question (hooks.turns.withholds_probe) asks for them meanwhile,
    # while this waits on a locked store.
    remembered = _UNREMOVED.get(str(directory), set()) & {(name, mtime) for mtime, name in found}
    unremoved = {key for key in remembered if not _remove(directory / key[0], quiet=True)}
    names = [(mtime, name) for mtime, name in found if (name, mtime) not in remembered]
    now = clock.wall()
    try:
        for start in range(0, len(names), BATCH):
            batch = []
            for mtime, name in names[start:start + BATCH]:
                path = directory / name
                read = read_event(path)
                if read is None:
                    continue  # gone, or not a plain file: never followed, never recorded
                if read[0].event == hook_events.UNREADABLE and now - read[1] < PARTIAL_GRACE:
                    continue  # most likely still being written: its close wakes the loop again
                batch.append(Recorded(path, *read, mtime_ns=mtime))
            if batch:
                _record(ctx, batch)
                for item in batch:
                    # After the commit: a crash in between records it twice, never loses it.
                    if not _remove(item.path):
                        unremoved.add((item.path.name, item.mtime_ns))
                done.extend(batch)
    finally:  # kept also when the store refuses a batch: those already recorded stay recorded once
        if unremoved:
            _UNREMOVED[str(directory)] = unremoved
        else:
            _UNREMOVED.pop(str(directory), None)
    return done


def prune(ctx: Context) -> int:
    """Forget hook events older than KEEP: the turns, the witness and status read hours back at most,
    and what they counted is in the counters and the ledger already."""
    return table.prune(ctx.store, ctx.agent, clock.wall() - KEEP)


def _record(ctx: Context, batch: list[Recorded]) -> None:
    reading = clock.now()
    with ctx.store.write() as db:
        for item in batch:
            event = item.event
            # A file dated after the reading (the wall clock stepped back since it was written, or
            # an mtime set by hand) was written by now, never later: a time to come would keep a
            # quota's hold from ever ending, or a turn from ever going quiet.
            at = clock.at_wall(min(item.wall, reading.wall), reading)
            row_id = table.insert_in(db, ctx.agent, at, event.event, event.session_id, event.source, event.detail)
            if event.event in ("Stop", "StopFailure"):
                error = "" if event.event != "StopFailure" else \
                    event.source if event.source in harness_rules.KNOWN_ERRORS else "other"
                counters.bump_in(db, TURNS_TOTAL, {"agent": ctx.agent, "outcome": TURN_OUTCOME[event.event],
                                                   "error": error})
            if event.event == "Notification" and event.source == PERMISSION:
                _tell_permission_in(db, ctx, event, row_id, at.wall)
            kind = LEDGER_KIND.get(event.event)
            if kind is not None:
                detail = {"event": event.event, **({"session_id": event.session_id} if event.session_id else {}),
                          **({"source": event.source} if event.source else {})}
                ledger.append_in(db, kind, source=SOURCE, detail=detail)
            harness.apply_in(db, ctx, event, at, reading)  # a quota's or a login's hold, and its end


def _tell_permission_in(db: sqlite3.Connection, ctx: Context, event: HookEvent, row_id: int, at: float) -> None:
    """The operator hears once of each permission prompt the agent waits on (its message names the
    tool): a canary probe will not be typed into it meanwhile, and a miss then is not deafness.
    Keyed by the event's row and time: a row's id is given again once a prune emptied the table
    (a week without events), and the outbox keeps every key it sent, so a new prompt went untold."""
    whose = f"[{ctx.agent}] " if len(ctx.config.agent_names) > 1 else ""
    message = event.detail.get("message")
    said = message if isinstance(message, str) else ""
    outbox.enqueue(db, f"{whose}Loom: the agent waits for your permission: {printable(said) or 'a tool'}",
                   dedupe_key=f"permission:{ctx.agent}:{row_id}:{at!r}")


def _remove(path: Path, *, quiet: bool = False) -> bool:
    """Whether `path` is gone. One that stays (a directory made read-only, a file system remounted
    so) is logged (once: `quiet` when tried again) and left: collect records it no more."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        if quiet:
            return False
        log.warning("hooks: %s was recorded but cannot be removed (%s): it is not read again",
                    printable(str(path)), exc.strerror or exc)
        return False
    return True
