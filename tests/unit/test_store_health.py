"""The store's health check on real SQLite files: damage, a lock, a file replaced, removed or
emptied, a log unlinked or replaced; and the refusal to open an emptied store beside its log."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path

import pytest
from harness import locked_by_another, log_only_commits

from loomtui.errors import StoreUnavailable
from loomtui.store import db as store_db
from loomtui.store import health, ledger, outbox, salvage, session
from loomtui.store.db import DB_NAME, Store, open_lock
from loomtui.store.health import DAMAGED, OTHER, TRANSIENT, FileId, Opened, StoreBroken, classify
from loomtui.store.salvage import open_or_salvage

SID = "12345678-aaaa-4bbb-8ccc-1234567890ab"


@pytest.fixture
def store(state_dir):
    state_dir.mkdir(mode=0o700)
    s = Store.in_dir(state_dir)
    ledger.append(s, "inject", source="t", detail={"n": 1})
    yield s
    s.close()


def fresh_db(path) -> None:
    with closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE other(x)")
        db.commit()


def scribble_table(store: Store, table: str) -> None:
    root = store.query_one("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,))[0]
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with open(store.path, "r+b") as f:
        f.seek((root - 1) * store.query_one("PRAGMA page_size")[0])
        f.write(b"\xa5" * 4096)
    # Another process's commit, as under a running daemon: the connection's cached pages are
    # dropped, and its next read meets the file as it now is.
    with closing(sqlite3.connect(store.path, isolation_level=None)) as other:
        other.execute("INSERT OR REPLACE INTO heartbeats(name, ts, pid, detail) VALUES ('other', 0, 0, '{}')")


# -- classification ---------------------------------------------------------------------------

def test_a_malformed_store_is_damage(store):
    scribble_table(store, "meta")
    with pytest.raises(StoreUnavailable) as raised:
        store.query("SELECT * FROM meta")
    assert classify(raised.value) == DAMAGED
    assert store.unusable(raised.value) == "database disk image is malformed"


def test_a_file_that_is_not_a_database_is_damage(tmp_path):
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not sqlite " * 400)
    with closing(sqlite3.connect(path)) as db, pytest.raises(sqlite3.DatabaseError) as raised:
        db.execute("SELECT * FROM sqlite_master").fetchall()
    assert classify(raised.value) == DAMAGED
    assert health.examine(path, None, raised.value) == "file is not a database"


def test_a_locked_store_is_transient_and_never_unusable(store):
    blocker = sqlite3.connect(store.path, isolation_level=None)
    other = Store(store.path, timeout=0.1)
    try:
        blocker.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreUnavailable) as raised:
            ledger.append(other, "inject", source="t", detail={})
        assert "database is locked" in str(raised.value)
        assert classify(raised.value) == TRANSIENT
        assert other.unusable(raised.value) is None and store.unusable() is None
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        other.close()


def test_only_the_stores_own_errors_count():
    # Telegram calls a rejected message "malformed": that is no damaged store.
    assert classify(RuntimeError("Bad Request: message is malformed")) == OTHER
    assert classify(sqlite3.IntegrityError("UNIQUE constraint failed: meta.key")) == OTHER
    assert classify(sqlite3.OperationalError("no such table: nothing")) == OTHER


def test_a_querys_own_malformed_json_is_no_damage(store):
    # SQLite's JSON functions say "malformed JSON" (SQLITE_ERROR) for a detail that is not JSON:
    # the daemon queries json_extract(detail) every tick, so taking that for damage would restart
    # it into the same query for ever (anyone who can write one ledger row could keep it down).
    with store.write() as db:
        db.execute("UPDATE ledger SET detail = 'not json' WHERE id = 1")
    with pytest.raises(sqlite3.OperationalError) as raw:
        store.conn.execute("SELECT json_extract(detail, '$.n') FROM ledger").fetchall()
    assert "malformed JSON" in str(raw.value) and classify(raw.value) == OTHER
    with pytest.raises(StoreUnavailable) as named:
        store.query("SELECT json_extract(detail, '$.n') FROM ledger")
    assert classify(named.value) == OTHER
    assert store.unusable(named.value) is None and store.unusable() is None
    heartbeat = Store(store.path)  # nor is it remembered for another connection to find
    try:
        assert heartbeat.unusable() is None
    finally:
        heartbeat.close()


def orphan_an_index_entry(store: Store, table: str, index: str) -> None:
    """Delete `table`'s first row but leave its entry in `index`: damage every read through the
    index meets ("database disk image is malformed") and `PRAGMA quick_check`, which does not
    compare indexes with their tables, passes. The index is made partial (WHERE 0) for the delete
    only, so the delete does not touch it, then put back as it was."""
    [sql] = store.query_one("SELECT sql FROM sqlite_master WHERE name = ?", (index,))
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def schema(text: str) -> None:
        with closing(sqlite3.connect(store.path, isolation_level=None)) as db:
            db.execute("PRAGMA writable_schema = ON")
            db.execute("UPDATE sqlite_master SET sql = ? WHERE name = ?", (text, index))

    schema(sql + " WHERE 0")
    with closing(sqlite3.connect(store.path, isolation_level=None)) as db:
        db.execute(f"DELETE FROM {table} WHERE rowid = (SELECT MIN(rowid) FROM {table})")
    schema(sql)


def test_damage_the_salvage_would_not_see_is_not_fatal(store):
    # SQLite called a read damaged, but the file passes the quick_check the salvage makes at start:
    # exiting would bring the daemon back to the same state every few seconds. Not fatal; recorded
    # once the check agrees.
    assert health.confirmed(store.path) is None  # a sound file passes the salvage's check
    outbox.enqueue(store, "first")
    outbox.enqueue(store, "second")
    orphan_an_index_entry(store, "outbox", "outbox_state")
    with pytest.raises(StoreUnavailable) as raised:
        store.query("SELECT text FROM outbox WHERE state = 'pending'")
    assert classify(raised.value) == DAMAGED and "malformed" in str(raised.value)
    assert health.confirmed(store.path) is None  # the salvage's check passes this file
    assert store.unusable(raised.value) is None and store.unusable() is None
    scribble_table(store, "meta")  # now damage the check sees too
    with pytest.raises(StoreUnavailable) as again:
        store.query("SELECT * FROM meta")
    assert store.unusable(again.value) == "database disk image is malformed"
    assert health.confirmed(store.path) is not None


def test_a_healthy_store_is_sound(store):
    assert store.unusable() is None
    assert store.opened is not None and store.opened.wal is not None  # the log, as the connection holds it


# -- the files under an open connection ---------------------------------------------------------

def test_a_replaced_file_is_unusable(store, tmp_path):
    fresh_db(tmp_path / "other.db")
    os.replace(tmp_path / "other.db", store.path)
    assert "the file was replaced" in store.unusable()


def test_a_removed_file_is_unusable(store):
    os.unlink(store.path)
    assert store.unusable() == "the file was removed while Loom had it open"


def test_an_emptied_file_is_unusable(store):
    os.truncate(store.path, 0)
    assert store.unusable() == "the file was emptied while Loom had it open (0 bytes)"


def test_an_unlinked_log_is_unusable(store):
    wal = health.wal_path(store.path)
    os.unlink(wal)
    assert store.unusable() == f"its write-ahead log {wal} was removed while Loom had it open"


def test_a_replaced_log_is_unusable(store, tmp_path):
    wal = health.wal_path(store.path)
    (tmp_path / "other-wal").write_bytes(wal.read_bytes())
    os.replace(tmp_path / "other-wal", wal)
    assert store.unusable() == f"its write-ahead log {wal} was replaced while Loom had it open"


def test_a_log_checkpointed_away_is_still_the_same_log(store):
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # emptied in place: the same file
    assert health.wal_path(store.path).stat().st_size == 0
    ledger.append(store, "inject", source="t", detail={"n": 2})
    assert store.unusable() is None


def test_the_verdict_from_plain_file_ids():
    db, log = FileId(1, 10, 8192), FileId(1, 11, 4096)
    opened = Opened(db, log)
    wal = health.wal_path(Path("/s/loom.db"))
    assert health.moved(opened, db, log, wal) is None
    assert health.moved(opened, FileId(1, 10, 16384), FileId(1, 11, 0), wal) is None  # grown; checkpointed
    assert "removed" in health.moved(opened, None, log, wal)
    assert "replaced" in health.moved(opened, FileId(1, 12, 8192), log, wal)
    assert "replaced" in health.moved(opened, FileId(2, 10, 8192), log, wal)  # same inode, other device
    assert "emptied" in health.moved(opened, FileId(1, 10, 0), log, wal)
    assert "write-ahead log /s/loom.db-wal was removed" in health.moved(opened, db, None, wal)
    assert "write-ahead log /s/loom.db-wal was replaced" in health.moved(opened, db, FileId(1, 13, 0), wal)
    assert health.moved(Opened(db, None), db, None, wal) is None  # no log was held: none to lose


def test_damage_one_connection_met_is_found_by_another(store):
    # The canary catches a store fault and records it as its own error: the heartbeat's look,
    # on a connection of its own, must still find it.
    heartbeat = Store(store.path)
    try:
        scribble_table(store, "meta")
        with pytest.raises(StoreUnavailable):
            store.query("SELECT * FROM meta")
        assert heartbeat.unusable() == "database disk image is malformed"
    finally:
        heartbeat.close()


def test_damage_is_kept_by_the_file_not_the_path(store, state_dir):
    scribble_table(store, "meta")
    with pytest.raises(StoreUnavailable):
        store.query("SELECT * FROM meta")
    store.close()
    salvaged_store, salvaged = open_or_salvage(state_dir)  # the file moved aside, a new one in its place
    try:
        assert salvaged is not None
        assert salvaged_store.unusable() is None
    finally:
        salvaged_store.close()


@pytest.mark.parametrize("moved", ["", "-wal"])
def test_a_store_opened_while_the_salvage_moves_its_files_waits_for_the_new_one(store, state_dir, monkeypatch, moved):
    # Another Loom (a `loom status`, the console) opens the store just as the salvage has moved the
    # file, or the file and its log, aside. Opening then could pair the new file with the old
    # shared memory, or make a log the new store reads as its own: CI once saw the salvage fail
    # "malformed" this way. The open waits until the new store is made, and opens that.
    scribble_table(store, "meta")
    # A connection opened earlier keeps the log and shared memory in place, to be moved too.
    earlier = sqlite3.connect(store.path)
    earlier.execute("SELECT count(*) FROM sqlite_master").fetchone()
    store.close()
    assert (state_dir / f"{DB_NAME}-wal").exists()
    real_replace, halfway, resume = os.replace, threading.Event(), threading.Event()

    def replace(src, dst):
        real_replace(src, dst)
        if str(src) == str(state_dir / DB_NAME) + moved:
            halfway.set()
            resume.wait(30)

    monkeypatch.setattr(salvage.os, "replace", replace)
    done: dict[str, object] = {}

    def run(name, call) -> None:
        try:
            done[name] = call()
        except Exception as exc:  # the test fails below, naming it
            done[name] = exc

    salvager = threading.Thread(target=run, args=("salvage", lambda: open_or_salvage(state_dir)))
    other = threading.Thread(target=run, args=("other", lambda: Store.in_dir(state_dir)))
    salvager.start()
    try:
        assert halfway.wait(30)
        other.start()
        time.sleep(0.3)
        assert "other" not in done  # it waits while the files move
    finally:
        resume.set()
        salvager.join(30)
        if other.is_alive() or other.ident is not None:
            other.join(30)
    new, salvaged = done["salvage"]
    theirs = done["other"]
    assert isinstance(theirs, Store), theirs
    try:
        assert salvaged is not None and new.unusable() is None and theirs.unusable() is None
        assert [e.kind for e in ledger.tail(theirs, 5)] == ["store_salvaged"]
        assert new.pragma("quick_check") == "ok" and theirs.pragma("quick_check") == "ok"
    finally:
        theirs.close()
        new.close()
        earlier.close()


def test_what_another_loom_writes_while_the_salvage_copies_is_never_copied_over(store, state_dir, monkeypatch):
    # A cron tick or an operator's recycle opens the store while the salvage copies the old rows in:
    # it pinned a new session and queued a message, and the copy put the old pin and the old row 1
    # back over them (the agent ran one conversation, the store pinned another). It waits instead:
    # an open then is busy ("salvaging it"), and what it writes once let in stays.
    with store.write() as db:
        session.pin_in(db, SID)
    outbox.enqueue(store, "the old store's message")
    scribble_table(store, "job_runs")  # damage the salvage finds; the pin and the outbox still read
    store.close()
    real_connect = sqlite3.connect
    during: list[object] = []

    def connect(target, *args, **kwargs):
        if str(target).startswith("file:") and "damaged" in str(target) and not during:  # the copy begins
            try:
                during.append(Store.in_dir(state_dir, timeout=0.3))  # another Loom, in the window
            except StoreUnavailable as exc:
                during.append(exc)
        return real_connect(target, *args, **kwargs)

    monkeypatch.setattr(salvage.sqlite3, "connect", connect)
    new, salvaged = open_or_salvage(state_dir)
    monkeypatch.undo()
    newer = "87654321-aaaa-4bbb-8ccc-1234567890ab"
    try:
        assert salvaged is not None and salvaged.copied["meta"] >= 1
        [opened] = during
        if isinstance(opened, Store):
            opened.close()
        assert isinstance(opened, StoreUnavailable) and "salvaging it" in str(opened), opened
        with Store.in_dir(state_dir) as theirs:  # let in now: what it writes is not copied over
            with theirs.write() as db:
                session.pin_in(db, newer)
            outbox.enqueue(theirs, "written after the salvage")
        assert session.pinned(new) == newer
        texts = [m.text for m in outbox.recent(new, 10)]
        assert "written after the salvage" in texts and "the old store's message" in texts
    finally:
        new.close()


def test_an_open_that_the_salvage_outlasts_is_busy_and_named(store, state_dir):
    # Busy (transient: the next tick tries again), never damage, and the lock it waited for named.
    with open_lock(store.path, exclusive=True):
        with pytest.raises(StoreUnavailable) as raised:
            Store(store.path, timeout=0.2)
    assert classify(raised.value) == TRANSIENT
    assert str(raised.value) == (f"store {store.path}: database is locked "
                                 f"(another Loom is salvaging it: {store.path}-openlock)")
    Store(store.path, timeout=0.2).close()  # and once it is let go, the store opens


def test_damage_inside_a_transaction_is_named_not_raw(store):
    scribble_table(store, "ledger")
    with pytest.raises(StoreUnavailable) as raised:
        with store.write() as db:
            db.execute("SELECT detail FROM ledger").fetchall()
    assert str(raised.value) == f"store {store.path}: database disk image is malformed"
    with pytest.raises(sqlite3.IntegrityError):  # a caller's own mistake is raised as it is
        with store.write() as db:
            db.execute("INSERT INTO meta(key, value) VALUES ('k', 'v')")
            db.execute("INSERT INTO meta(key, value) VALUES ('k', 'v')")


# -- opening an emptied store -----------------------------------------------------------------

def emptied_beside_its_log(state_dir):
    """A store with commits only in its log, then its file emptied, as `truncate -s 0` leaves it
    under a running daemon (whose connection keeps the log)."""
    state_dir.mkdir(mode=0o700)
    daemon = Store.in_dir(state_dir)
    daemon.conn.execute("PRAGMA wal_autocheckpoint = 0")
    ledger.append(daemon, "inject", source="t", detail={"n": 1})
    os.truncate(daemon.path, 0)
    return daemon


def test_a_reader_refuses_an_empty_store_beside_its_log(state_dir):
    daemon = emptied_beside_its_log(state_dir)
    wal = health.wal_path(daemon.path)
    try:
        before = (wal.stat().st_ino, wal.stat().st_size)
        with pytest.raises(StoreBroken) as raised:
            Store.in_dir(state_dir)
        assert raised.value.exit_code == health.EX_IOERR == 74
        assert str(raised.value).startswith(f"store {daemon.path} is unusable: the file is empty but its write-ahead log")
        assert (wal.stat().st_ino, wal.stat().st_size) == before  # SQLite was never let near it
        assert daemon.path.stat().st_size == 0
    finally:
        daemon.close()


def test_a_tick_that_meets_an_empty_store_beside_its_log_keeps_the_log_and_exits_74(state_dir, tmp_path):
    # The tick's look at why its store failed opened the empty file for a quick_check, and SQLite
    # deleted the log (the commits the salvage carries over); the tick exited 1 saying nothing is lost.
    from conftest import run_loom

    daemon = emptied_beside_its_log(state_dir)
    wal = health.wal_path(daemon.path)
    config = tmp_path / "c.toml"
    config.write_text(f'state_dir = "{state_dir}"\n')
    try:
        before = (wal.stat().st_ino, wal.stat().st_size)
        assert health.confirmed(daemon.path).startswith("the file is empty but its write-ahead log")
        tick = run_loom("--config", str(config), "tick", "sentinel")
        assert tick.returncode == 74, tick.stdout + tick.stderr
        assert "is unusable: the file is empty but its write-ahead log" in tick.stdout + tick.stderr
        assert (wal.stat().st_ino, wal.stat().st_size) == before
    finally:
        daemon.close()
    assert health.confirmed(state_dir / "absent.db") is None  # no file, no log: nothing to say


def test_a_reader_refuses_a_missing_store_beside_its_log(state_dir):
    daemon = emptied_beside_its_log(state_dir)
    try:
        os.unlink(daemon.path)
        with pytest.raises(StoreBroken, match="the file is missing but its write-ahead log"):
            Store.in_dir(state_dir)
        assert not daemon.path.exists()
    finally:
        daemon.close()


def test_a_log_of_its_header_alone_holds_no_commit_and_is_no_reason_to_refuse(state_dir):
    # What a connection making a new store leaves for an instant: the file still empty, the log
    # begun. Another connection opening then (a second agent's thread of `loom status`) opens it.
    state_dir.mkdir(mode=0o700)
    (state_dir / DB_NAME).write_bytes(b"")
    health.wal_path(state_dir / DB_NAME).write_bytes(b"\x37\x7f\x06\x82" + b"\0" * (health.WAL_HEADER - 4))
    with Store.in_dir(state_dir) as store:
        assert store.schema_version() > 0 and store.unusable() is None


def test_a_reader_refuses_an_empty_store_with_a_pinned_session(state_dir):
    state_dir.mkdir(mode=0o700)
    (state_dir / DB_NAME).write_bytes(b"")
    session.write_sidecar(state_dir, SID)
    with pytest.raises(StoreBroken, match="pinned session shows a store was here"):
        Store.in_dir(state_dir)
    assert health.SIDECAR == session.SIDECAR


def test_a_reader_refuses_an_empty_store_whose_pins_only_named_agents_keep(state_dir):
    # `[[agents]]` with none named `main`: the pins are kept in agents/NAME/ alone. Opened, the
    # empty file became a fresh store, the daemon's start then saw nothing to salvage, and every
    # agent's next relaunch started fresh (its conversation lost, nobody told).
    state_dir.mkdir(mode=0o700)
    (state_dir / DB_NAME).write_bytes(b"")
    alpha = state_dir / "agents" / "alpha"
    alpha.mkdir(parents=True)
    session.write_sidecar(alpha, SID)
    with pytest.raises(StoreBroken, match="pinned session shows a store was here"):
        Store.in_dir(state_dir)
    assert (state_dir / DB_NAME).stat().st_size == 0
    store, salvaged = open_or_salvage(state_dir)  # the daemon's start salvages it, the pin carried
    with store:
        assert salvaged is not None
        assert store.get_meta(store_db.agent_key(session.KEY, "alpha")) == SID


def test_the_damage_check_opens_the_store_whose_path_holds_a_hash(tmp_path):
    # The check's URI was not quoted: `#` began a fragment, the path was cut at it and the cut
    # path opened read-write, a stray empty database made outside the state dir.
    state_dir = tmp_path / "h#1"
    state_dir.mkdir(mode=0o700)
    with Store.in_dir(state_dir) as store:
        assert health.confirmed(store.path) is None
        scribble_table(store, "meta")
        assert health.confirmed(store.path) is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h#1"]


def test_a_store_in_use_opens_for_reading_while_another_process_holds_its_write_lock(state_dir):
    # Every open took the write lock to look for migrations: `loom status`, `loom check` and the
    # console failed once a backup or another writer held it past the busy timeout, and each open
    # wrote a frame to the log.
    state_dir.mkdir(mode=0o700)
    with Store.in_dir(state_dir) as store:
        ledger.append(store, "hold_placed", source="operator", detail={"reason": "before"})
    log = health.wal_path(state_dir / DB_NAME)
    blocker = locked_by_another(state_dir / DB_NAME)
    try:
        before = log.stat().st_size
        with Store.in_dir(state_dir, timeout=0.2) as reader:
            assert reader.schema_version() > 0
            assert [e.kind for e in ledger.tail(reader, 5)] == ["hold_placed"]
        assert log.stat().st_size == before
    finally:
        blocker.close()


def test_a_new_state_dir_creates_its_store(state_dir):
    state_dir.mkdir(mode=0o700)
    with Store.in_dir(state_dir) as store:
        assert store.schema_version() > 0 and store.unusable() is None
    (state_dir / DB_NAME).unlink()  # removed by hand with nothing beside it: a fresh start
    with Store.in_dir(state_dir) as store:
        assert store.schema_version() > 0


def test_the_daemon_salvages_a_log_whose_store_file_is_gone(state_dir):
    state_dir.mkdir(mode=0o700)
    # Commits that only reached the log, then the store file removed by hand.
    log = log_only_commits(state_dir)
    health.wal_path(state_dir / DB_NAME).write_bytes(log)
    store, salvaged = open_or_salvage(state_dir)
    try:
        assert salvaged is not None and salvaged.moved_to.read_bytes() == b""
        assert (state_dir / f"{salvaged.moved_to.name}-wal").read_bytes() == log  # kept as evidence
        event = ledger.Event.from_row(store.query_one("SELECT * FROM ledger ORDER BY id LIMIT 1"))
        assert event.kind == "store_salvaged" and "missing beside its write-ahead log" in event.detail["damage"]
    finally:
        store.close()


def test_loom_tick_on_a_damaged_store_exits_74_naming_it(store, loom):
    store.close()
    with open(store.path, "r+b") as f:
        f.write(b"not a database " * 6)  # over the header
    result = loom("tick", "sentinel")
    assert result.returncode == health.EX_IOERR, result.stderr
    assert f"store {store.path} is unusable: " in result.stderr and "Traceback" not in result.stderr


def test_loom_status_on_an_empty_store_beside_its_log_exits_74_and_keeps_the_log(state_dir, loom):
    daemon = emptied_beside_its_log(state_dir)
    wal = health.wal_path(daemon.path)
    try:
        size = wal.stat().st_size
        result = loom("status")
        assert result.returncode == health.EX_IOERR
        assert result.stderr.startswith(f"loom: store {daemon.path} is unusable: the file is empty"), result.stderr
        assert wal.stat().st_size == size
    finally:
        daemon.close()


def test_a_tick_whose_count_finds_the_store_damaged_exits_74_not_1(tmp_path):
    # The tick ran (a relaunch, say); then counting it found the store damaged: that raised past the
    # tick's own handling, and `loom tick` exited 1 ("failed"), not 74, which a wrapper salvages on.
    from loomtui.context import Context
    from loomtui.daemon import oneshot

    config = tmp_path / "config.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n')
    ctx = Context.load(str(config), None, environ={})
    try:
        path = ctx.store.path
        ctx.store.close()
        with open(path, "r+b") as f:
            f.write(b"not a database " * 6)  # over the header
        outcome = oneshot._counted(ctx, "sentinel", "cron", oneshot.TickOutcome("sentinel", "ran", "did its pass", 0.5),
                                  0.5)
        assert (outcome.status, outcome.exit_code) == ("unusable", health.EX_IOERR), outcome
        assert outcome.line.startswith("did its pass; then the store ") and str(path) in outcome.line
    finally:
        ctx.close()
