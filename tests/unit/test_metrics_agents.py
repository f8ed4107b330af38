"""A scrape with two agents: every per-agent series carries its agent and only that agent's facts;
what belongs to the host (heartbeat, outbox, ledger size, job schedules) carries no agent."""

from __future__ import annotations

import math
import os
import time

import pytest
from prometheus_client import generate_latest
from prometheus_client.core import CollectorRegistry

from loomtui.agent import holds
from loomtui.context import Context
from loomtui.daemon.metrics import StoreCollector
from loomtui.store import heartbeats, ledger, outbox

HOST_WIDE = ("loom_supervisor_heartbeat_age_seconds", "loom_outbox_pending", "loom_ledger_events",
             "loom_outbox_oldest_pending_age_seconds", "loom_schedule_drift_seconds", "loom_notify")


def scrape(ctx: Context, loops: dict | None = None) -> dict[str, float]:
    collector = StoreCollector(ctx, lambda: loops or {"watchdog": {"ticks": 3, "errors": 0}})
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        text = generate_latest(registry).decode()
    finally:
        collector.close()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def probe(ctx: Context, nonce: str, result: str, sent: float, latency: float | None = None) -> None:
    with ctx.store.write() as db:
        db.execute("INSERT INTO canary_runs(nonce, source, session_id, launch_seq, sent_at, deadline, ack_at, latency, "
                   "result, why, agent) VALUES (?, 'canary', 's', 1, ?, ?, ?, ?, ?, '', ?)",
                   (nonce, sent, sent + 180, sent + latency if latency else None, latency, result, ctx.agent))


@pytest.fixture
def two(tmp_path):
    config = tmp_path / "loom.toml"
    config.write_text(f"""state_dir = "{tmp_path / 'state'}"
[canary]
interval = "10m"
[[agents]]
name = "alpha"
tmux_socket = "loomtest-metrics-{tmp_path.name[-6:]}"
[[agents]]
name = "beta"
tmux_socket = "loomtest-metrics-{tmp_path.name[-6:]}"
driver = "stream-json"
[agents.canary]
interval = "3m"
[agents.watchdog]
ceiling_count = 4
""")
    ctx = Context.load(str(config), None, environ={})
    beta = ctx.for_agent("beta")
    yield ctx, beta
    beta.close()
    ctx.close()


def test_each_agent_has_its_own_series_and_the_host_has_one(two):
    alpha, beta = two
    now = time.time()
    ledger.append(alpha.store, "relaunch", source="watchdog", cause="crash", detail={"mode": "resume"})
    for _ in range(2):
        ledger.append(beta.store, "relaunch", source="canary", cause="canary_failed", detail={"mode": "fresh"})
    ledger.append(beta.store, "permission_denied", source="watchdog", detail={"tools": ["Bash"]})
    probe(alpha, "a1", "ok", now - 100, 0.5)
    probe(beta, "b1", "ok", now - 900, 2.0)
    probe(beta, "b2", "miss", now - 300)
    with beta.store.write() as db:
        db.execute("INSERT INTO queue_items(job, kind, signature, sample, log, first_seen, last_seen, count, state, "
                   "nudges, agent) VALUES ('j', 'line', 's', 'x', '/l', ?, ?, 1, 'open', 0, 'beta')", (now - 7200, now))
    holds.place(beta, by="operator", reason="upgrading", until=None, source="cli", now=now)
    outbox.enqueue(alpha.store, "hello")
    heartbeats.beat(alpha.store, "supervisor", {"pid": 1, "loops": {}}, now=now - 2)

    # The daemon's loop names: each agent's watchdog named for it, the sentinel the host's.
    got = scrape(alpha, {"watchdog:alpha": {"ticks": 3, "errors": 0}, "watchdog:beta": {"ticks": 4, "errors": 1},
                         "sentinel": {"ticks": 2, "errors": 0}})

    assert got['loom_relaunches_total{agent="alpha",cause="crash",mode="resume"}'] == 1
    assert got['loom_relaunches_total{agent="beta",cause="canary_failed",mode="fresh"}'] == 2
    assert 'loom_relaunches_total{agent="alpha",cause="canary_failed",mode="fresh"}' not in got
    assert got['loom_canary_probes_total{agent="alpha",result="ok"}'] == 1
    assert got['loom_canary_probes_total{agent="beta",result="miss"}'] == 1
    assert got['loom_canary_last_latency_seconds{agent="alpha"}'] == 0.5
    assert got['loom_canary_last_latency_seconds{agent="beta"}'] == 2.0
    assert 90 <= got['loom_canary_last_ok_age_seconds{agent="alpha"}'] < 900
    assert got['loom_canary_last_ok_age_seconds{agent="beta"}'] >= 900
    assert (got['loom_canary_last_missed{agent="alpha"}'], got['loom_canary_last_missed{agent="beta"}']) == (0, 1)
    assert got['loom_queue_items{agent="beta",state="open"}'] == 1
    assert got['loom_queue_items{agent="alpha",state="open"}'] == 0
    assert got['loom_stuck_age_seconds{agent="beta",what="queue_item"}'] >= 7200
    assert got['loom_stuck_age_seconds{agent="alpha",what="queue_item"}'] == 0
    assert got['loom_hold{agent="beta",by="operator",reason="upgrading"}'] == 1
    assert got['loom_hold{agent="alpha",by="operator",reason=""}'] == 0
    # Each agent's own settings (beta's overrides), the shared backstop repeated for each.
    assert got['loom_setting_seconds{agent="alpha",setting="canary.interval"}'] == 600
    assert got['loom_setting_seconds{agent="beta",setting="canary.interval"}'] == 180
    assert got['loom_setting_ceiling_relaunches{agent="beta"}'] == 4
    assert got['loom_setting_seconds{agent="alpha",setting="sentinel.backstop"}'] == \
        got['loom_setting_seconds{agent="beta",setting="sentinel.backstop"}']
    assert got['loom_witness_ratio{agent="beta",what="relaunch"}'] == 0
    # The pump: beta runs the stream-json driver, alpha does not.
    assert got['loom_pump_queue{agent="beta"}'] == 0 and 'loom_pump_queue{agent="alpha"}' not in got
    assert got['loom_permission_denied_total{agent="beta"}'] == 1

    # The host's series: one each, no agent.
    assert got["loom_outbox_pending"] == 1 and got["loom_ledger_events_total"] == ledger.count(alpha.store) == 5
    assert 0 < got["loom_supervisor_heartbeat_age_seconds"] < 3600
    assert got['loom_loop_ticks_total{agent="alpha",loop="watchdog"}'] == 3
    assert got['loom_loop_errors_total{agent="beta",loop="watchdog"}'] == 1
    assert got['loom_loop_ticks_total{agent="",loop="sentinel"}'] == 2  # the host's: no agent, to Prometheus
    for series in got:
        family = series.split("{")[0]
        if any(family.startswith(h) for h in HOST_WIDE):
            assert "agent=" not in series, series
        elif family.startswith("loom_"):
            assert 'agent="' in series, series


def test_a_probe_under_way_is_no_count_and_an_agent_never_acked_ages_from_its_first_probe(two):
    """The probes counter only rises: a run counted pending then ok had made `pending` fall. And an
    agent whose probes all missed (a permission prompt eating each one) had an ack age of NaN,
    which no alert's comparison can fire on."""
    alpha, beta = two
    now = time.time()
    probe(alpha, "a1", "pending", now - 10)
    probe(beta, "b1", "miss", now - 3000)
    probe(beta, "b2", "miss", now - 1200)
    got = scrape(alpha)
    assert not [series for series in got if series.startswith("loom_canary_probes_total") and "pending" in series]
    assert 'loom_canary_probes_total{agent="alpha",result="ok"}' not in got
    assert got['loom_canary_probes_total{agent="beta",result="miss"}'] == 2
    assert 3000 <= got['loom_canary_last_ok_age_seconds{agent="beta"}'] < 3600
    assert 10 <= got['loom_canary_last_ok_age_seconds{agent="alpha"}'] < 600  # its one probe, still under way
    with alpha.store.write() as db:
        db.execute("DELETE FROM canary_runs")
    assert math.isnan(scrape(alpha)['loom_canary_last_ok_age_seconds{agent="alpha"}'])  # no probe yet: no age


def test_the_pump_gauges_say_a_turn_only_while_the_pump_that_wrote_them_runs(two):
    import json
    import subprocess
    import sys

    _, beta = two
    now = time.time()

    def pump_file(pid: int, started: float) -> dict[str, float]:
        (beta.agent_dir / "pump.json").write_text(json.dumps({
            "pid": pid, "started": started, "turn": "running", "turn_started": now - 600, "queue": 2}))
        got = scrape(beta)
        return {k: got[f'{k}{{agent="beta"}}'] for k in ("loom_pump_turn_running", "loom_pump_queue",
                                                          "loom_pump_turn_age_seconds")}

    alive = pump_file(os.getpid(), now)  # this process: it runs, and began before the file says
    assert alive["loom_pump_turn_running"] == 1 and alive["loom_pump_queue"] == 2
    assert alive["loom_pump_turn_age_seconds"] >= 600
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = pump_file(gone.pid, now)  # killed, its file left saying a turn runs
    assert dead == {"loom_pump_turn_running": 0, "loom_pump_queue": 0, "loom_pump_turn_age_seconds": 0}
    reused = pump_file(os.getpid(), now - 3600 * 24 * 400)  # the pid now another process's, begun later
    assert reused["loom_pump_turn_running"] == 0


def test_a_queue_item_waits_toward_its_backstop_only_while_open_and_untold(two):
    """LoomQueueItemPastBackstop compares this age with the backstop: an item the agent claimed is
    under its witness window (a daily job's is a day), one sent to the operator has reached them."""
    alpha, _ = two
    now = time.time()

    def item(state: str, first_seen: float, **more) -> None:
        columns = {"job": "j", "kind": "line", "signature": f"s{first_seen}", "sample": "x", "log": "/l",
                   "first_seen": first_seen, "last_seen": now, "count": 1, "state": state, "nudges": 1,
                   "agent": "alpha", **more}
        with alpha.store.write() as db:
            db.execute(f"INSERT INTO queue_items({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})",
                       tuple(columns.values()))

    def waited() -> float:
        return scrape(alpha)['loom_stuck_age_seconds{agent="alpha",what="queue_item"}']

    item("claimed", now - 7200, claimed_at=now - 7000)
    item("witnessed", now - 9000, witnessed_at=now - 100)
    item("open", now - 5000, escalated_at=now - 3000)
    assert waited() == 0
    item("open", now - 600)
    assert 600 <= waited() < 900


def test_the_hooks_loop_of_the_main_agent_is_labelled_main(tmp_path):
    config = tmp_path / "loom.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n[agent]\ntmux_socket = "loomtest-m2-{tmp_path.name[-6:]}"\n')
    ctx = Context.load(str(config), None, environ={})
    try:
        got = scrape(ctx, {"hooks": {"ticks": 5, "errors": 0}, "sentinel": {"ticks": 1, "errors": 0}})
    finally:
        ctx.close()
    assert got['loom_loop_ticks_total{agent="main",loop="hooks"}'] == 5
    assert got['loom_loop_ticks_total{agent="",loop="sentinel"}'] == 1


def test_a_single_agent_is_labelled_main(tmp_path):
    config = tmp_path / "loom.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\n[agent]\ntmux_socket = "loomtest-m1-{tmp_path.name[-6:]}"\n')
    ctx = Context.load(str(config), None, environ={})
    try:
        ledger.append(ctx.store, "relaunch", source="cli", cause="operator_fresh", detail={"mode": "fresh"})
        got = scrape(ctx)
    finally:
        ctx.close()
    assert got['loom_relaunches_total{agent="main",cause="operator_fresh",mode="fresh"}'] == 1
    assert got['loom_held{agent="main"}'] == 0
    assert not [s for s in got if 'agent="' in s and 'agent="main"' not in s]


def test_an_ok_whose_latency_is_not_known_is_the_last_ok_but_gives_no_latency(two):
    # A dead prober's probe acked, settled after a step of the wall clock: how long it took cannot
    # be told (canary.runs.settle_stale). The scrape still answers: its age counts, its latency is NaN.
    alpha, _beta = two
    now = time.time()
    probe(alpha, "a1", "ok", now - 100)
    got = scrape(alpha)
    assert math.isnan(got['loom_canary_last_latency_seconds{agent="alpha"}'])
    assert 90 <= got['loom_canary_last_ok_age_seconds{agent="alpha"}'] < 900


def test_the_names_a_loopback_endpoint_answers_to():
    from loomtui.daemon.metrics import host_names

    assert host_names("127.0.0.1", 9464) == {"127.0.0.1:9464", "localhost:9464"}
    assert host_names("0:0:0:0:0:0:0:1", 9464) == {"[::1]:9464", "localhost:9464"}
    assert host_names("localhost", 9464) == {"localhost:9464", "127.0.0.1:9464", "[::1]:9464"}
    assert "evil.example:9464" not in host_names("127.0.0.1", 9464)
