"""A console-worthy state written through the real store: ledger, canary runs, queue, jobs, memory.

Times are fixed (NOW) so the console renders the same on every run; text includes the hostile
kind (markup-looking brackets, ANSI escapes, control characters) that must render literally.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from loomtui.agent.recovery import HOLD_KEY
from loomtui.context import Context
from loomtui.store import heartbeats, ledger, session
from loomtui.store.db import Store

NOW = 1_795_000_000.0  # fixed "now" for the console in snapshot tests
HOSTILE = "[/foo] [bold]x [link=x]y \x1b[31mred\x1b[0m bell\x07 [/]"
SESSION_A = "aaaaaaaa-1111-4111-8111-111111111111"
SESSION_B = "bbbbbbbb-2222-4222-8222-222222222222"


def write_config(root: Path, *, socket: str, hostile_job: bool = True, extra: str = "") -> Path:
    memory = root / "memory"
    memory.mkdir(parents=True, exist_ok=True)
    (memory / "MEMORY.md").write_text(
        "# Memory\n\n- [Operator](operator.md) — who runs this box\n"
        f"- [Hostile](hostile.md) — {HOSTILE.replace(chr(27), '').replace(chr(7), '')}\n"
        "- [Gone](gone.md) — points at a missing file\n"
    )
    (memory / "operator.md").write_text("# Operator\n\nPrefers short messages.\n")
    (memory / "hostile.md").write_bytes(b"# [bold]Hostile[/bold]\n\n[link=x]click[/link] \x1b[31mred\x1b[0m \xff\xfe bad utf-8\n")
    (memory / "orphan.md").write_text("# Orphan\n")
    job_name = "news[/bold]letter" if hostile_job else "newsletter"
    config = root / "config.toml"
    config.write_text(f"""state_dir = "{root / 'state'}"
[agent]
tmux_socket = "{socket}"
cwd = "{root}"
[memory]
dir = "{memory}"
[[jobs]]
name = {json.dumps(job_name)}
log = "{root / 'logs' / 'news.log'}"
schedule = "every 10m"
[[jobs]]
name = "backup"
log = "{root / 'logs' / 'backup.log'}"
schedule = "0 7 * * *"
{extra}""")
    return config


def populate(ctx: Context, *, hostile_job: str = "news[/bold]letter", held: bool = False) -> None:
    store: Store = ctx.store
    t = NOW - 3600
    with store.write() as db:
        session.pin_in(db, SESSION_B)
    ledger.append(store, "supervisor_start", source="supervisor", detail={"pid": 1}, ts=t)
    ledger.append(store, "relaunch", source="cli", cause="operator_fresh",
                  detail={"mode": "fresh", "old_session": None, "new_session": SESSION_A}, ts=t + 10)
    ledger.append(store, "inject", source="cli", detail={"length": 12, "digest": "abc", "ok": True}, ts=t + 20)
    runs = [
        (t + 60, "ok", 0.8, ""), (t + 660, "miss", None, ""), (t + 840, "miss", None, ""),
        (t + 1020, "skipped", None, "a relaunch is under way"), (t + 1100, "ok", 1.4, ""),
        (t + 1800, "error", None, f"acks dir gone {HOSTILE}"), (t + 2400, "ok", 0.6, ""),
    ]
    for i, (sent, result, latency, why) in enumerate(runs, start=1):
        with store.write() as db:
            db.execute(
                "INSERT INTO canary_runs(nonce, source, session_id, launch_seq, sent_at, deadline, ack_at, latency, "
                "result, why) VALUES (?, 'canary', ?, 2, ?, ?, ?, ?, ?, ?)",
                (f"nonce{i}", SESSION_A, sent, sent + 180, sent + latency if latency else None, latency, result, why))
        ledger.append(store, "canary", source="canary", cause=None if result == "ok" else result,
                      detail={"run": i, "result": result, **({"latency": latency} if latency else {})}, ts=sent + 1)
        if i == 3:
            ledger.append(store, "relaunch", source="canary", cause="canary_failed",
                          detail={"mode": "resume", "old_session": SESSION_A, "new_session": SESSION_A}, ts=sent + 2)
        if i == 4:
            ledger.append(store, "relaunch", source="canary", cause="canary_failed",
                          detail={"mode": "fresh", "old_session": SESSION_A, "new_session": SESSION_B}, ts=sent + 3)
    ledger.append(store, "foreign_poller_reaped", source="watchdog", detail={"pid": 4242, "name": HOSTILE}, ts=t + 2000)
    with store.write() as db:
        db.execute("INSERT INTO job_runs(job, started, ended, exit_code, duration, failure_lines) "
                   "VALUES (?, ?, ?, 1, 2.5, 1)", (hostile_job, t + 3000, t + 3002.5))
        db.execute("INSERT INTO job_runs(job, started, ended, exit_code, duration) VALUES ('backup', ?, ?, 0, 31)",
                   (t + 100, t + 131))
        db.execute(
            "INSERT INTO queue_items(job, kind, signature, sample, log, first_seen, last_seen, count, state, nudges) "
            "VALUES (?, 'line', 'sig1', ?, '/var/log/news.log', ?, ?, 3, 'open', 2)",
            (hostile_job, f"Traceback {HOSTILE}", t + 3003, t + 3300))
        db.execute(
            "INSERT INTO queue_items(job, kind, signature, sample, log, first_seen, last_seen, count, state, nudges, "
            "claimed_at, claimed_by, note) VALUES ('backup', 'exit', 'sig2', 'run 7 exited 2', '/var/log/b.log', ?, ?, "
            "1, 'claimed', 1, ?, 'cli', ?)",
            (t + 200, t + 200, t + 400, f"fixed the path {HOSTILE}"))
        db.execute(
            "INSERT INTO queue_items(job, kind, signature, sample, log, first_seen, last_seen, count, state, nudges, "
            "witnessed_at) VALUES ('backup', 'line', 'sig3', 'ERROR disk full', '/var/log/b.log', ?, ?, 1, "
            "'witnessed', 1, ?)", (t + 50, t + 50, t + 500))
        if held:
            store.set_meta(HOLD_KEY, json.dumps({"ts": NOW - 60, "cause": "crash", "reasons": ["ceiling"]}), db)
            ledger.append_in(db, "escalation", source="watchdog", cause="crash", detail={"held": True}, ts=NOW - 60)
    heartbeats.beat(store, "supervisor", {"pid": 1, "loops": {}}, now=NOW - 2)


async def until(pilot, predicate, what: str, timeout: float = 60.0) -> None:
    """Poll a console under test for a state, up to a generous deadline (never a bare sleep)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)


@pytest.fixture
def utc():
    """Console times rendered in UTC, whatever the machine's zone (snapshots compare exact text)."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


@pytest.fixture(name="ctx")
def held_console_ctx(tmp_path, request):
    """The console-worthy state, held at the ceiling, with a tmux socket that has no server."""
    config = write_config(tmp_path, socket=f"loomtest-{request.module.__name__.rpartition('_')[2]}-absent")
    context = Context.load(str(config), None, environ={})
    populate(context, held=True)
    yield context
    context.close()


def write_agents_config(root: Path, *, socket: str, names: tuple[str, ...] = ("alpha", "beta"),
                        own_memory: tuple[str, ...] = ()) -> Path:
    """Several agents on one (absent) tmux server, one job each; the memory directory is shared but
    by the agents in `own_memory`, which have one of their own."""
    memory = root / "memory"
    memory.mkdir(parents=True, exist_ok=True)
    (memory / "MEMORY.md").write_text("# Memory\n\n- [Operator](operator.md) — who runs this box\n")
    (memory / "operator.md").write_text("# Operator\n\nPrefers short messages.\n")
    lines = [f'state_dir = "{root / "state"}"', "[memory]", f'dir = "{memory}"']
    for name in names:
        lines += ["[[agents]]", f'name = "{name}"', f'tmux_socket = "{socket}"', f'cwd = "{root}"']
        if name in own_memory:
            own = root / f"memory-{name}"
            own.mkdir(parents=True, exist_ok=True)
            (own / "MEMORY.md").write_text(f"# Memory\n\n- [{name.title()}]({name}.md) — {name}'s own notes\n")
            (own / f"{name}.md").write_text(f"# {name.title()}\n\nOnly {name} reads this.\n")
            lines += ["[agents.memory]", f'dir = "{own}"']
    for name in names:
        lines += ["[[jobs]]", f'name = "{name}-job"', f'log = "{root / "logs" / name}.log"', 'schedule = "every 10m"',
                  f'agent = "{name}"']
    config = root / "config.toml"
    config.write_text("\n".join(lines) + "\n")
    return config


def populate_agents(ctx: Context) -> None:
    """Two agents' rows in one store, told apart: alpha acked and is idle; beta missed, was
    relaunched twice in the last hour, has a failing job's open item and an operator's hold."""
    store: Store = ctx.store
    heartbeats.beat(store, "supervisor", {"pid": 1, "loops": {}}, now=NOW - 2)
    rows = [("alpha", NOW - 600, "ok", 0.7), ("beta", NOW - 900, "ok", 1.1), ("beta", NOW - 300, "miss", None)]
    for n, (agent, sent, result, latency) in enumerate(rows, start=1):
        with store.write() as db:
            db.execute(
                "INSERT INTO canary_runs(nonce, source, session_id, launch_seq, sent_at, deadline, ack_at, latency, "
                "result, why, agent) VALUES (?, 'canary', ?, 1, ?, ?, ?, ?, ?, '', ?)",
                (f"n{n}", SESSION_A, sent, sent + 180, sent + latency if latency else None, latency, result, agent))
            ledger.append_in(db, "canary", source="canary", cause=None if result == "ok" else result,
                             detail={"run": n, "result": result}, ts=sent + 1, agent=agent)
    for ts in (NOW - 2000, NOW - 200):
        ledger.append(store, "relaunch", source="canary", cause="canary_failed", agent="beta",
                      detail={"mode": "resume", "old_session": SESSION_B, "new_session": SESSION_B}, ts=ts)
    ledger.append(store, "relaunch", source="cli", cause="operator_fresh", agent="alpha",
                  detail={"mode": "fresh", "old_session": None, "new_session": SESSION_A}, ts=NOW - 3 * 3600)
    with store.write() as db:
        db.execute(
            "INSERT INTO queue_items(job, kind, signature, sample, log, first_seen, last_seen, count, state, nudges, "
            "agent) VALUES ('beta-job', 'line', 'sig1', ?, '/var/log/beta.log', ?, ?, 2, 'open', 1, 'beta')",
            (f"Traceback {HOSTILE}", NOW - 1200, NOW - 100))
    beta = ctx.for_agent("beta")
    try:
        with beta.store.write() as db:
            beta.store.set_meta(beta.store.agent_key(HOLD_KEY),
                                json.dumps({"by": "operator", "reason": "swapping [b]model[/b]", "ts": NOW - 60,
                                            "until": NOW + 1740}), db)
    finally:
        beta.close()
