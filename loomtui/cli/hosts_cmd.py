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
    from concurrent.futures import ThreadPoolExecutor

    from loomtui import clock
    from loomtui.config import LOCAL_HOST
    from loomtui.hosts import ssh, view
    from loomtui.report import status as status_mod

    base = base_context(args)
    hosts = base.config.hosts
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(hosts)))) as pool:
        asked = [pool.submit(ssh.run, h, view.STATUS_WORDS, state_dir=base.state_dir, timeout=h.timeout)
                 for h in hosts]
        # This machine's own agents while the hosts answer, read as a host's would be.
        local = view.HostView(LOCAL_HOST, tuple(view.agent_row(s.as_agent_json())
                                                for s in status_mod.gather_all(base)))
        replies = [f.result() for f in asked]
    now = clock.wall()
    views = [local, *(host_view(base, reply, now) for reply in replies)]
    if args.json:
        print_json([v.as_json() for v in views])
    else:
        for line in view.lines(views, now):
            print(line)
    return 0


def host_view(base, reply, now: float):
    from loomtui.hosts import reach, ssh, view

    if not reply.reached:
        return view.HostView(reply.host, unreachable=reach.failed(base.store, reply.host, reply.reason, now))
    reach.answered(base.store, reply.host)
    if reply.code != 0:
        return view.HostView(reply.host, error=f"loom exited {reply.code}: {ssh.last_line(reply.stderr)}")
    try:
        return view.HostView(reply.host, view.parse_status(reply.stdout))
    except ValueError as exc:  # json.JSONDecodeError is one
        return view.HostView(reply.host, error=f"not the status JSON expected ({str(exc)[:100]})")
