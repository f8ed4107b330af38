"""The operator files in contrib/: the alert rules pass `promtool check rules` and their unit
tests (`promtool test rules`), and every metric the rules and the Grafana dashboard name is one a
real scrape of Loom serves, so a renamed metric cannot leave an alert silently watching nothing."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
from prometheus_client import generate_latest
from prometheus_client.core import CollectorRegistry
from tui_state import populate, write_config

from conftest import REPO
from loomtui.context import Context
from loomtui.daemon.metrics import StoreCollector
from loomtui.store import counters

RULES = REPO / "contrib" / "prometheus" / "loom-alerts.yml"
RULE_TESTS = REPO / "contrib" / "prometheus" / "loom-alerts.test.yml"
DASHBOARD = REPO / "contrib" / "grafana" / "loom-dashboard.json"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (Debian package `prometheus`; "
                                                             ".ci/run installs it)")


@needs_promtool
def test_promtool_checks_the_rules():
    result = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 8 rules found" in result.stdout


@needs_promtool
def test_promtool_unit_tests_every_alert():
    result = subprocess.run([PROMTOOL, "test", "rules", str(RULE_TESTS)], capture_output=True, text=True,
                            timeout=120, cwd=RULE_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    alerts = set(re.findall(r"^\s+- alert: (\w+)", RULES.read_text(), re.M))
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    assert alerts == tested and len(alerts) == 8


def served_names(tmp_path) -> set[str]:
    text = served(tmp_path)
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}


def served(tmp_path) -> str:
    """A real scrape's exposition text, every family populated."""
    # The stream-json driver: its metrics are the tmux driver's and the pump's.
    config = write_config(tmp_path, socket=f"loomtest-contrib-{tmp_path.name[-6:]}")
    config.write_text(config.read_text().replace("[agent]\n", '[agent]\ndriver = "stream-json"\n', 1))
    ctx = Context.load(str(config), None, environ={})
    try:
        populate(ctx)
        tally = counters.Tally()
        for name in ("loom_fire_total", "loom_admit_total", "loom_run_total", "loom_notify_total"):
            tally.add(name, {})
        tally.observe("loom_tick_duration_seconds", {"loop": "watchdog"}, 0.01)
        tally.flush(ctx.store)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(StoreCollector(ctx, lambda: {}))
        return generate_latest(registry).decode()
    finally:
        ctx.close()


@needs_promtool
def test_promtool_finds_nothing_wrong_with_what_is_served(tmp_path):
    """Names by Prometheus's conventions (a gauge named `_count` had been served): what
    `promtool check metrics` says of a real scrape."""
    result = subprocess.run([PROMTOOL, "check", "metrics"], input=served(tmp_path), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and not result.stdout.strip() and not result.stderr.strip(), \
        result.stdout + result.stderr


def test_every_metric_the_rules_and_dashboard_name_is_served(tmp_path):
    served = served_names(tmp_path)
    rules = set(re.findall(r"\bloom_[a-z_]+", RULES.read_text()))
    exprs = " ".join(t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"])
    dashboard = set(re.findall(r"\bloom_[a-z_]+", exprs))
    assert rules and dashboard
    assert rules - served == set(), "alert rules name metrics Loom does not serve"
    assert dashboard - served == set(), "the dashboard names metrics Loom does not serve"
