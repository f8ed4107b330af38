"""The durable store: one SQLite file in WAL mode, shared by the daemon, the CLI and the console.

Any component may die at any instant; what a committed transaction wrote is what the next
tick reconstructs from. Every write goes through `write()`, which takes SQLite's write lock
up front (BEGIN IMMEDIATE) so a read-then-write can never interleave with another writer.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from loomtui import clock
from loomtui.errors import StoreError, StoreUnavailable
from loomtui.states import MAIN_AGENT
from loomtui.store import health, meta
from loomtui.store.migrations import MIGRATIONS
from loomtui.store.statedir import create_private_file

DB_NAME = "loom.db"
BUSY_TIMEOUT = 10.0
# With the busy wait on loomtui.clock (`waits_on_clock`): how often a write that found the store
# locked tries again until its timeout is over (SQLite's own wait tries within 100 ms).
CLOCK_BUSY_POLL = 2.0
OPEN_LOCK_SUFFIX = "-openlock"  # beside the file, as SQLite's own -wal and -shm are


@contextmanager
def open_lock(path: Path, *, exclusive: bool = False, timeout: float = BUSY_TIMEOUT) -> Iterator[None]:
    """Held (shared) while a connection opens the store at `path`, and (exclusive) while the salvage
    moves a damaged store aside and makes a new one in its place.

    SQLite opens a store's log and shared memory by their names, after the file itself. A
    connection opening while the salvage renames the three could pair the new file with the old
    log or shared memory, or make a log of its own that the new store then reads as its: the
    salvage failed ("disk I/O error", reproduced; CI's "malformed" was likely the same race) or
    the new store could be damaged at birth.
    A connection opened before the salvage holds the old files and SQLite sees they moved.
    On the machine's clock, as the store's busy wait: the holder is another real process."""
    lock = Path(f"{path}{OPEN_LOCK_SUFFIX}")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        try:
            fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)  # a state dir this user may only read
        except OSError:
            yield  # no lock to take: the open itself says what is wrong with the directory
            return
    try:
        real = clock.SYSTEM
        deadline = real.monotonic() + timeout
        pause = 0.005
        while True:
            try:
                fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if real.monotonic() >= deadline:
                    who = "opening it" if exclusive else "salvaging it"
                    raise StoreUnavailable(f"store {path}: database is locked (another Loom is {who}: {lock})") from None
                real.sleep(pause)
                pause = min(pause * 2, 0.1)
        yield
    finally:
        os.close(fd)  # and the lock with it


class AgentConnection(sqlite3.Connection):
    """A connection that knows whose rows it writes when a caller does not say: the agent of the
    context that opened the store (so every event of agent B's loops is B's without each call
    site naming it), and that agent's own directory (its sidecar files)."""

    agent: str = MAIN_AGENT
    agent_dir: Path | None = None


class Store:
    def __init__(self, path: Path, *, timeout: float = BUSY_TIMEOUT, migrate: bool = True,
                 agent: str = MAIN_AGENT, agent_dir: Path | None = None, lock_held: bool = False,
                 waits_on_clock: bool = False) -> None:
        """`lock_held`: the caller holds `open_lock` already (the salvage, making the new store).
        `waits_on_clock`: a write that finds the store locked waits its `timeout` on loomtui.clock's
        sleep (trying again every CLOCK_BUSY_POLL), not in SQLite's busy wait, which sleeps in real
        time: the simulator's connections, whose clock is virtual, wait as the daemon's do."""
        self.path = Path(path)
        self.busy_on_clock = timeout if waits_on_clock else None
        if waits_on_clock:
            timeout = 0.0
        self.agent = agent
        self.agent_dir = Path(agent_dir) if agent_dir is not None else self.path.parent
        self._lock = threading.RLock()
        self.opened: health.Opened | None = None
        if lock_held:
            self._open(timeout, migrate)
        else:
            with open_lock(self.path, timeout=timeout):
                self._open(timeout, migrate)

    def _open(self, timeout: float, migrate: bool) -> None:
        health.refuse_orphaned_log(self.path)  # before SQLite sees the file: it would delete the log
        try:
            create_private_file(self.path)
            self.conn = sqlite3.connect(
                self.path, timeout=timeout, isolation_level=None, check_same_thread=False,
                factory=AgentConnection,
            )
            self.conn.agent = self.agent
            self.conn.agent_dir = self.agent_dir
        except OSError as exc:
            raise StoreError(f"store {self.path} cannot be opened: {exc.strerror or exc}") from None
        except sqlite3.Error as exc:
            raise StoreError(f"store {self.path} cannot be opened: {exc}") from None
        self.conn.row_factory = sqlite3.Row
        try:
            self.conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
            mode = self._switch_to_wal(timeout)
            if str(mode).lower() != "wal":
                raise StoreError(f"store {self.path}: could not switch to WAL mode (got {mode})")
            self.conn.execute("PRAGMA synchronous = NORMAL")
            self.conn.execute("PRAGMA foreign_keys = ON")
            if migrate:
                self.migrate()
            else:
                self.conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # SQLite opens the log
            # The files this connection holds, once it holds the log too: the health check's baseline.
            db_file, wal_file = health.FileId.of(self.path), health.FileId.of(health.wal_path(self.path))
        except sqlite3.Error as exc:
            self.conn.close()
            raise StoreError(f"store {self.path} is unusable: {exc}") from None
        except OSError as exc:
            self.conn.close()
            raise StoreError(f"store {self.path} cannot be opened: {exc.strerror or exc}") from None
        if db_file is None:  # removed between the open and the look
            self.conn.close()
            raise health.StoreBroken(self.path, "the file was removed while Loom opened it")
        self.opened = health.Opened(db_file, wal_file)

    def _switch_to_wal(self, timeout: float) -> str:
        """The journal mode once WAL is asked for. A new file is still in rollback mode, and there
        two connections opening it at once (the threads of `loom status` over several agents, a
        daemon and a CLI) can deadlock on the switch: SQLite then says "locked" at once, without
        its busy wait, so the wait is here, as long as the busy timeout. On the machine's clock
        whatever clock is installed: the lock is another real connection's, released in real time."""
        real = clock.SYSTEM
        deadline = real.monotonic() + timeout
        pause = 0.005
        while True:
            try:
                return str(self.conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
            except sqlite3.OperationalError as exc:
                if health.classify(exc) != health.TRANSIENT or real.monotonic() >= deadline:
                    raise
            real.sleep(pause)
            pause = min(pause * 2, 0.1)

    @classmethod
    def in_dir(cls, state_dir: Path, **kwargs: Any) -> Store:
        return cls(Path(state_dir) / DB_NAME, **kwargs)

    def close(self) -> None:
        with self._lock:
            self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transactions --------------------------------------------------------------------

    def _unavailable(self, exc: sqlite3.Error) -> StoreUnavailable:
        health.note(self.opened, exc, self.path)
        named = StoreUnavailable(f"store {self.path}: {exc}")
        # health.classify reads SQLite's code (None when the error had none: set, never guessed).
        setattr(named, "sqlite_errorcode", getattr(exc, "sqlite_errorcode", None))  # noqa: B010
        return named

    def unusable(self, exc: BaseException | None = None) -> str | None:
        """Why this store cannot be used any more (SQLite's error, or what became of its files), or
        None: sound, or failing in a way that may pass (locked, busy). See health.py."""
        return health.examine(self.path, self.opened, exc)

    def _damage(self, exc: BaseException) -> BaseException | None:
        """A damaged store met inside a transaction's body, named like any other store fault (raw, it
        would end a command in a traceback); None for the caller's own errors, raised as they are."""
        if isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, StoreError) \
                and health.classify(exc) == health.DAMAGED:
            return self._unavailable(exc)
        return None

    def _rollback(self) -> None:
        try:
            self.conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # SQLite already rolled back after the failure (a full disk, an I/O error, damage)

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction holding SQLite's write lock from its first statement."""
        with self._lock:
            self._begin_write()
            try:
                yield self.conn
            except BaseException as exc:
                self._rollback()
                named = self._damage(exc)
                if named is not None:
                    raise named from None
                raise
            else:
                try:
                    self.conn.execute("COMMIT")
                except sqlite3.DatabaseError as exc:
                    self._rollback()
                    raise self._unavailable(exc) from None

    def _begin_write(self) -> None:
        """BEGIN IMMEDIATE; on a locked store, with the busy wait on the clock, tried again until the
        timeout is over (SQLite waited already otherwise)."""
        waited = 0.0
        while True:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.DatabaseError as exc:
                if self.busy_on_clock is None or waited >= self.busy_on_clock \
                        or health.classify(exc) != health.TRANSIENT:
                    raise self._unavailable(exc) from None
            pause = min(CLOCK_BUSY_POLL, self.busy_on_clock - waited)
            clock.sleep(pause)
            waited += pause

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A consistent snapshot for several reads."""
        with self._lock:
            try:
                self.conn.execute("BEGIN")
            except sqlite3.DatabaseError as exc:
                raise self._unavailable(exc) from None
            try:
                yield self.conn
            except BaseException as exc:
                named = self._damage(exc)
                if named is not None:
                    raise named from None
                raise
            finally:
                self._rollback()

    def data_version(self) -> int:
        """SQLite's data_version: it moves when another connection commits (a cheap "anything new?",
        asked straight: the simulator asks after every slice of every loop)."""
        with self._lock:
            try:
                return int(self.conn.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.DatabaseError as exc:
                raise self._unavailable(exc) from None

    def lock_out(self) -> None:
        """Hold an exclusive lock until `let_in`, as a backup or a `sqlite3` shell can: every other
        connection's write fails with "database is locked" once its busy wait is over."""
        self.conn.execute("BEGIN EXCLUSIVE")

    def let_in(self) -> None:
        self.conn.execute("ROLLBACK")

    def query(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> list[sqlite3.Row]:
        return self._read(sql, params, lambda cur: cur.fetchall())

    def query_one(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> sqlite3.Row | None:
        return self._read(sql, params, lambda cur: cur.fetchone())

    def query_row(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> sqlite3.Row:
        """A query that always answers one row (an aggregate, a PRAGMA): that row."""
        row = self.query_one(sql, params)
        if row is None:
            raise self._unavailable(sqlite3.DatabaseError(f"no row from a query that always has one: {sql[:60]}"))
        return row

    def pragma(self, name: str) -> Any:
        """A PRAGMA's (first) value."""
        return self.query_row(f"PRAGMA {name}")[0]

    def make_durable(self) -> None:
        """What is committed, on disk whatever comes next (a power cut): the log synced and copied
        into the file. With synchronous = NORMAL a commit is only sure at a checkpoint. Called before
        a ledger head leaves the machine (a message, the replica's checkpoint): an event whose head
        went off the box, lost with its id reused, would read as a rewritten history there."""
        self.query_row("PRAGMA wal_checkpoint(FULL)")

    def _read(self, sql: str, params: tuple[Any, ...] | dict[str, Any], fetch: Any) -> Any:
        with self._lock:
            try:
                return fetch(self.conn.execute(sql, params))
            except (sqlite3.ProgrammingError, sqlite3.IntegrityError):
                raise  # our own mistake in the query, not the store's state
            except sqlite3.DatabaseError as exc:
                raise self._unavailable(exc) from None

    # -- schema --------------------------------------------------------------------------

    def migrate(self) -> list[str]:
        """Apply every migration not yet applied; safe when several processes open at once."""
        if self._migrated():
            return []
        applied_now: list[str] = []
        with self.write() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)"
            )
            done = {r[0] for r in db.execute("SELECT name FROM schema_migrations")}
            known = {name for name, _ in MIGRATIONS}
            unknown = done - known
            if unknown:
                raise StoreError(
                    f"store {self.path} was written by a newer Loom (migrations {sorted(unknown)}); upgrade Loom"
                )
            for name, sql in MIGRATIONS:
                if name in done:
                    continue
                for statement in _statements(sql):
                    db.execute(statement)
                db.execute("INSERT INTO schema_migrations VALUES (?, ?)", (name, clock.wall()))
                applied_now.append(name)
            version = len(done) + len(applied_now)
            db.execute(f"PRAGMA user_version = {version}")
        return applied_now

    def _migrated(self) -> bool:
        """Every migration applied already, as read without the write lock: a store in use (another
        process writing, a backup holding its lock) opens for reading as WAL lets it, where taking
        the lock on every open made `loom status`, `loom check` and the console fail once another
        writer held it past the busy timeout (and wrote a frame to the log each time)."""
        try:
            done = {r[0] for r in self.conn.execute("SELECT name FROM schema_migrations")}
            version = int(self.conn.execute("PRAGMA user_version").fetchone()[0])
        except sqlite3.OperationalError:
            return False  # a new store (no such table yet), or one to look at under the lock
        known = {name for name, _ in MIGRATIONS}
        return done == known and version == len(known)

    def schema_version(self) -> int:
        return int(self.pragma("user_version"))

    def integrity_check(self) -> str:
        return str(self.pragma("integrity_check"))

    # -- small shared tables --------------------------------------------------------------

    def agent_key(self, key: str) -> str:
        """A meta key of this store's agent: as it always was for `main`, `key@name` for another."""
        return agent_key(key, self.agent)

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        value = meta.get(self, key)
        return value if value is not None else default

    def set_meta(self, key: str, value: str, db: sqlite3.Connection | None = None) -> None:
        if db is not None:
            meta.set_in(db, key, value)
        else:
            with self.write() as tx:
                meta.set_in(tx, key, value)


def inserted(cur: sqlite3.Cursor) -> int:
    """The id of the row an INSERT just made (SQLite always has one after an INSERT)."""
    if cur.lastrowid is None:
        raise sqlite3.DatabaseError("an INSERT made no row id")
    return int(cur.lastrowid)


def agent_key(key: str, agent: str) -> str:
    return key if agent == MAIN_AGENT else f"{key}@{agent}"


def _statements(sql: str) -> list[str]:
    # sqlite3's executescript would COMMIT our transaction; split instead (no ';' inside literals here).
    return [s.strip() for s in sql.split(";") if s.strip()]
