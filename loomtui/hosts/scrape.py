"""`loom prometheus-config`: one Prometheus scraping each host directly (federation is for far
larger fleets), one target per host, each labelled `host` (this machine's `local`), the label the
Grafana dashboard's host variable and the alert for a host whose metrics stop read.

A host gives its address as Prometheus reaches it (`[[hosts]] metrics`); this machine's own is
its `metrics.listen`. One without an address is said in a comment, never guessed.
"""

from __future__ import annotations

import json
import re

from loomtui.config import LOCAL_HOST, Config
from loomtui.errors import LoomError


PROMETHEUS_DURATION = re.compile(r"(?:[0-9]+y)?(?:[0-9]+w)?(?:[0-9]+d)?(?:[0-9]+h)?(?:[0-9]+m)?(?:[0-9]+s)?(?:[0-9]+ms)?")


def scrape_config(config: Config, *, job: str = "loom", interval: str = "30s") -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_:-]{0,63}", job):
        raise LoomError(f"--job {job!r}: use letters, digits, '_', ':' and '-'", exit_code=2)
    # Prometheus's own duration grammar (whole units, largest first: 1h30m, 30s, 500ms), which is
    # narrower than Loom's: `1.5m` or `30S` was written through, and Prometheus refused the file.
    if not PROMETHEUS_DURATION.fullmatch(interval) or not any(c.isdigit() and c != "0" for c in interval):
        raise LoomError(f"--interval {interval!r}: write it as Prometheus does, e.g. 30s, 1m, 1h30m", exit_code=2)
    targets = [(LOCAL_HOST, config.metrics.listen), *((h.name, h.metrics) for h in config.hosts)]
    static: list[str] = []
    missing = []
    for name, address in targets:
        if not address:
            missing.append(name)
            continue
        # JSON strings are YAML strings: an address or a name is never read as YAML syntax.
        static += [f"      - targets: [{json.dumps(address)}]",
                   f"        labels: {{host: {json.dumps(name)}}}"]
    token_file = config.metrics.token_file
    # One job for every host (the alerts read job="loom"), so one token: each host's metrics.token_file
    # holds the same one, and this Prometheus reads it from the path this config names.
    auth = ["    authorization:", "      type: Bearer", f"      credentials_file: {json.dumps(str(token_file))}"] \
        if token_file is not None else []
    lines = ["# Written by `loom prometheus-config`: one target per host, each labelled host=NAME",
             "# (addresses as this Prometheus reaches them)" + (
                 "; every host's metrics.token_file holds the same token, which this Prometheus reads"
                 " from the file named below (readable by its user)." if auth else "."),
             "scrape_configs:",
             f"  - job_name: {json.dumps(job)}",
             f"    scrape_interval: {json.dumps(interval)}",
             *auth,
             "    static_configs:" + ("" if static else " []  # no host has a metrics address yet"),
             *static]
    for name in missing:
        where = "metrics.listen in its config" if name == LOCAL_HOST else f"metrics = \"HOST:PORT\" in its [[hosts]] entry"
        lines.append(f"# host {name}: no metrics address ({where})")
    return "\n".join(lines) + "\n"
