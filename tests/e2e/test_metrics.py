"""The Prometheus endpoint of `loom supervise`: real scrape over HTTP, values from the store."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from harness import free_port, wait_for
from test_supervise import FAST, Daemon

pytestmark = pytest.mark.e2e


def scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return response.read().decode()
    except OSError:
        return ""


def test_metrics_reflect_the_store(make_harness):
    port = free_port()
    harness = make_harness(sections={**FAST, "metrics": {"listen": f"127.0.0.1:{port}"},
                                     "canary": {"interval": "1h", "ack_timeout": "10s"}})
    harness.start()
    daemon = Daemon(harness, env={"NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"})
    assert harness.loom("canary").returncode == 0
    assert harness.loom("inject", "/crash").returncode == 0
    wait_for(lambda: len(harness.events("relaunch")) == 2, 30, what="the crash relaunched")
    text = wait_for(lambda: (t := scrape(port)) and 'loom_canary_probes_total{agent="main",result="ok"}' in t and t, 30,
                    what="a scrape with the probe")
    assert 'loom_relaunches_total{agent="main",cause="operator_fresh",mode="fresh"} 1.0' in text
    assert 'mode="resume"} 1.0' in text  # the crash (or exit: tmux may not report the status)
    assert 'loom_held{agent="main"} 0.0' in text and "loom_supervisor_heartbeat_age_seconds" in text
    assert 'loom_loop_ticks_total{agent="main",loop="watchdog"}' in text
    # A browser's page whose name was made to resolve to 127.0.0.1 (DNS rebinding) sends its own
    # name as Host: refused. Prometheus, with the address or localhost, is answered.
    assert status_for(port, f"evil.example:{port}") == 403
    assert status_for(port, f"127.0.0.1:{port}") == 200 and status_for(port, f"localhost:{port}") == 200
    assert daemon.stop() == 0


def status_for(port: int, host: str) -> int:
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", "/metrics", headers={"Host": host})
        return connection.getresponse().status
    finally:
        connection.close()


def ipv6_loopback_port() -> int | None:
    """A free port on ::1, or None when this machine has no IPv6 loopback."""
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
            return probe.getsockname()[1]
    except OSError:
        return None


def test_metrics_are_served_on_the_ipv6_loopback(make_harness):
    port = ipv6_loopback_port()
    if port is None:
        pytest.skip("this machine has no IPv6 loopback (::1 cannot be bound)")
    harness = make_harness(sections={**FAST, "metrics": {"listen": f"[::1]:{port}"}, "canary": {"interval": "1h"}})
    harness.start()
    daemon = Daemon(harness, env={"NO_PROXY": "::1,[::1]", "no_proxy": "::1,[::1]"})

    def scrape_v6() -> str:
        try:
            with urllib.request.urlopen(f"http://[::1]:{port}/metrics", timeout=5) as response:
                return response.read().decode()
        except OSError:
            return ""

    text = wait_for(lambda: (t := scrape_v6()) and "loom_supervisor_heartbeat_age_seconds" in t and t, 30,
                    what="a scrape over IPv6")
    assert 'loom_relaunches_total{agent="main",cause="operator_fresh",mode="fresh"} 1.0' in text
    # Bound to ::1 only: nothing of it answers on the IPv4 loopback.
    with socket.socket() as v4:
        assert v4.connect_ex(("127.0.0.1", port)) != 0
    assert daemon.stop() == 0


def test_a_port_in_use_is_a_named_fatal_error(make_harness):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        harness = make_harness(sections={"metrics": {"listen": f"127.0.0.1:{port}"}})
        result = harness.loom("supervise", timeout=60)
    assert result.returncode != 0
    assert f"metrics.listen 127.0.0.1:{port}" in result.stderr and "Traceback" not in result.stderr


def test_a_scrape_during_a_run_shows_every_loop_kpi(make_harness, tmp_path):
    """A demo agent, a crash, a canary, a failing job, a claim later witnessed and a hold: one
    scrape shows each KPI with the value that run implies."""
    import json
    import sys

    from fakebot import FakeBot
    from test_supervise_telegram import CHAT, ENV, TOKEN, telegram

    port = free_port()
    fake = FakeBot(TOKEN).start()
    try:
        harness = make_harness(
            sections={**FAST, "metrics": {"listen": f"127.0.0.1:{port}"}, "sentinel": {"interval": "1s"},
                      "agent": {"ready_match": "(?m)^> $"},
                      "canary": {"interval": "1h", "ack_timeout": "20s"}, "telegram": telegram(fake, commands=True)},
            jobs=[{"name": "nightly", "log": str(tmp_path / "nightly.log"), "schedule": "every 1h"}])
        harness.start()  # loom recycle --fresh: the operator's relaunch, from the CLI
        daemon = Daemon(harness, env={**ENV, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"})
        assert harness.loom("canary").returncode == 0

        assert harness.loom("inject", "/crash").returncode == 0  # the watchdog relaunches, the canary witnesses
        crash = wait_for(lambda: harness.events("relaunch")[1:], 60, what="the crash relaunched")[0]
        wait_for(lambda: [e for e in harness.events("canary") if e["detail"].get("witnessed") == crash["id"]], 60,
                 what="the crash's relaunch witnessed by the daemon's canary")

        failed = harness.loom("run-job", "nightly", "--", sys.executable, "-c", "raise SystemExit(3)")
        assert failed.returncode == 3
        item = wait_for(lambda: json.loads(harness.loom("queue", "--json").stdout)["items"], 60, what="a queue item")[0]
        assert harness.loom("resolve", str(item["id"]), "--note", "fixed the script").returncode == 0
        assert harness.loom("run-job", "nightly", "--", sys.executable, "-c", "pass").returncode == 0
        wait_for(lambda: harness.events("queue_witness"), 60, what="the claim witnessed by the clean run")

        assert harness.loom("hold", "--reason", "maintenance").returncode == 0
        assert harness.loom("inject", "/crash").returncode == 0
        wait_for(lambda: harness.events("refused"), 60, what="the relaunch refused for the hold")
        assert harness.loom("release").returncode == 0
        wait_for(lambda: len(harness.events("relaunch")) == 3, 60, what="the deferred relaunch")
        fake.add_update(CHAT, "/status")
        wait_for(lambda: [t for t in fake.texts(CHAT) if t.startswith("Loom status")], 60, what="the /status reply")

        def values() -> dict[str, float]:
            out = {}
            for line in scrape(port).splitlines():
                if line and not line.startswith("#"):
                    name, _, value = line.rpartition(" ")
                    out[name] = float(value)
            return out

        def settled(v: dict[str, float]) -> bool:
            # The status model and the ledger counts are read one after the other in a scrape: a
            # witness landing between them shows in one and not yet in the other, until the next.
            return (v.get('loom_witness_ratio{agent="main",what="relaunch"}') == 1.0
                    and v.get('loom_stuck_age_seconds{agent="main",what="relaunch"}') == 0
                    and v.get('loom_notify_total{result="sent",sink="telegram"}', 0) >= 1
                    and v.get('loom_run_total{agent="",loop="sentinel",status="ok"}', 0) >= 1)

        last: dict[str, float] = {}

        def ready() -> dict[str, float] | None:
            last.clear()
            last.update(values())
            return dict(last) if settled(last) else None

        try:
            got = wait_for(ready, 60, what="a scrape with every KPI settled")
        except AssertionError:
            raise AssertionError({k: v for k, v in last.items() if "loom_" in k and "created" not in k}) from None
        assert got['loom_fire_total{agent="main",loop="canary",source="cli"}'] == 1
        assert got['loom_fire_total{agent="main",loop="watchdog",source="cli"}'] == 1          # harness.start's recycle
        assert got['loom_fire_total{agent="",loop="sentinel",source="cli"}'] == 1          # the resolve
        assert got['loom_fire_total{agent="main",loop="watchdog",source="tick"}'] > 0
        assert got['loom_admit_total{agent="main",decision="admitted",loop="watchdog",reason=""}'] == 2  # two crashes
        assert got['loom_admit_total{agent="main",decision="admitted",loop="operator",reason=""}'] == 1
        assert got['loom_admit_total{agent="main",decision="refused",loop="watchdog",reason="hold"}'] >= 1
        assert got['loom_run_total{agent="main",loop="canary",status="ok"}'] > 0
        assert got['loom_tick_duration_seconds_count{agent="main",loop="watchdog"}'] > 0
        assert got['loom_tick_duration_seconds_bucket{agent="main",le="+Inf",loop="watchdog"}'] == \
            got['loom_tick_duration_seconds_count{agent="main",loop="watchdog"}']
        assert got['loom_witness_ratio{agent="main",what="queue"}'] == 1.0                       # 1 claim, 1 witnessed
        assert got['loom_witness_ratio{agent="main",what="relaunch"}'] == 1.0                    # 3 relaunches, 3 acks
        assert -3600 <= got['loom_schedule_drift_seconds{job="nightly"}'] < 0      # second run, well before due
        assert got['loom_stuck_age_seconds{agent="main",what="queue_item"}'] == 0
        assert got['loom_stuck_age_seconds{agent="main",what="relaunch"}'] == 0
        assert got['loom_hold{agent="main",by="operator",reason=""}'] == 0 and got['loom_held{agent="main"}'] == 0
        assert got['loom_canary_probes_total{agent="main",result="ok"}'] >= 3
        assert got['loom_relaunches_total{agent="main",cause="operator_fresh",mode="fresh"}'] == 1
        assert daemon.stop() == 0
    finally:
        fake.stop()
