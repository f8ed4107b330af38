"""`loom prometheus-config`: a scrape configuration promtool accepts, one target per host labelled
host=NAME (the label the dashboard's host variable and LoomHostMetricsStopped read), a host without
an address said in a comment; and the dashboard filters every query by that variable."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from conftest import REPO, run_loom

PROMTOOL = shutil.which("promtool")
DASHBOARD = REPO / "contrib" / "grafana" / "loom-dashboard.json"

CONFIG = '''
[metrics]
listen = "127.0.0.1:9464"
[[hosts]]
name = "studio"
ssh = "op@studio"
metrics = "studio.tailnet:9464"
[[hosts]]
name = "pi"
ssh = "pi@pi"
'''


def written(tmp_path, text: str = CONFIG, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "config.toml"
    path.write_text(f'state_dir = "{tmp_path / "state"}"\n' + text)
    return run_loom("--config", str(path), "prometheus-config", *args)


def test_one_target_per_host_labelled_with_its_name(tmp_path):
    done = written(tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert re.findall(r'targets: \["([^"]+)"\]\n\s+labels: \{host: "([^"]+)"\}', out) == [
        ("127.0.0.1:9464", "local"), ("studio.tailnet:9464", "studio")]
    assert '# host pi: no metrics address (metrics = "HOST:PORT" in its [[hosts]] entry)' in out
    assert 'job_name: "loom"' in out and 'scrape_interval: "30s"' in out


def test_with_a_token_file_the_job_sends_it_as_a_bearer_token(tmp_path):
    token = tmp_path / "metrics-token"
    done = written(tmp_path, CONFIG.replace('listen = "127.0.0.1:9464"\n',
                                            f'listen = "127.0.0.1:9464"\ntoken_file = "{token}"\n'))
    assert done.returncode == 0, done.stderr
    assert f'    authorization:\n      type: Bearer\n      credentials_file: "{token}"\n    static_configs:' in done.stdout
    assert "every host's metrics.token_file holds the same token" in done.stdout
    assert "authorization" not in written(tmp_path).stdout  # none without one


TOKENED = CONFIG.replace('listen = "127.0.0.1:9464"\n', 'listen = "127.0.0.1:9464"\ntoken_file = "TOKEN"\n')


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (.ci/run installs Debian's prometheus)")
@pytest.mark.parametrize("text", [CONFIG, "", TOKENED])
def test_promtool_accepts_it_with_hosts_and_with_none(tmp_path, text):
    token = tmp_path / "metrics-token"
    token.write_text("a-scrape-token-of-some-length\n")
    text = text.replace('"TOKEN"', f'"{token}"')
    done = written(tmp_path, text)
    assert done.returncode == 0, done.stderr
    scrape = tmp_path / "prometheus.yml"
    scrape.write_text(done.stdout)
    checked = subprocess.run([PROMTOOL, "check", "config", str(scrape)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_bad_job_or_interval_is_one_line_exit_2(tmp_path):
    # Loom's durations are wider than Prometheus's: 1.5m, 30S, 30s1m and " 30s" were written
    # through, into a file Prometheus refused.
    for args in (["--job", "a b"], ["--interval", "soon"], ["--interval", "1.5m"], ["--interval", "30S"],
                 ["--interval", "30s1m"], ["--interval", " 30s"], ["--interval", "0s"], ["--interval", ""]):
        done = written(tmp_path, CONFIG, *args)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
    for interval in ("1h30m", "15s", "500ms"):
        assert written(tmp_path, CONFIG, "--interval", interval).returncode == 0


def test_a_bad_metrics_address_names_the_key(tmp_path):
    done = written(tmp_path, '[[hosts]]\nname = "b"\nssh = "b"\nmetrics = "b"\n')
    assert done.returncode == 2 and "hosts[0].metrics" in done.stderr


def test_the_dashboard_has_a_host_variable_and_every_query_reads_it():
    board = json.loads(DASHBOARD.read_text())
    [host] = [v for v in board["templating"]["list"] if v["name"] == "host"]
    assert host["multi"] and host["includeAll"] and "label_values(" in host["definition"]
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    for expr in exprs:
        names = re.findall(r"\bloom_[a-z_]+", expr)
        assert names and all(re.search(rf'\b{n}\{{host=~"\$host"', expr) for n in names), expr
        if "sum by (" in expr:
            assert "sum by (host, " in expr, expr  # one host's series never summed with another's
