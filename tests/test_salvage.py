"""A damaged store met by the daemon: moved aside, a new one carries over what reads, the operator is told."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from conftest import REPO, loom_env
from harness import wait_for

from loomtui import ledger, outbox, session
from loomtui.salvage import open_or_salvage
from loomtui.store import DB_NAME, Store

SID = "12345678-aaaa-4bbb-8ccc-1234567890ab"


def fill(state_dir):
    state_dir.mkdir(mode=0o700)
    with Store.in_dir(state_dir) as store:
        with store.write() as db:
            session.pin_in(db, SID)
        for i in range(3000):
            ledger.append(store, "inject", source="t", detail={"i": i, "pad": "x" * 200})
        outbox.enqueue(store, "an unsent message", dedupe_key="k1")
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def damage(path, how):
    data = bytearray(path.read_bytes())
    if how == "truncated":
        path.write_bytes(bytes(data[: len(data) // 2]))
    elif how == "garbled":
        # Scribble over pages in the middle (the b-tree of the ledger), keep the header intact.
        for offset in range(len(data) // 3, len(data) // 3 + 8192):
            data[offset] = 0xA5
        path.write_bytes(bytes(data))
    else:
        path.write_bytes(b"not a database at all " * 100)


@pytest.mark.parametrize("how", ["truncated", "garbled", "replaced"])
def test_open_or_salvage_keeps_the_old_file_and_what_reads(state_dir, how):
    fill(state_dir)
    damage(state_dir / DB_NAME, how)
    store, salvaged = open_or_salvage(state_dir)
    try:
        assert salvaged is not None and salvaged.moved_to.exists()
        assert ledger.verify(store).ok
        [event] = ledger.tail(store, 10, kinds=["store_salvaged"])
        assert event.detail["moved_to"] == str(salvaged.moved_to)
        texts = [m.text for m in outbox.recent(store)]
        assert any("store damaged" in t for t in texts)
        if how == "garbled":
            assert session.pinned(store) == SID  # the meta page still reads: the pinned session is kept
        else:
            # Nothing readable (a truncated file loses the schema's overflow pages): the next
            # relaunch starts fresh rather than guess at a session.
            assert session.pinned(store) is None and salvaged.unreadable
    finally:
        store.close()
    again, none = open_or_salvage(state_dir)  # a healthy store is left alone
    again.close()
    assert none is None


def test_the_daemon_salvages_instead_of_crash_looping(tmp_path, state_dir):
    fill(state_dir)
    damage(state_dir / DB_NAME, "garbled")
    config = tmp_path / "config.toml"
    config.write_text(f'[agent]\ntmux_socket = "loomtest-salvage-{tmp_path.name[-6:]}"\n'
                      '[watchdog]\ninterval = "1h"\n[canary]\ninterval = "1h"\n')
    proc = subprocess.Popen([sys.executable, "-m", "loomtui", "--config", str(config), "--state-dir", str(state_dir),
                             "supervise"], env=loom_env(), cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        def beat():
            try:
                with Store.in_dir(state_dir) as store:
                    return store.heartbeats().get("supervisor")
            except Exception:
                return None
        wait_for(beat, 30, what="the daemon running on a fresh store")
        assert proc.poll() is None
        assert list(state_dir.glob(f"{DB_NAME}.damaged-*"))
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert "store damaged" in err
    with Store.in_dir(state_dir) as store:
        assert ledger.verify(store).ok
        assert json.loads(store.query_one("SELECT detail FROM ledger WHERE kind = 'store_salvaged'")[0])["moved_to"]
