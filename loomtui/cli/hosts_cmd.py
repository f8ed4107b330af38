"""`loom hosts [--json]`: every host's agents at a glance, this machine's own first (`local`).

Each host is asked for its own `loom status --json --list` over ssh (loomtui/hosts/ssh.py), all
at once in threads, each within its host's `timeout`. A host that does not answer reads
`unreachable since …` (its first failure in a row kept in this machine's store), never as a dead
agent: nothing is said of agents nobody could look at.
"""

from __future__ import annotations

import argparse

from loomtui.cli.common import base_context, print_json, subcommand


def register(sub) -> None:
    parser = subcommand(sub, "hosts", "every host's agents: state, last canary, queue, hold, heartbeat (over ssh)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)
    scrape = subcommand(sub, "prometheus-config",
                        "print a Prometheus scrape configuration for this host and every [[hosts]] entry")
    scrape.add_argument("--job", default="loom", help="the scrape job's name (contrib's alert rules say job=\"loom\")")
    scrape.add_argument("--interval", default="30s", help="the scrape interval (default 30s)")
    scrape.set_defaults(func=run_prometheus_config)


def run_prometheus_config(args: argparse.Namespace) -> int:
    from loomtui.hosts.scrape import scrape_config

    base = base_context(args, prepare=False)
    print(scrape_config(base.config, job=args.job, interval=args.interval), end="")
    return 0


def run(args: argparse.Namespace) -> int:
    from loomtui import clock
    from loomtui.hosts import view
    from loomtui.report import all_hosts

    views = all_hosts.views(base_context(args), clock.wall)
    now = clock.wall()
    if args.json:
        print_json([v.as_json() for v in views])
    else:
        for line in view.lines(views, now):
            print(line)
    # Not one host read, this machine's store included: a script must not take that for an answer.
    return 0 if any(v.unreachable is None and not v.error for v in views) else 1
