"""Is the store a connection has open still sound: the file at its path, a log that is still linked,
pages that read? A daemon whose store is gone supervises nothing, so it must say so and exit.

Loom's daemon keeps its connections open for days. Under it the store can break in ways SQLite
itself does not report on every statement: pages overwritten (every read that meets them fails
with "malformed" while the heartbeat, writing pages it has cached, goes on succeeding), the file
emptied (`truncate -s 0`) or replaced or removed (the connection writes on into a file nobody will
open again), the write-ahead log unlinked (every commit since goes into a file that a crash
loses). Each of these is fatal: the daemon exits non-zero (EX_IOERR), its service manager starts
it again, and the salvage at start (salvage.py) moves the damage aside and carries over what reads.

A busy or locked store is not fatal: another process holds SQLite's write lock, and waiting, then
failing one tick, is right (the canary records it as its own error, never a miss).

The check is cheap: the errors the store raised are classified where they are raised (and kept by
the file's identity, so a loop that swallows one still leaves it for the heartbeat to find), and
two stat calls compare the path's file and log with the ones the connection opened.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from loomtui.errors import StoreError

EX_IOERR = 74  # sysexits.h: an input/output error; the service manager restarts on it

# SQLite's words for a file that does not read as a database (SQLITE_CORRUPT, SQLITE_NOTADB), whole:
# a bare "malformed" would also match a query's own "malformed JSON" (SQLITE_ERROR), and a daemon
# that exits for that restarts into the same query for ever.
DAMAGE = ("database disk image is malformed", "file is not a database", "file is encrypted",
          "unsupported file format")
BUSY = ("database is locked", "database table is locked", "database is busy")
# SQLite's primary result codes, when the error carries one (Python 3.11: sqlite_errorcode).
_DAMAGE_CODES = frozenset({11, 26})   # SQLITE_CORRUPT, SQLITE_NOTADB
_BUSY_CODES = frozenset({5, 6})       # SQLITE_BUSY, SQLITE_LOCKED
DAMAGED, TRANSIENT, OTHER = "damaged", "transient", "other"

# session.SIDECAR: the pinned session's copy, which shows a store was here (see salvage.py).
# Named again here because session.py imports the store.
SIDECAR = "pinned-session"


class StoreBroken(StoreError):
    """The store cannot be used as it is: damaged, gone, replaced, or its log lost."""

    exit_code = EX_IOERR

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"store {path} is unusable: {reason}")
        self.reason = reason


# A write-ahead log's header alone (its first 32 bytes) holds no commit: a connection opening a new
# store writes it as it switches the store to WAL.
WAL_HEADER = 32


def wal_path(path: Path) -> Path:
    return path.with_name(f"{path.name}-wal")


def classify(exc: BaseException) -> str:
    """DAMAGED, TRANSIENT or OTHER. Only the store's own errors count: a chat API that calls a
    message "malformed" is not a damaged store."""
    if isinstance(exc, StoreBroken):
        return DAMAGED
    if not isinstance(exc, (sqlite3.Error, StoreError)):
        return OTHER
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):  # SQLite said which: its code decides, never the words
        primary = code & 0xFF
        return DAMAGED if primary in _DAMAGE_CODES else TRANSIENT if primary in _BUSY_CODES else OTHER
    text = str(exc).lower()
    if any(marker in text for marker in DAMAGE):
        return DAMAGED
    if any(marker in text for marker in BUSY):
        return TRANSIENT
    return OTHER


def sqlite_words(exc: BaseException, path: Path) -> str:
    """SQLite's own error out of one of ours ("store PATH: ...", "store PATH is unusable: ...")."""
    if isinstance(exc, StoreBroken):
        return exc.reason
    text = str(exc)
    for prefix in (f"store {path} is unusable: ", f"store {path}: "):
        if text.startswith(prefix):
            return text[len(prefix):]
    return text


@dataclass(frozen=True)
class FileId:
    dev: int
    ino: int
    size: int

    @classmethod
    def of(cls, path: Path) -> FileId | None:
        """The file at `path` now; None when there is none. Other errors (a directory gone
        unreadable) are raised: they say nothing about which file is there."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        return cls(st.st_dev, st.st_ino, st.st_size)

    def same_file(self, other: FileId | None) -> bool:
        return other is not None and (self.dev, self.ino) == (other.dev, other.ino)


@dataclass(frozen=True)
class Opened:
    """The store file and its log as a connection opened them (the log: once the connection had
    read, which is when SQLite opens it; None if there was none to see)."""

    db: FileId
    wal: FileId | None


def moved(opened: Opened, db_now: FileId | None, wal_now: FileId | None, wal: Path) -> str | None:
    """Why the files at the store's path are no longer the ones the connection holds, or None.

    While any connection holds a log open SQLite never removes it (that takes the exclusive lock
    a reader's shared lock refuses), so a log gone or replaced under an open connection was done
    by something else: a `loom` that opened an emptied file (SQLite deletes the log beside an
    empty database), a cleaner, a hand.
    """
    if db_now is None:
        return "the file was removed while Loom had it open"
    if not opened.db.same_file(db_now):
        return f"the file was replaced while Loom had it open (inode {opened.db.ino}, now {db_now.ino})"
    if db_now.size == 0 and opened.db.size > 0:
        return "the file was emptied while Loom had it open (0 bytes)"
    if opened.wal is not None:
        if wal_now is None:
            return f"its write-ahead log {wal} was removed while Loom had it open"
        if not opened.wal.same_file(wal_now):
            return f"its write-ahead log {wal} was replaced while Loom had it open"
    return None


# Damage a store raised, by the file it was raised on: a loop that catches and carries on (the
# canary records a store fault as its own error) still leaves it here for the heartbeat's check.
# Keyed by the file, not the path: a salvage moves the file aside and a new one takes the path.
_damaged: dict[tuple[int, int], str] = {}


def confirmed(path: Path) -> str | None:
    """Does the file at `path` fail the check the salvage at start makes (`PRAGMA quick_check`, on a
    connection of its own, read-only)? Its verdict, or None when its pages read. Asked only once
    SQLite has called the store damaged: a daemon that exits on damage the salvage would not see
    comes back to the same damage, every few seconds, for ever.

    An empty or missing file is never opened: SQLite, opening it, deletes the write-ahead log beside
    it (the commits a salvage would carry over), even one another connection holds. Its verdict is
    the refusal to open it (refuse_orphaned_log), or none."""
    try:
        db = FileId.of(path)
    except OSError:
        return None  # cannot look: no verdict, the next failure asks again
    if db is None or db.size == 0:
        try:
            refuse_orphaned_log(path)
        except StoreBroken as broken:
            return broken.reason
        return None
    try:
        # Quoted: a `#`, `?` or `%` in the path would cut it short, and the cut path be opened
        # read-write (a stray empty database made elsewhere, the damage never confirmed).
        conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, timeout=5.0)
    except sqlite3.Error as exc:
        return str(exc) if classify(exc) == DAMAGED else None
    try:
        verdict = str(conn.execute("PRAGMA quick_check").fetchone()[0])
        return None if verdict == "ok" else f"database disk image is malformed ({verdict[:200]})"
    except sqlite3.Error as exc:
        # Damage again is the answer; anything else (busy, cannot open) is no verdict: not fatal
        # now, and the next failure asks again.
        return str(exc) if classify(exc) == DAMAGED else None
    finally:
        conn.close()


def note(opened: Opened | None, exc: BaseException, path: Path) -> None:
    if opened is None or classify(exc) != DAMAGED:
        return
    key = (opened.db.dev, opened.db.ino)
    if key not in _damaged and confirmed(path) is not None:
        _damaged[key] = sqlite_words(exc, path)


def examine(path: Path, opened: Opened | None, exc: BaseException | None = None) -> str | None:
    """Why the store at `path` is unusable (SQLite's error, or what happened to its files), or
    None: sound, or failing in a way that may pass (busy, locked, our own query's mistake)."""
    if exc is not None and classify(exc) == DAMAGED:
        seen = _damaged.get((opened.db.dev, opened.db.ino)) if opened is not None else None
        if seen is not None or confirmed(path) is not None:
            return sqlite_words(exc, path)
    if opened is None:
        return None
    seen = _damaged.get((opened.db.dev, opened.db.ino))
    if seen is not None:
        return seen
    wal = wal_path(path)
    try:
        return moved(opened, FileId.of(path), FileId.of(wal), wal)
    except OSError:
        return None  # cannot look (a permission changed): no verdict, the next look tries again


def log_holds_commits(path: Path) -> bool:
    """The store's write-ahead log holds commits while the file itself is missing or empty. The
    file is looked at again after the log: a connection making a new store writes the file's
    header before any commit reaches the log, so a new store being made is not taken for a lost one."""
    log = FileId.of(wal_path(path))
    if log is None or log.size <= WAL_HEADER:
        return False
    db = FileId.of(path)
    return db is None or db.size == 0


def refuse_orphaned_log(path: Path) -> None:
    """Refuse to open an empty or missing store that shows it held data: its write-ahead log holds
    commits (SQLite would delete it on opening an empty file: a running daemon would then commit
    into an unlinked log), or, for an empty file, the pinned session's sidecar is there. Opening
    would make a fresh store over the evidence; `loom supervise` salvages it at start instead.
    A new state directory has neither, and creates its store as always."""
    try:
        db = FileId.of(path)
        if db is not None and db.size > 0:
            return
        log = FileId.of(wal_path(path))
        holds = log_holds_commits(path)
    except OSError:
        return  # the open itself will say what is wrong with the directory
    if holds and log is not None:
        what = "is empty" if db is not None else "is missing"
        raise StoreBroken(path, f"the file {what} but its write-ahead log holds {log.size} bytes; "
                                "not opened, so nothing is lost (loom supervise salvages it when it starts)")
    if db is not None and pins_kept(path.parent):
        raise StoreBroken(path, "the file is empty but a pinned session shows a store was here; "
                                "not opened (loom supervise salvages it when it starts)")


def pins_kept(state_dir: Path) -> bool:
    """A pinned session's sidecar is kept in the state dir or in any agent's directory
    (agents/NAME/, whatever the config says now): a store was here. A config with `[[agents]]`
    and none named `main` keeps its pins only there."""
    if (state_dir / SIDECAR).exists():
        return True
    try:
        entries = list(os.scandir(state_dir / "agents"))
    except OSError:
        return False
    return any((Path(e.path) / SIDECAR).exists() for e in entries)
