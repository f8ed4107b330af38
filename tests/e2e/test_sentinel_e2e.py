"""The sentinel end to end: a failing job reaches the real demo agent in tmux, a claim is witnessed or reopened."""

from __future__ import annotations

import json
import re
import sys

import pytest
from harness import wait_for

pytestmark = pytest.mark.e2e

PY = sys.executable
FAIL = "print('ERROR: upstream returned 503'); raise SystemExit(3)"


def nudges(h, session: str) -> list[str]:
    return [t for t in h.transcript(session) if t.startswith("[loom sentinel]")]


def scan_until(h, session: str, count: int) -> list[str]:
    """Scan until `count` nudges reached the agent (none are typed while it is still booting)."""
    def step():
        result = h.loom("sentinel", "scan")
        assert "Traceback" not in result.stderr, result.stderr
        got = nudges(h, session)
        return got if len(got) >= count else None

    return wait_for(step, 60, interval=0.2, what=f"{count} nudges in the agent's transcript")


def queue(h) -> dict[int, dict]:
    data = json.loads(h.loom("queue", "--json").stdout)
    return {item["id"]: item for item in data["items"]}


@pytest.mark.incident("supervisor_blind_spot")
def test_failing_job_nudges_the_agent_then_a_claim_is_witnessed_or_reopened(make_harness, tmp_path):
    log = tmp_path / "jobs" / "nightly.log"
    h = make_harness(jobs=[{"name": "nightly", "log": str(log), "schedule": "every 1h"}],
                     sections={"sentinel": {"renudge": "20m", "backstop": "30m"}})
    session = h.start()

    assert h.loom("run-job", "nightly", "--", PY, "-c", FAIL).returncode == 3
    first = scan_until(h, session, 2)
    items = queue(h)
    assert sorted(i["kind"] for i in items.values()) == ["exit", "line"]
    for item_id, item in items.items():
        [text] = [t for t in first if f"Queue item {item_id}:" in t]
        assert f'loom resolve {item_id} --note "' in text and str(log) in text and '"nightly"' in text
        assert "Read the log and the script" in text
    assert len(h.events("queue_nudge")) == 2 and len(h.events("queue_new")) == 2

    # The agent claims both from its own shell: the ledger records the source and its session.
    for item_id in items:
        res = h.loom("resolve", str(item_id), "--note", "upstream URL was stale; updated the script",
                     env={"LOOM_SESSION_ID": session})
        assert res.returncode == 0, res.stderr
    claims = h.events("queue_claim")
    assert [(e["source"], e["detail"]["session"]) for e in claims] == [("cli", session)] * 2
    assert {i["state"] for i in queue(h).values()} == {"claimed"}
    assert "2 claimed" in h.loom("queue").stdout

    assert h.loom("run-job", "nightly", "--", PY, "-c", "print('fetched 120 rows')").returncode == 0
    assert h.loom("sentinel", "scan").returncode == 0
    assert {i["state"] for i in queue(h).values()} == {"witnessed"}
    assert sorted(e["detail"]["item"] for e in h.events("queue_witness")) == sorted(items)
    assert len(nudges(h, session)) == 2  # nothing open: nothing more typed

    # A new failure, a claim, and a next run that fails again: the claim did not hold.
    assert h.loom("run-job", "nightly", "--", PY, "-c", "raise SystemExit(4)").returncode == 4
    scan_until(h, session, 3)
    [fresh] = [i for i in queue(h).values() if i["state"] == "open"]
    assert fresh["signature"] == "exit code 4"
    assert h.loom("resolve", str(fresh["id"]), "--note", "fixed it", env={"LOOM_SESSION_ID": session}).returncode == 0
    assert h.loom("run-job", "nightly", "--", PY, "-c", "raise SystemExit(4)").returncode == 4
    latest = scan_until(h, session, 4)
    reopened = queue(h)[fresh["id"]]
    assert reopened["state"] == "open" and reopened["reopens"] == 1 and "claim did not hold" in reopened["note"]
    assert f"Queue item {fresh['id']}:" in latest[-1] and "Reopened" in latest[-1]
    assert [e["detail"]["item"] for e in h.events("queue_reopen")] == [fresh["id"]]
    assert re.search(rf"{fresh['id']}\s+open .*reopened 1x", h.loom("queue").stdout, re.S)
    assert h.loom("ledger", "verify").returncode == 0
