"""The loop KPIs as a scrape shows them, from a real store: counters kept across restarts, the
witness ratio, schedule drift, stuck age, notify results and tick-duration histograms."""

from __future__ import annotations

import datetime as dt
import os

import pytest
from prometheus_client import generate_latest
from prometheus_client.core import CollectorRegistry
from tui_state import NOW, write_config

from loomtui.context import Context
from loomtui.daemon.metrics import StoreCollector
from loomtui.sentinel.cron import in_zone
from loomtui.sentinel.schedule import drift
from loomtui.store import counters, ledger, outbox


def test_schedule_drift_is_lateness_against_the_intended_start():
    utc = dt.timezone.utc
    on_the_hour = dt.datetime(2026, 12, 1, 4, 0, tzinfo=utc).timestamp()
    assert drift("0 * * * *", on_the_hour, None, cron=in_zone(utc)) == 0
    assert drift("0 * * * *", on_the_hour + 42, None, cron=in_zone(utc)) == pytest.approx(42)
    assert drift("0 * * * *", on_the_hour - 1, None, cron=in_zone(utc)) == pytest.approx(3599)  # the 03:00 run, very late
    assert drift("every 10m", on_the_hour + 630, on_the_hour, cron=in_zone(utc)) == pytest.approx(30)
    assert drift("every 10m", on_the_hour + 590, on_the_hour, cron=in_zone(utc)) == pytest.approx(-10)
    assert drift("every 10m", on_the_hour, None, cron=in_zone(utc)) is None
    assert drift("", on_the_hour, on_the_hour, cron=in_zone(utc)) is None


def scrape(ctx: Context) -> dict[str, float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(ctx, lambda: {}))
    out = {}
    for line in generate_latest(registry).decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


@pytest.fixture
def ctx(tmp_path):
    config = write_config(tmp_path, socket=f"loomtest-kpi-{tmp_path.name[-6:]}", hostile_job=False)
    c = Context.load(str(config), None, environ={})
    yield c
    c.close()


def test_a_scrape_shows_the_loop_kpis_the_store_implies(ctx):
    store = ctx.store
    tally = counters.Tally()
    tally.add("loom_fire_total", {"loop": "canary", "source": "tick"}, 5)
    tally.add("loom_fire_total", {"loop": "canary", "source": "cli"})
    tally.add("loom_run_total", {"loop": "canary", "status": "ok"}, 6)
    for seconds in (0.002, 0.3):
        tally.observe("loom_tick_duration_seconds", {"loop": "canary"}, seconds)
    tally.flush(store)
    with store.write() as db:
        db.execute("INSERT INTO job_runs(job, started) VALUES ('newsletter', ?)", (NOW - 600,))
        db.execute("INSERT INTO job_runs(job, started) VALUES ('newsletter', ?)", (NOW + 45,))  # 45 s late
        db.execute("INSERT INTO queue_items(job, kind, signature, sample, log, first_seen, last_seen, state) "
                   "VALUES ('newsletter', 'line', 's', 'x', 'l', ?, ?, 'open')", (NOW - 7200, NOW - 7200))
    for kind in ("queue_claim", "queue_claim", "queue_witness"):
        ledger.append(store, kind, source="sentinel", detail={})
    first = outbox.enqueue(store, "hello", dedupe_key="k")
    assert outbox.enqueue(store, "hello again", dedupe_key="k") == first
    outbox.mark_sent(store, first, message_id=1, chat_id=1, length=5, truncated=False)
    second = outbox.enqueue(store, "later")
    outbox.defer(store, second, until=NOW, error="timeout")
    outbox.defer(store, second, until=NOW, error="bad chat", fail=True)

    got = scrape(ctx)
    assert got['loom_fire_total{agent="main",loop="canary",source="tick"}'] == 5
    assert got['loom_fire_total{agent="main",loop="canary",source="cli"}'] == 1
    assert got['loom_run_total{agent="main",loop="canary",status="ok"}'] == 6
    assert got['loom_tick_duration_seconds_bucket{agent="main",le="0.005",loop="canary"}'] == 1
    assert got['loom_tick_duration_seconds_bucket{agent="main",le="+Inf",loop="canary"}'] == 2
    assert got['loom_tick_duration_seconds_count{agent="main",loop="canary"}'] == 2
    assert got['loom_witness_ratio{agent="main",what="queue"}'] == 0.5
    assert got['loom_schedule_drift_seconds{job="newsletter"}'] == pytest.approx(45)
    assert got['loom_stuck_age_seconds{agent="main",what="queue_item"}'] >= 7200
    assert got['loom_notify_total{result="sent",sink="telegram"}'] == 1
    assert got['loom_notify_total{result="deduplicated",sink="telegram"}'] == 1
    assert got['loom_notify_total{result="failed",sink="telegram"}'] == 2
    assert got['loom_notify_total{result="given_up",sink="telegram"}'] == 1


def test_the_hold_shows_who_why_and_time_left(ctx):
    from loomtui.agent import holds

    holds.place(ctx, by="operator", reason='swap "model" \\ now', until=NOW + 10**9, source="cli", now=NOW)
    got = scrape(ctx)
    assert got['loom_hold{agent="main",by="operator",reason="swap \\"model\\" \\\\ now"}'] == 1
    assert got['loom_hold{agent="main",by="ceiling",reason=""}'] == 0
    assert 0 < got['loom_hold_remaining_seconds{agent="main"}'] <= 10**9
    assert got['loom_held{agent="main"}'] == 1


def test_counters_survive_a_restart(ctx, tmp_path):
    counters.bump(ctx.store, "loom_admit_total", {"loop": "watchdog", "decision": "refused", "reason": "hold"})
    again = Context.load(str(ctx.config_path), None, environ={})
    try:
        assert scrape(again)['loom_admit_total{agent="main",decision="refused",loop="watchdog",reason="hold"}'] == 1
    finally:
        again.close()


def test_the_pump_is_scraped_with_the_stream_json_driver_only(tmp_path):
    import json
    import time

    config = write_config(tmp_path, socket=f"loomtest-kpi-{tmp_path.name[-6:]}", hostile_job=False)
    c = Context.load(str(config), None, environ={})
    try:
        assert not any(name.startswith("loom_pump_") for name in scrape(c))  # the tmux driver has no pump
    finally:
        c.close()
    config.write_text(config.read_text().replace("[agent]\n", '[agent]\ndriver = "stream-json"\n', 1))
    c = Context.load(str(config), None, environ={})
    try:
        got = scrape(c)
        assert (got['loom_pump_queue{agent="main"}'], got['loom_pump_turn_running{agent="main"}'], got['loom_pump_turn_age_seconds{agent="main"}']) == (0, 0, 0)
        (c.state_dir / "pump.json").write_text(json.dumps(
            {"pid": os.getpid(), "started": time.time(), "turn": "running", "turn_started": time.time() - 120,
             "queue": 3, "cli_exit": None}))  # a pump that runs: this process
        ledger.append(c.store, "permission_denied", source="watchdog", detail={"tools": ["Bash"]})
        got = scrape(c)
        assert (got['loom_pump_queue{agent="main"}'], got['loom_pump_turn_running{agent="main"}']) == (3, 1)
        assert 120 <= got['loom_pump_turn_age_seconds{agent="main"}'] < 3600
        assert got['loom_permission_denied_total{agent="main"}'] == 1
        (c.state_dir / "pump.json").write_text(json.dumps(
            {"pid": os.getpid(), "started": time.time(), "turn": "running", "turn_started": 1.0, "queue": 3,
             "cli_exit": {"status": 137}}))
        got = scrape(c)  # a pump whose CLI exited holds nothing and runs no turn
        assert (got['loom_pump_queue{agent="main"}'], got['loom_pump_turn_running{agent="main"}'], got['loom_pump_turn_age_seconds{agent="main"}']) == (0, 0, 0)
    finally:
        c.close()
