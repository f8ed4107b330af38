"""A store damaged under a running `loom supervise`: the daemon exits non-zero naming the path and
SQLite's error (so its service manager restarts it), and the next start salvages, keeps the
pinned session and relaunches the agent that died meanwhile. A busy store is not damage."""

from __future__ import annotations

import os
import signal
import sqlite3
from contextlib import closing

import pytest
from harness import wait_for
from test_supervise import FAST, Daemon, relaunches

from loomtui.store.db import DB_NAME
from loomtui.store.health import EX_IOERR

pytestmark = pytest.mark.e2e


def settled_store(harness) -> None:
    """Every commit so far written into loom.db and the log emptied, as a long-running daemon's
    checkpoints leave it: the damage below then lies on pages the daemon reads from the file."""
    with closing(sqlite3.connect(harness.state_dir / DB_NAME, timeout=30, isolation_level=None)) as db:
        busy, _, _ = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0


def roots(harness) -> dict[str, int]:
    with closing(sqlite3.connect(harness.state_dir / DB_NAME, timeout=30)) as db:
        return dict(db.execute("SELECT name, rootpage FROM sqlite_master WHERE type = 'table'"))


def scribble(harness) -> None:
    """Random bytes over a few pages: the pages holding the meta, ledger and heartbeat rows."""
    pages = roots(harness)
    settled_store(harness)
    with open(harness.state_dir / DB_NAME, "r+b") as f:
        for table in ("meta", "ledger", "heartbeats"):
            f.seek((pages[table] - 1) * 4096)
            f.write(os.urandom(4096))


def truncate(harness) -> None:
    settled_store(harness)
    os.truncate(harness.state_dir / DB_NAME, 0)  # what `truncate -s 0 loom.db` does


def unlink_wal(harness) -> None:
    os.unlink(harness.state_dir / f"{DB_NAME}-wal")


DAMAGE = {"scribbled": scribble, "truncated": truncate, "wal_unlinked": unlink_wal}
# What the exit line may say after "is unusable: ": SQLite's error, or what the stat calls saw
# (an emptied file reads as "not a database" when a read meets it before the heartbeat's look).
SAYS = {"scribbled": ("malformed", "not a database"), "truncated": ("emptied", "not a database", "malformed"),
        "wal_unlinked": ("write-ahead log",)}


def exited(daemon: Daemon) -> int:
    return wait_for(lambda: daemon.proc.poll(), 60, what="the daemon exiting") if daemon.proc.poll() is None \
        else daemon.proc.returncode


@pytest.mark.incident("exit_zero_is_failure")
@pytest.mark.parametrize("how", list(DAMAGE))
def test_a_store_damaged_under_the_daemon_ends_it_and_the_next_start_recovers(make_harness, how):
    harness = make_harness(sections=FAST)
    session = harness.start()
    daemon = Daemon(harness)
    daemon.settle(3)
    DAMAGE[how](harness)
    code = exited(daemon)
    out = daemon.output()
    db = harness.state_dir / DB_NAME
    assert code == EX_IOERR, out
    assert f"loom: store {db} is unusable: " in out, out
    assert any(word in out.rsplit("is unusable: ", 1)[1] for word in SAYS[how]), out
    assert "Traceback" not in out, out

    # The agent dies while nobody supervises it; the service manager's restart brings Loom back.
    agent = wait_for(harness.agent_pid, what="the agent")
    os.kill(agent, signal.SIGKILL)
    again = Daemon(harness)
    relaunch = wait_for(lambda: [e for e in relaunches(harness) if e["cause"] != "operator_fresh"], 90,
                        what="the killed agent relaunched")[0]
    assert relaunch["detail"]["mode"] == "resume" and relaunch["detail"]["new_session"] == session
    wait_for(lambda: harness.agent_pid() not in (None, agent), 60, what="the agent running again")
    assert harness.pinned() == session
    salvaged = harness.events("store_salvaged")
    if how == "wal_unlinked":
        # The daemon's own connection still held the unlinked log and checkpointed it into the
        # file as it closed: nothing was lost, nothing needs salvaging.
        assert salvaged == []
    else:
        [event] = salvaged
        assert event["detail"]["moved_to"].startswith(f"{db}.damaged-")
        assert list(harness.state_dir.glob(f"{DB_NAME}.damaged-*"))
    assert harness.loom("ledger", "verify").returncode == 0
    assert again.stop() == 0, again.output()


def test_sigterm_while_the_store_is_damaged_is_a_clean_exit(make_harness):
    # Ticks far apart, so the SIGTERM comes before any loop meets the damage.
    harness = make_harness(sections={"watchdog": {**FAST["watchdog"], "interval": "10m", "exit_check": "10m"}})
    harness.start()
    daemon = Daemon(harness)
    scribble(harness)
    daemon.proc.send_signal(signal.SIGTERM)
    code = daemon.proc.wait(60)
    out = daemon.output()
    assert "Traceback" not in out, out
    # Recording the stop meets the damage (the ledger's page): one line naming it, never a trace.
    assert code == EX_IOERR and f"loom: store {harness.state_dir / DB_NAME} is unusable: " in out, out


def test_loom_status_refuses_an_emptied_store_and_leaves_the_daemons_log(make_harness):
    harness = make_harness(sections=FAST)
    harness.start()
    daemon = Daemon(harness)
    daemon.settle(2)
    db, wal = harness.state_dir / DB_NAME, harness.state_dir / f"{DB_NAME}-wal"
    before = wal.stat().st_ino
    # Stop the daemon's ticks first, so only `loom status` could touch the files in between.
    daemon.proc.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: wal.stat().st_size > 0, 10, what="commits in the log")
        os.truncate(db, 0)
        result = harness.loom("status")
        assert result.returncode != 0 and f"store {db} is unusable" in result.stderr, result.stderr
        assert "write-ahead log" in result.stderr
        assert wal.exists() and wal.stat().st_ino == before and wal.stat().st_size > 0  # not deleted
        assert db.stat().st_size == 0  # and no fresh store made over the evidence
    finally:
        daemon.proc.send_signal(signal.SIGCONT)
    assert exited(daemon) == EX_IOERR
    assert f"loom: store {db} is unusable" in daemon.output()


def test_a_locked_store_does_not_end_the_daemon(make_harness):
    harness = make_harness(sections=FAST)
    harness.start()
    daemon = Daemon(harness)
    blocker = sqlite3.connect(harness.state_dir / DB_NAME, timeout=30, isolation_level=None)
    try:
        blocker.execute("BEGIN EXCLUSIVE")
        # Fault injection: hold the write lock until a loop has failed on it (the busy timeout).
        wait_for(lambda: "database is locked" in daemon.output(), 180, what="a loop meeting the locked store")
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    started = daemon.ticks()
    wait_for(lambda: daemon.ticks() > started + 3, 60, what="the watchdog ticking again")
    assert daemon.proc.poll() is None, daemon.output()
    assert "exiting so that the service manager restarts Loom" not in daemon.output()
    assert daemon.stop() == 0


def test_a_fresh_state_dir_still_creates_its_store(make_harness):
    harness = make_harness(sections=FAST)
    result = harness.loom("status")
    assert result.returncode == 0, result.stderr
    assert (harness.state_dir / DB_NAME).stat().st_size > 0
