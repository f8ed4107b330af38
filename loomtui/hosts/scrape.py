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
from loomtui.durations import parse_duration
from loomtui.errors import LoomError


def scrape_config(config: Config, *, job: str = "loom", interval: str = "30s") -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_:-]{0,63}", job):
        raise LoomError(f"--job {job!r}: use letters, digits, '_', ':' and '-'", exit_code=2)
    try:
        parse_duration(interval)
    except ValueError as exc:
        raise LoomError(f"--interval {interval!r}: {exc}", exit_code=2) from None
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
    lines = ["# Written by `loom prometheus-config`: one target per host, each labelled host=NAME",
             "# (addresses as this Prometheus reaches them).",
             "scrape_configs:",
             f"  - job_name: {json.dumps(job)}",
             f"    scrape_interval: {json.dumps(interval)}",
             "    static_configs:" + ("" if static else " []  # no host has a metrics address yet"),
             *static]
    for name in missing:
        where = "metrics.listen in its config" if name == LOCAL_HOST else f"metrics = \"HOST:PORT\" in its [[hosts]] entry"
        lines.append(f"# host {name}: no metrics address ({where})")
    return "\n".join(lines) + "\n"
