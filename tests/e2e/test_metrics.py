"""The Prometheus endpoint of `loom supervise`: real scrape over HTTP, values from the store."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from harness import wait_for
from test_supervise import FAST, Daemon

pytestmark = pytest.mark.e2e


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    text = wait_for(lambda: (t := scrape(port)) and 'loom_canary_probes_total{result="ok"}' in t and t, 30,
                    what="a scrape with the probe")
    assert 'loom_relaunches_total{cause="operator_fresh",mode="fresh"} 1.0' in text
    assert 'mode="resume"} 1.0' in text  # the crash (or exit: tmux may not report the status)
    assert "loom_held 0.0" in text and "loom_supervisor_heartbeat_age_seconds" in text
    assert 'loom_loop_ticks_total{loop="watchdog"}' in text
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
