"""`loom canary`: probe now (or join the probe in flight); exit 0 on ack, 1 otherwise."""

from __future__ import annotations

import argparse
import sys

from loomtui.cli.common import context, print_json, subcommand


def register(sub) -> None:
    parser = subcommand(sub, "canary", "send a liveness probe now and wait for the ack (exit 0 on ack, 1 on miss)",
                        agent=True)
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from loomtui import actions
    from loomtui.canary import runs as canary
    from loomtui.cli.actor import source_of

    result = actions.canary_now(context(args), source=source_of(args))
    if args.json:
        print_json(result.__dict__)
    else:
        print(result.describe(), file=sys.stdout if result.result == canary.OK else sys.stderr)
    return 0 if result.result == canary.OK else 1
