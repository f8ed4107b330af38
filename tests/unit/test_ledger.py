"""The ledger's hash chain under concurrent writers, a killed writer, and tampering."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, loom_env

from loomtui.store import ledger
from loomtui.store.db import DB_NAME, Store

WRITER = """
import sys
from loomtui.store.db import Store
from loomtui.store import ledger
store = Store.in_dir(sys.argv[1])
for i in range(int(sys.argv[2])):
    ledger.append(store, "inject", source=f"writer-{sys.argv[3]}", detail={"i": i, "text": "x" * (i % 50)})
    if sys.argv[4:]:
        print(i, flush=True)
"""


def spawn_writer(state_dir: Path, n: int, tag: str, report: bool = False) -> subprocess.Popen[str]:
    args = [sys.executable, "-c", WRITER, str(state_dir), str(n), tag] + (["report"] if report else [])
    return subprocess.Popen(args, env=loom_env(), stdout=subprocess.PIPE, text=True, cwd=REPO)


@pytest.fixture
def store(state_dir):
    state_dir.mkdir(mode=0o700)
    s = Store.in_dir(state_dir)
    yield s
    s.close()


def fill(store: Store, n: int) -> None:
    for i in range(n):
        ledger.append(store, "inject", source="t", cause="c" if i % 2 else None, detail={"i": i})


def test_four_processes_append_at_once(state_dir, loom):
    state_dir.mkdir(mode=0o700)
    procs = [spawn_writer(state_dir, 500, str(k)) for k in range(4)]
    try:
        for p in procs:
            assert p.wait(timeout=240) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    with Store.in_dir(state_dir) as s:
        verdict = ledger.verify(s)
        assert verdict.ok, verdict.describe()
        assert verdict.count == 2000
        per_writer = s.query("SELECT source, COUNT(*) n FROM ledger GROUP BY source")
        assert {r["source"]: r["n"] for r in per_writer} == {f"writer-{k}": 500 for k in range(4)}
    result = loom("ledger", "verify")
    assert result.returncode == 0 and "2000 events" in result.stdout


def test_writer_killed_mid_append(state_dir, loom):
    state_dir.mkdir(mode=0o700)
    for attempt in range(3):
        proc = spawn_writer(state_dir, 10**6, f"victim{attempt}", report=True)
        try:
            # Wait until it is well into its appends, then kill it without warning.
            seen = 0
            while seen < 200 + attempt * 37:
                line = proc.stdout.readline()
                assert line, "writer died on its own"
                seen += 1
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
        with Store.in_dir(state_dir) as s:
            verdict = ledger.verify(s)
            assert verdict.ok, verdict.describe()
            assert verdict.count >= 200
            # The store still takes appends after the crash.
            ledger.append(s, "supervisor_start", source="test")
            assert ledger.verify(s).ok
    assert loom("ledger", "verify").returncode == 0


def raw(state_dir: Path) -> sqlite3.Connection:
    return sqlite3.connect(state_dir / DB_NAME, isolation_level=None)


def test_edit_is_named(store, state_dir, loom):
    fill(store, 30)
    with raw(state_dir) as db:
        db.execute("""UPDATE ledger SET detail = '{"i":999}' WHERE id = 17""")
    verdict = ledger.verify(store)
    assert not verdict.ok and verdict.bad_id == 17 and "edited" in verdict.reason
    result = loom("ledger", "verify")
    assert result.returncode == 1 and "event 17" in result.stderr


@pytest.mark.parametrize("column,value", [("kind", "'forged'"), ("source", "'x'"), ("cause", "'x'"), ("ts", "ts + 1"),
                                          ("ts", "9e999"), ("kind", "5"), ("cause", "x'00'")])
def test_any_field_edit_is_caught(store, state_dir, column, value):
    fill(store, 10)
    with raw(state_dir) as db:
        db.execute(f"UPDATE ledger SET {column} = {value} WHERE id = 4")
    verdict = ledger.verify(store)
    assert (verdict.ok, verdict.bad_id) == (False, 4)


@pytest.mark.parametrize("head", ["not json", "[1, 2]", '{"id": "9", "hash": "x"}', '{"hash": "x"}', "null"])
def test_an_unreadable_head_record_is_named_not_a_traceback(store, state_dir, loom, head):
    # verify is the tool for an edited ledger: an edited head record ended it in a traceback.
    fill(store, 5)
    with raw(state_dir) as db:
        db.execute("UPDATE meta SET value = ? WHERE key = ?", (head, ledger.HEAD_KEY))
    verdict = ledger.verify(store)
    assert not verdict.ok and "head record is unreadable" in verdict.reason
    result = loom("ledger", "verify")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr


def test_deletion_is_named(store, state_dir, loom):
    fill(store, 30)
    with raw(state_dir) as db:
        db.execute("DELETE FROM ledger WHERE id = 12")
    verdict = ledger.verify(store)
    assert not verdict.ok and verdict.bad_id == 12 and "deleted" in verdict.reason
    result = loom("ledger", "verify")
    assert result.returncode == 1 and "event 12" in result.stderr


def test_deleting_the_last_events_is_caught(store, state_dir):
    fill(store, 30)
    with raw(state_dir) as db:
        db.execute("DELETE FROM ledger WHERE id > 27")
    verdict = ledger.verify(store)
    assert not verdict.ok and verdict.bad_id == 28


def test_renumbered_deletion_is_caught(store, state_dir):
    fill(store, 10)
    with raw(state_dir) as db:
        db.execute("DELETE FROM ledger WHERE id = 5")
        db.execute("UPDATE ledger SET id = id - 1 WHERE id > 5")
    verdict = ledger.verify(store)
    assert not verdict.ok and verdict.bad_id == 5


def test_swap_is_named(store, state_dir, loom):
    fill(store, 30)
    with raw(state_dir) as db:
        db.execute("UPDATE ledger SET id = -1 WHERE id = 9")
        db.execute("UPDATE ledger SET id = 9 WHERE id = 10")
        db.execute("UPDATE ledger SET id = 10 WHERE id = -1")
    verdict = ledger.verify(store)
    assert not verdict.ok and verdict.bad_id == 9
    result = loom("ledger", "verify")
    assert result.returncode == 1 and "event 9" in result.stderr


def test_swapping_contents_is_caught(store, state_dir):
    fill(store, 10)
    with raw(state_dir) as db:
        a = db.execute("SELECT detail FROM ledger WHERE id = 3").fetchone()[0]
        b = db.execute("SELECT detail FROM ledger WHERE id = 6").fetchone()[0]
        db.execute("UPDATE ledger SET detail = ? WHERE id = 3", (b,))
        db.execute("UPDATE ledger SET detail = ? WHERE id = 6", (a,))
    assert ledger.verify(store).bad_id == 3


def test_tail_and_json(store, loom):
    fill(store, 25)
    ledger.append(store, "operator_alert", source="t", detail={"text": "[/bold] \x1b[31mred\x07"})
    events = ledger.tail(store, 5)
    assert [e.id for e in events] == [22, 23, 24, 25, 26]
    result = loom("ledger", "tail", "-n", "3")
    assert result.returncode == 0
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 3 and "operator_alert" in lines[-1]
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    result = loom("ledger", "tail", "-n", "2", "--json")
    import json

    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["id"] for r in rows] == [25, 26]
    assert rows[1]["detail"]["text"] == "[/bold] \x1b[31mred\x07"


def test_tail_pages_back_and_filters_by_text_as_the_timeline_does(store, loom):
    # What the console's timeline of another host's agent asks that host's Loom for, a page at a time.
    fill(store, 25)
    ledger.append(store, "relaunch", source="watchdog", cause="crash", detail={"mode": "resume"})
    result = loom("ledger", "tail", "--json", "-n", "3", "--before", "20")
    assert result.returncode == 0, result.stderr
    assert [json.loads(line)["id"] for line in result.stdout.splitlines()] == [17, 18, 19]
    result = loom("ledger", "tail", "--json", "-n", "5", "--text", "resume", "--agent", "main")
    assert [json.loads(line)["kind"] for line in result.stdout.splitlines()] == ["relaunch"]
    assert loom("ledger", "tail", "--before", "x").returncode == 2


def test_page_is_newest_first_and_filters(store):
    fill(store, 50)
    ledger.append(store, "relaunch", source="watchdog", cause="crash", detail={"mode": "resume"})
    first = ledger.page(store, limit=10)
    assert [e.id for e in first] == list(range(51, 41, -1))
    second = ledger.page(store, before_id=first[-1].id, limit=10)
    assert second[0].id == 41
    assert [e.kind for e in ledger.page(store, kinds=["relaunch"])] == ["relaunch"]
    assert [e.id for e in ledger.page(store, text="crash")] == [51]
    assert ledger.page(store, text="100%") == []


def test_secrets_never_reach_the_ledger(store):
    from loomtui import redact

    redact.register("123456:SECRET-token-value")
    event = ledger.append(store, "loop_error", source="t", detail={"error": "bad token 123456:SECRET-token-value"})
    assert "SECRET" not in str(event.detail)
    assert "SECRET" not in str(store.query("SELECT detail FROM ledger")[0][0])
    assert ledger.verify(store).ok


def test_store_files_are_private(store, state_dir):
    fill(store, 3)
    for path in [state_dir / DB_NAME, state_dir / f"{DB_NAME}-wal", state_dir / f"{DB_NAME}-shm"]:
        if path.exists():
            assert path.stat().st_mode & 0o777 == 0o600, path


def test_migrations_recorded_and_idempotent(store, state_dir):
    assert store.schema_version() >= 1
    again = Store.in_dir(state_dir)
    assert again.migrate() == []
    again.close()


def test_several_connections_opening_a_new_store_at_once_all_open_it(tmp_path):
    """A new file is in rollback mode until one of them switches it to WAL, and two switching at
    once deadlock: SQLite answers "locked" at once, with no busy wait (CI saw `loom status` over
    two agents fail so on a fresh state dir); and one that looks while another has just begun the
    log must not take the new store for a lost one. Each round a new file, four connections at once."""
    import threading

    failures: list[BaseException] = []
    for n in range(60):
        path = tmp_path / f"round-{n}" / DB_NAME
        path.parent.mkdir()
        gate = threading.Barrier(4)

        def one(path: Path = path, gate: threading.Barrier = gate) -> None:
            gate.wait()
            try:
                Store(path).close()
            except Exception as exc:  # noqa: BLE001 - every failure is the finding
                failures.append(exc)

        threads = [threading.Thread(target=one) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not failures, failures[:3]
    with Store(tmp_path / "round-0" / DB_NAME) as store:
        assert store.pragma("journal_mode") == "wal" and store.migrate() == []


def test_corrupt_store_is_a_clear_error(state_dir, loom):
    state_dir.mkdir(mode=0o700)
    (state_dir / DB_NAME).write_bytes(b"this is not a database" * 100)
    result = loom("status")
    assert result.returncode != 0
    assert str(state_dir / DB_NAME) in result.stderr
    assert "Traceback" not in result.stderr


def test_truncated_store_is_detected(state_dir, loom):
    state_dir.mkdir(mode=0o700)
    with Store.in_dir(state_dir) as s:
        fill(s, 2000)
        s.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    path = state_dir / DB_NAME
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    result = loom("doctor")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout


def test_an_unknown_kind_is_refused_and_nothing_is_written(tmp_path):
    with Store.in_dir(tmp_path) as store:
        ledger.append(store, "inject", source="t")
        with pytest.raises(ValueError, match="unknown ledger event kind 'relaunched'"):
            ledger.append(store, "relaunched", source="t")  # a typo of "relaunch"
        assert [e.kind for e in ledger.tail(store, 10)] == ["inject"]
        assert ledger.verify(store).ok
