"""The ledger's head off the machine: `loom ledger head`, `loom ledger verify --head`, the head in
every escalation and the daily Telegram line. The rewrite the chain alone cannot see is done on the
real SQLite file with the ledger's own hash function, as an agent running as the same user could."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import threading
from pathlib import Path

import pytest

from loomtui.agent import recovery
from loomtui.agent.policy import Decision
from loomtui.timing import Instant
from loomtui.context import Context
from loomtui.daemon import head_notice
from loomtui.store import ledger, outbox
from loomtui.store.db import DB_NAME, Store

T0 = 1_800_000_000.0  # 2027-01-15 08:00 UTC


@pytest.fixture
def store(state_dir):
    state_dir.mkdir(mode=0o700)
    s = Store.in_dir(state_dir)
    yield s
    s.close()


def fill(store: Store, n: int) -> None:
    for i in range(n):
        ledger.append(store, "inject", source="t", detail={"i": i})


def rewrite(state_dir: Path, event_id: int, detail: dict) -> None:
    """Edit one event, then recompute its hash, every later one and the stored head, in the file."""
    db = sqlite3.connect(state_dir / DB_NAME, isolation_level=None)
    db.row_factory = sqlite3.Row
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("UPDATE ledger SET detail = ? WHERE id = ?", (ledger.canonical(detail), event_id))
        prev = db.execute("SELECT hash FROM ledger WHERE id = ?", (event_id - 1,)).fetchone()
        prev_hash = prev["hash"] if prev else ledger.GENESIS
        last = 0
        for r in db.execute("SELECT * FROM ledger WHERE id >= ? ORDER BY id", (event_id,)).fetchall():
            digest = ledger.event_hash(prev_hash, r["id"], r["ts"], r["kind"], r["source"], r["cause"], r["detail"],
                                       r["agent"])
            db.execute("UPDATE ledger SET prev_hash = ?, hash = ? WHERE id = ?", (prev_hash, digest, r["id"]))
            prev_hash, last = digest, r["id"]
        db.execute("UPDATE meta SET value = ? WHERE key = ?",
                   (ledger.canonical({"id": last, "hash": prev_hash}), ledger.HEAD_KEY))
        db.execute("COMMIT")
    finally:
        db.close()


def test_head_prints_the_newest_event_and_an_empty_ledger_the_genesis(store, loom):
    assert loom("ledger", "head").stdout.strip() == f"0:{ledger.GENESIS}"
    fill(store, 5)
    newest = ledger.tail(store, 1)[0]
    result = loom("ledger", "head")
    assert result.returncode == 0 and result.stdout.strip() == f"{newest.id}:{newest.hash}"


def test_a_rewrite_with_every_hash_recomputed_passes_verify_but_not_verify_head(store, state_dir, loom):
    fill(store, 20)
    kept = loom("ledger", "head").stdout.strip()
    older = f"10:{ledger.tail(store, 20)[9].hash}"
    assert loom("ledger", "verify", "--head", kept).returncode == 0
    assert loom("ledger", "verify", "--head", older).returncode == 0  # an older kept head leads here too
    fill(store, 3)  # the ledger goes on after the head was kept

    rewrite(state_dir, 7, {"i": 999, "forged": True})
    assert ledger.tail(store, 30)[6].detail == {"i": 999, "forged": True}
    plain = loom("ledger", "verify")
    assert plain.returncode == 0 and "intact" in plain.stdout  # the chain alone cannot tell

    for head, seq in ((kept, 20), (older, 10)):
        caught = loom("ledger", "verify", "--head", head)
        assert caught.returncode == 1
        line = caught.stderr.strip()
        assert f"event {seq}" in line and head.split(":")[1] in line and "rewritten" in line
    # A head kept before the rewritten event still verifies: the history up to it is untouched.
    assert loom("ledger", "verify", "--head", f"6:{ledger.tail(store, 30)[5].hash}").returncode == 0


def test_events_removed_and_the_chain_rebuilt_are_caught_by_the_kept_head(store, state_dir, loom):
    fill(store, 8)
    kept = loom("ledger", "head").stdout.strip()
    with sqlite3.connect(state_dir / DB_NAME, isolation_level=None) as db:
        db.execute("DELETE FROM ledger WHERE id > 5")
        last = db.execute("SELECT hash FROM ledger WHERE id = 5").fetchone()[0]
        db.execute("UPDATE meta SET value = ? WHERE key = ?", (json.dumps({"id": 5, "hash": last}), ledger.HEAD_KEY))
    assert loom("ledger", "verify").returncode == 0
    result = loom("ledger", "verify", "--head", kept)
    assert result.returncode == 1 and "event 8" in result.stderr and "ends at event 5" in result.stderr


def test_verify_head_edge_cases(store, loom):
    fill(store, 3)
    h3 = ledger.tail(store, 1)[0].hash
    beyond = loom("ledger", "verify", "--head", f"4:{h3}")
    assert beyond.returncode == 1 and "event 4" in beyond.stderr and "ends at event 3" in beyond.stderr
    wrong = loom("ledger", "verify", "--head", f"2:{h3}")
    assert wrong.returncode == 1 and "event 2" in wrong.stderr
    assert loom("ledger", "verify", "--head", f"0:{ledger.GENESIS}").returncode == 0
    assert loom("ledger", "verify", "--head", f"0:{h3}").returncode == 1
    assert loom("ledger", "verify", "--head", f" 3:{h3.upper()}\n").returncode == 0  # as pasted from a chat
    for bad in ("", "3", f"3{h3}", f"3:{h3[:-1]}", f"3:{h3}0", f"-1:{h3}", f"x:{h3}", f"3:{'g' * 64}", "3:\x1b[31m"):
        result = loom("ledger", "verify", f"--head={bad}")  # `=`: argparse takes "-1:…" for an option otherwise
        assert result.returncode == 2, bad
        line = result.stderr.strip()
        assert len(line.splitlines()) == 1 and line.startswith("loom: ledger verify --head: expected SEQ:HASH")
        assert "\x1b" not in line


def test_verify_head_in_process_names_the_mismatch(store):
    fill(store, 4)
    newest = ledger.head(store)
    assert ledger.verify(store, kept=newest).ok
    verdict = ledger.verify(store, kept=(2, "0" * 64))
    assert (verdict.ok, verdict.bad_id) == (False, 2) and "rewritten" in verdict.reason
    assert ledger.verify(store, batch=1, kept=(9, newest[1])).bad_id == 9
    with pytest.raises(ValueError, match="SEQ:HASH"):
        ledger.parse_head("4:" + "z" * 64)


def test_the_intact_chain_reads_as_far_as_it_holds(store, state_dir):
    # What the proof against a salvaged file walks: from the genesis, to the event before the first
    # that does not follow (an edit without its hashes recomputed; a deleted event).
    fill(store, 6)
    with store.read() as db:
        whole = list(ledger.intact(db, batch=2))
    assert [seq for seq, _ in whole] == [1, 2, 3, 4, 5, 6] and whole[-1] == ledger.head(store)
    db = sqlite3.connect(state_dir / DB_NAME, isolation_level=None)
    try:
        db.execute("UPDATE ledger SET detail = '{\"i\":99}' WHERE id = 5")
        assert [seq for seq, _ in ledger.intact(db)] == [1, 2, 3, 4]
        db.execute("DELETE FROM ledger WHERE id = 3")
        assert [seq for seq, _ in ledger.intact(db)] == [1, 2]
    finally:
        db.close()


def test_every_escalation_carries_the_head_it_made(tmp_path, loom, state_dir):
    ctx = Context.load(None, str(state_dir), environ={})
    try:
        fill(ctx.store, 2)
        decision = Decision("hold", escalate=True, reasons=("6 relaunches in 1h",))
        recovery.escalate(ctx, "crash", decision, "watchdog", Instant(T0))
        [event] = [e for e in ledger.tail(ctx.store, 10) if e.kind == "escalation"]
        [message] = outbox.recent(ctx.store)
        head = f"{event.id}:{event.hash}"
        assert message.text.endswith(f" ledger {head}")
        assert loom("ledger", "verify", "--head", head).returncode == 0
    finally:
        ctx.close()


def test_the_daily_line_is_sent_once_a_day_and_survives_a_restart(state_dir):
    utc = dt.timezone.utc
    ctx = Context.load(None, str(state_dir), environ={})
    try:
        fill(ctx.store, 3)
        seq, digest = ledger.head(ctx.store)
        first = head_notice.send_daily(ctx, T0, utc)
        assert first is not None
        assert head_notice.send_daily(ctx, T0 + 3600, utc) is None  # the same day: nothing new
        [row] = outbox.recent(ctx.store)
        assert (row.id, row.dedupe_key) == (first, "ledger_head:2027-01-15")
        assert f" {seq}:{digest} " in row.text and row.text.startswith("Loom ledger head on 2027-01-15: ")
    finally:
        ctx.close()
    again = Context.load(None, str(state_dir), environ={})  # a restarted daemon, the same day
    try:
        assert head_notice.send_daily(again, T0 + 7200, utc) is None
        fill(again.store, 1)
        second = head_notice.send_daily(again, T0 + 86_400, utc)
        assert second is not None and outbox.get(again.store, second).dedupe_key == "ledger_head:2027-01-16"
        assert ledger.format_head(*ledger.head(again.store)) in outbox.get(again.store, second).text
        assert len(outbox.recent(again.store)) == 2
    finally:
        again.close()


def test_the_day_is_the_local_day():
    late = dt.timezone(dt.timedelta(hours=-10))  # 08:00 UTC on the 15th is 22:00 on the 14th here
    assert head_notice.day_key(T0, late) == "ledger_head:2027-01-14"
    assert head_notice.day_key(T0, dt.timezone.utc) == "ledger_head:2027-01-15"


def test_the_daemons_loop_looks_first_one_period_after_its_start(state_dir):
    ctx = Context.load(None, str(state_dir), environ={})
    try:
        fill(ctx.store, 1)
        step = head_notice.head_tick(ctx, threading.Event())
        assert step() is None and outbox.recent(ctx.store) == []  # the tick at the daemon's start
        assert step() is not None  # PERIOD later: today's line
        assert step() is None and len(outbox.recent(ctx.store)) == 1
    finally:
        ctx.close()
