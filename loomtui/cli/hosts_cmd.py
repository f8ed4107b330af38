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
    from loomtui.config import LOCAL_HOST
    from loomtui.hosts import gather, view
    from loomtui.report import status as status_mod

    base = base_context(args)
    hosts = base.config.hosts
    with gather.pool_for(hosts) as pool:
        asked = gather.ask_all(pool, hosts, base.state_dir)
        # This machine's own agents while the hosts answer, read as a host's would be.
        local = view.HostView(LOCAL_HOST, tuple(view.agent_row(s.as_agent_json())
                                                for s in status_mod.gather_all(base)))
        replies = [f.result() for f in asked]
    now = clock.wall()
    views = [local, *(gather.host_view(base.store, reply, now) for reply in replies)]
    if args.json:
        print_json([v.as_json() for v in views])
    else:
        for line in view.lines(views, now):
            print(line)
    return 0
