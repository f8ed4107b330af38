"""The pinned session id: the one conversation a resume may continue (never "most recent").

The id lives in the store. A copy lives beside it in `pinned-session` (the sidecar), so a store
too damaged to read still knows which conversation is ours (salvage.py falls back to it). The
copy is written before the pinning transaction commits: it can name a pin that then rolled back
(a session never launched, whose resume fails over to fresh), never an older conversation. So
whenever the store reads, the store wins, and `sync_sidecar` puts the copy right.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from loomtui.states import MAIN_AGENT
from loomtui.store import meta
from loomtui.store.db import Store, agent_key

KEY = "pinned_session"
SIDECAR = "pinned-session"


def pinned(store: Store) -> str | None:
    return store.get_meta(store.agent_key(KEY))


def pin_in(db: sqlite3.Connection, session_id: str) -> None:
    """Pin the session of the agent whose store `db` came from (each agent has its own)."""
    meta.set_in(db, agent_key(KEY, getattr(db, "agent", MAIN_AGENT)), session_id)
    state_dir = getattr(db, "agent_dir", None) or _state_dir(db)
    if state_dir is not None:
        try:
            write_sidecar(state_dir, session_id)
        except OSError as exc:
            # The store holds the pin; a relaunch must not fail for want of its backup copy.
            _warn("could not write %s: %s", state_dir / SIDECAR, exc.strerror or exc)


def unpin_in(db: sqlite3.Connection) -> None:
    """No session pinned (a fresh relaunch that launched nothing, where none was pinned before):
    the next resume has nothing to continue and starts fresh, not a session never launched."""
    meta.delete_in(db, agent_key(KEY, getattr(db, "agent", MAIN_AGENT)))
    state_dir = getattr(db, "agent_dir", None) or _state_dir(db)
    if state_dir is not None:
        try:
            (Path(state_dir) / SIDECAR).unlink(missing_ok=True)
        except OSError as exc:
            # A sidecar left names a pin rolled back: a resume of it fails over to fresh (see above).
            _warn("could not remove %s: %s", Path(state_dir) / SIDECAR, exc.strerror or exc)


def is_session_id(text: str) -> bool:
    # The id is typed into the agent's command line unquoted: only a canonical uuid will do.
    import uuid  # here: uuid imports platform, and every `loom status` imports this module

    try:
        return str(uuid.UUID(text)) == text
    except ValueError:
        return False


def read_sidecar(state_dir: Path) -> str | None:
    try:
        with open(Path(state_dir) / SIDECAR, "rb") as f:
            text = f.read(100).decode("ascii", "replace").strip()
    except OSError:
        return None
    return text if is_session_id(text) else None


def write_sidecar(state_dir: Path, session_id: str) -> None:
    """Replace the sidecar atomically: a crash leaves the old copy or the new one, never half."""
    state_dir = Path(state_dir)
    tmp = state_dir / f"{SIDECAR}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, f"{session_id}\n".encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, state_dir / SIDECAR)
    dfd = os.open(state_dir, os.O_RDONLY)
    try:
        os.fsync(dfd)  # the rename itself survives a power cut
    finally:
        os.close(dfd)


def sync_sidecar(store: Store) -> None:
    """Make the sidecar match the store's pin (none pinned: no sidecar).

    Runs under the store's write lock, as every pin does, so a pin cannot slip in between.
    """
    state_dir = store.agent_dir
    with store.write() as db:
        current = meta.get_in(db, store.agent_key(KEY))
        try:
            if current is None:
                (state_dir / SIDECAR).unlink(missing_ok=True)
            elif read_sidecar(state_dir) != current:
                write_sidecar(state_dir, current)
        except OSError as exc:
            _warn("could not update %s: %s", state_dir / SIDECAR, exc.strerror or exc)


def _state_dir(db: sqlite3.Connection) -> Path | None:
    for row in db.execute("PRAGMA database_list"):
        if row[1] == "main":
            return Path(row[2]).parent if row[2] else None  # "" for an in-memory database
    return None


def _warn(message: str, *args: object) -> None:
    # logging here, not at the top: this module is the only one of every `loom status` (which
    # `loom hosts` runs on each host) that logs, and logging brings traceback, string and weakref.
    import logging

    logging.getLogger(__name__).warning(message, *args)
