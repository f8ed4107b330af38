"""A damaged store met by the daemon: moved aside, a new one carries over what reads, the operator is told."""

from __future__ import annotations

import dataclasses
import datetime as real_dt
import signal
import sqlite3
import subprocess
import sys

import pytest
from conftest import REPO, loom_env
from harness import log_only_commits, wait_for

from loomtui.errors import StoreError
from loomtui.sentinel import jobscan
from loomtui.sentinel import queue as sentinel_queue
from loomtui.sentinel.logscan import Carry, Position
from loomtui.sentinel.queue_rules import CLAIMED, OPEN, WITNESSED, Failure
from loomtui.store import heartbeats, ledger, outbox, salvage, session
from loomtui.store.db import DB_NAME, Store
from loomtui.store.salvage import open_or_salvage

SID = "12345678-aaaa-4bbb-8ccc-1234567890ab"
OTHER = "87654321-bbbb-4ccc-8ddd-ba0987654321"
JOB = "backup"
POSITION = Position("/var/log/backup.log", dev=64769, inode=4242, offset=8192, carry=Carry(b"half a li", 9),
                    head=b"first bytes", mtime_ns=1_700_000_000_000_000_000, prev_inode=4241)
LEDGER_BULK = 600
# What a store that reads carries: open and claimed items with their claims (not the witnessed
# one), unsent messages (not the sent one), the job's scan offset.
QUEUE = {1: (OPEN, None, None), 2: (CLAIMED, OTHER, "restarted the mount")}
UNSENT = {("unsent one", "pending"), ("unsent two", "pending"), ("given up", "failed")}


@dataclasses.dataclass
class Layout:
    page_size: int
    pages: int
    roots: dict[str, int]  # table -> its root page: the only page of a table this small


def seed(state_dir) -> Layout:
    state_dir.mkdir(mode=0o700)
    with Store.in_dir(state_dir) as store:
        with store.write() as db:
            session.pin_in(db, SID)
            items = [sentinel_queue.insert(db, Failure(JOB, "line", f"sig-{n}", f"error {n}"), "/var/log/backup.log",
                                           1000.0 + n) for n in range(3)]
            sentinel_queue.save(db, dataclasses.replace(items[1], state=CLAIMED, claimed_at=1100.0, claimed_by="cli",
                                                        claimed_session=OTHER, note="restarted the mount"))
            sentinel_queue.save(db, dataclasses.replace(items[2], state=WITNESSED, witnessed_at=1200.0))
            jobscan.save_watch(db, JOB, POSITION, watch_since=900.0, missed_mark=None, now=1300.0)
        for n, text in enumerate(["unsent one", "already sent", "given up", "unsent two"]):
            outbox.enqueue(store, text, dedupe_key=f"k{n}")
        assert outbox.mark_sent(store, 2, message_id=77, chat_id=5, length=12, truncated=False)
        outbox.defer(store, 3, until=0, error="chat not found", fail=True)
        # Enough ledger to fill pages past the small tables', so a cut can lose it alone.
        for i in range(LEDGER_BULK):
            ledger.append(store, "inject", source="t", detail={"i": i, "pad": "x" * 200})
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        roots = store.query("SELECT name, rootpage FROM sqlite_master WHERE type = 'table'")
        return Layout(store.query_one("PRAGMA page_size")[0], store.query_one("PRAGMA page_count")[0],
                      {name: page for name, page in roots})


def damage(path, how: str, layout: Layout) -> bytes:
    """Damage the store file; returns the damaged bytes (what the evidence must hold)."""
    data = bytearray(path.read_bytes())
    size = layout.page_size

    def scribble(first_page: int, count: int) -> None:
        start = (first_page - 1) * size
        data[start:start + count * size] = b"\xa5" * (count * size)

    if how == "emptied":
        data = bytearray()
    elif how == "header":
        data[:100] = b"not a database " * 6 + b"0123456789"
    elif how == "schema_cut":
        data = data[:(layout.roots["meta"] - 1) * size]  # a few pages: the schema's root, no table
    elif how == "tail_cut":
        data = data[:max(layout.roots.values()) * size]  # every small table's page stays, the ledger's tail goes
    elif how == "meta_garbled":
        scribble(layout.roots["meta"], 1)
    elif how == "ledger_garbled":
        last_root = max(layout.roots.values())
        scribble(last_root + (layout.pages - last_root) // 2, 8)
    else:
        raise AssertionError(how)
    path.write_bytes(bytes(data))
    return bytes(data)


# damage -> (whether the small tables still read, where the pinned session comes from)
MODES = {
    "emptied": (False, "sidecar"),
    "header": (False, "sidecar"),
    "schema_cut": (False, "sidecar"),
    "meta_garbled": (True, "sidecar"),
    "tail_cut": (True, "store"),
    "ledger_garbled": (True, "store"),
}


def first_event(store: Store) -> ledger.Event:
    return ledger.Event.from_row(store.query_one("SELECT * FROM ledger ORDER BY id LIMIT 1"))


def carried_queue(store: Store) -> dict[int, tuple]:
    return {i.id: (i.state, i.claimed_session, i.note) for i in sentinel_queue.listing(store)}


def carried_outbox(store: Store, salvaged: salvage.Salvage) -> set[tuple[str, str]]:
    return {(m.text, m.state) for m in outbox.recent(store) if m.dedupe_key != f"salvage-{salvaged.moved_to.name}"}


def carried_offset(store: Store) -> Position | None:
    with store.read() as db:
        return jobscan.load_watch(db, JOB).position


@pytest.mark.parametrize("how", list(MODES))
def test_salvage_keeps_the_old_file_and_carries_what_reads(state_dir, how):
    reads, pin_source = MODES[how]
    layout = seed(state_dir)
    damaged = damage(state_dir / DB_NAME, how, layout)
    store, salvaged = open_or_salvage(state_dir)
    try:
        assert salvaged is not None
        assert salvaged.moved_to.parent == state_dir and salvaged.moved_to.name.startswith(f"{DB_NAME}.damaged-")
        assert salvaged.moved_to.read_bytes() == damaged  # the evidence, untouched

        assert session.pinned(store) == SID and salvaged.pinned_from == pin_source
        assert session.read_sidecar(state_dir) == SID
        assert carried_queue(store) == (QUEUE if reads else {})
        assert carried_outbox(store, salvaged) == (UNSENT if reads else set())
        assert carried_offset(store) == (POSITION if reads else None)
        if not reads:
            assert salvaged.unreadable
        if how == "meta_garbled":
            assert "meta" in salvaged.unreadable

        event = first_event(store)
        assert (event.id, event.kind) == (1, "store_salvaged")
        assert event.detail["moved_to"] == str(salvaged.moved_to) and event.detail["pinned_from"] == pin_source
        assert event.detail["unreadable"] == salvaged.unreadable
        if how == "ledger_garbled":
            assert 0 < event.detail["old_ledger_events"] < LEDGER_BULK  # read up to the scribble
        assert ledger.verify(store).ok

        [told] = [m for m in outbox.pending(store) if m.dedupe_key == f"salvage-{salvaged.moved_to.name}"]
        assert "store damaged" in told.text and str(salvaged.moved_to) in told.text
        assert f"pinned session was kept (from the {pin_source})" in told.text
    finally:
        store.close()
    again, none = open_or_salvage(state_dir)  # the new store is healthy: left alone
    again.close()
    assert none is None
    assert len(list(state_dir.glob(f"{DB_NAME}.damaged-*"))) == 1


def test_an_empty_store_beside_its_write_ahead_log_is_damage_and_the_log_is_kept(state_dir):
    state_dir.mkdir(mode=0o700)
    # Commits that only reached the log, then the main file lost: SQLite would open an empty
    # database and delete the log. No sidecar here, so only the log shows a store was there.
    log = log_only_commits(state_dir)
    assert log
    (state_dir / f"{DB_NAME}-wal").write_bytes(log)
    (state_dir / DB_NAME).write_bytes(b"")
    store, salvaged = open_or_salvage(state_dir)
    store.close()
    assert salvaged is not None and salvaged.moved_to.read_bytes() == b""
    assert (state_dir / f"{salvaged.moved_to.name}-wal").read_bytes() == log


def test_the_store_wins_over_the_sidecar_when_it_reads(state_dir):
    layout = seed(state_dir)
    # A pin that was written ahead and then rolled back: the store never committed it.
    session.write_sidecar(state_dir, OTHER)
    damage(state_dir / DB_NAME, "ledger_garbled", layout)
    store, salvaged = open_or_salvage(state_dir)
    store.close()
    assert salvaged.pinned_from == "store"
    assert session.read_sidecar(state_dir) == SID


@pytest.mark.parametrize("sidecar", [None, "x; rm -rf ~\n", SID.upper()])
def test_without_a_usable_sidecar_an_unreadable_store_starts_fresh(state_dir, sidecar):
    layout = seed(state_dir)
    (state_dir / session.SIDECAR).unlink()
    if sidecar is not None:
        # The id is typed into a command line: anything but a canonical uuid is refused.
        (state_dir / session.SIDECAR).write_text(sidecar)
    damage(state_dir / DB_NAME, "header", layout)
    store, salvaged = open_or_salvage(state_dir)
    store.close()
    assert salvaged is not None and salvaged.pinned_from is None
    assert "the next relaunch starts fresh" in salvaged.summary()
    with Store.in_dir(state_dir) as store:
        assert session.pinned(store) is None
    assert not (state_dir / session.SIDECAR).exists()


def test_pinning_writes_the_sidecar_atomically_and_privately(state_dir):
    state_dir.mkdir(mode=0o700)
    with Store.in_dir(state_dir) as store:
        for sid in (SID, OTHER):
            with store.write() as db:
                session.pin_in(db, sid)
            sidecar = state_dir / session.SIDECAR
            assert sidecar.read_text() == f"{sid}\n"
            assert sidecar.stat().st_mode & 0o777 == 0o600
            assert not (state_dir / f"{session.SIDECAR}.tmp").exists()


def test_a_healthy_store_puts_the_sidecar_right(state_dir):
    state_dir.mkdir(mode=0o700)
    sidecar = state_dir / session.SIDECAR
    with Store.in_dir(state_dir) as store:
        with store.write() as db:
            session.pin_in(db, SID)
    for before in (None, OTHER):  # a store pinned by an older Loom; a pin written ahead, then rolled back
        sidecar.unlink()
        if before:
            session.write_sidecar(state_dir, before)
        store, salvaged = open_or_salvage(state_dir)
        store.close()
        assert salvaged is None and session.read_sidecar(state_dir) == SID
    with Store.in_dir(state_dir) as store:
        with store.write() as db:
            db.execute("DELETE FROM meta WHERE key = ?", (session.KEY,))
    store, _ = open_or_salvage(state_dir)
    store.close()
    assert not sidecar.exists()  # nothing pinned: a later salvage must not revive an old session


def test_a_second_salvage_in_the_same_second_keeps_the_first_evidence(state_dir, monkeypatch):
    class Frozen(real_dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return real_dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=tz)

    monkeypatch.setattr(salvage.dt, "datetime", Frozen)
    layout = seed(state_dir)
    first = damage(state_dir / DB_NAME, "header", layout)
    store, one = open_or_salvage(state_dir)
    store.close()
    second = b"garbage " * 600
    (state_dir / DB_NAME).write_bytes(second)
    store, two = open_or_salvage(state_dir)
    store.close()
    assert one.moved_to != two.moved_to
    assert (one.moved_to.read_bytes(), two.moved_to.read_bytes()) == (first, second)


def test_the_daemon_salvages_instead_of_crash_looping(tmp_path, state_dir):
    layout = seed(state_dir)
    damage(state_dir / DB_NAME, "header", layout)
    config = tmp_path / "config.toml"
    config.write_text(f'[agent]\ntmux_socket = "loomtest-salvage-{tmp_path.name[-6:]}"\n'
                      '[watchdog]\ninterval = "1h"\n[canary]\ninterval = "1h"\n')
    proc = subprocess.Popen([sys.executable, "-m", "loomtui", "--config", str(config), "--state-dir", str(state_dir),
                             "supervise"], env=loom_env(), cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        def beat():
            try:
                with Store.in_dir(state_dir) as store:
                    return heartbeats.read(store).get("supervisor")
            except (StoreError, sqlite3.Error):
                return None  # the damaged file, until the daemon has moved it aside
        wait_for(beat, 60, what="the daemon running on a fresh store")
        assert proc.poll() is None
        assert list(state_dir.glob(f"{DB_NAME}.damaged-*"))
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "store damaged" in err
    with Store.in_dir(state_dir) as store:
        assert ledger.verify(store).ok
        event = first_event(store)
        assert event.kind == "store_salvaged" and event.detail["moved_to"].startswith(str(state_dir / DB_NAME))
        assert session.pinned(store) == SID  # from the sidecar: the header was unreadable


@pytest.mark.parametrize("how", ["header", "ledger_garbled"])
def test_every_named_agents_pin_is_carried_too(state_dir, how):
    layout = seed(state_dir)
    beta_dir = state_dir / "agents" / "beta"
    beta_dir.mkdir(parents=True, mode=0o700)
    with Store.in_dir(state_dir, agent="beta", agent_dir=beta_dir) as beta:
        with beta.write() as db:
            session.pin_in(db, OTHER)
        beta.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    damage(state_dir / DB_NAME, how, layout)
    store, salvaged = open_or_salvage(state_dir)
    try:
        where = "sidecar" if how == "header" else "store"
        assert salvaged is not None and salvaged.agents_pinned_from == {"beta": where}
        assert session.pinned(store) == SID
        with Store.in_dir(state_dir, agent="beta", agent_dir=beta_dir) as beta:
            assert session.pinned(beta) == OTHER
        assert session.read_sidecar(beta_dir) == OTHER and session.read_sidecar(state_dir) == SID
        assert first_event(store).detail["agents_pinned_from"] == {"beta": where}
        [told] = [m for m in outbox.pending(store) if m.dedupe_key == f"salvage-{salvaged.moved_to.name}"]
        assert f"Agent beta: pinned session kept (from the {where})" in told.text
    finally:
        store.close()
