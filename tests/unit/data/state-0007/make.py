"""How loom.db here was made: by the code at commit ec23f5f (the last before agents had names),
run as `python make.py OUT_DIR CHECKOUT_OF_ec23f5f`. Kept to test that the upgrade keeps an old
store's history."""
import sqlite3
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])  # a checkout of ec23f5f
from loomtui.store.db import Store
from loomtui.store import ledger, session
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
store = Store.in_dir(out)
t = 1_790_000_000.0

with store.write() as db: session.pin_in(db, "aaaaaaaa-1111-4111-8111-111111111111")
ledger.append(store, "supervisor_start", source="supervisor", detail={"pid": 1}, ts=t)
ledger.append(store, "relaunch", source="watchdog", cause="crash", detail={"mode": "resume", "new_session": "aaaaaaaa-1111-4111-8111-111111111111"}, ts=t + 10)
ledger.append(store, "canary", source="canary", detail={"result": "ok", "latency": 1.5}, ts=t + 20)
with store.write() as db:
    db.execute("INSERT INTO canary_runs(nonce, source, session_id, sent_at, deadline, ack_at, latency, result) VALUES ('n1','canary','aaaaaaaa-1111-4111-8111-111111111111',?,?,?,1.5,'ok')", (t+18, t+78, t+19.5))
    db.execute("INSERT INTO queue_items(job, kind, signature, sample, log, first_seen, last_seen) VALUES ('backup','pattern','sig1','ERROR disk full','/var/log/backup.log',?,?)", (t+30, t+30))
store.close()
c = sqlite3.connect(out / "loom.db"); c.execute("PRAGMA wal_checkpoint(TRUNCATE)"); c.execute("PRAGMA journal_mode=DELETE"); c.close()
print(sorted(p.name for p in out.iterdir()))
