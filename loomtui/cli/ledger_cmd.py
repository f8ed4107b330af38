"""`loom ledger tail|verify`."""

from __future__ import annotations

import argparse
import datetime as dt
import sys

from loomtui.cli.common import choose_agent, context, subcommand
from loomtui.store import ledger
from loomtui.store.ledger import Event
from loomtui.text import printable


def register(sub) -> None:
    parser = subcommand(sub, "ledger", "read or verify the hash-chained event ledger")
    inner = parser.add_subparsers(dest="ledger_command", metavar="tail|verify", required=True)
    tail = subcommand(inner, "tail", "print the last events")
    tail.add_argument("-n", type=int, default=20, metavar="N", help="how many events (default 20)")
    tail.add_argument("--kind", action="append", help="only events of this kind (repeatable)")
    tail.add_argument("--json", action="store_true", help="JSON lines")
    # Not the usual --agent: the ledger is every agent's, and without it tail shows them all.
    tail.add_argument("--agent", dest="only_agent", metavar="NAME", help="only this agent's events")
    tail.set_defaults(func=run_tail)
    verify = subcommand(inner, "verify", "check the hash chain; non-zero naming the first bad event")
    verify.set_defaults(func=run_verify)


def format_event(event: Event, with_agent: bool = False) -> str:
    """One event on one line; `with_agent` adds whose it is (where several agents share the ledger)."""
    when = dt.datetime.fromtimestamp(event.ts).strftime("%Y-%m-%d %H:%M:%S")
    cause = f" cause={event.cause}" if event.cause else ""
    detail = " ".join(f"{k}={v}" for k, v in sorted(event.detail.items()))
    who = f" {event.agent:<10}" if with_agent else ""
    line = f"{event.id:>7} {when}{who} {event.kind:<18} {event.source:<10}{cause} {detail}".rstrip()
    # The ledger holds untrusted text (pane lines, job names): keep control characters off the terminal.
    return printable(line)


def run_tail(args: argparse.Namespace) -> int:
    ctx = context(args)
    names = ctx.config.agent_names
    only = choose_agent(names, args.only_agent, {}) if args.only_agent else None
    events = ledger.tail(ctx.store, max(args.n, 0), kinds=args.kind, agent=only)
    if args.json:
        for e in events:
            sys.stdout.write(ledger.canonical(e.as_dict()) + "\n")
    else:
        for e in events:
            print(format_event(e, with_agent=len(names) > 1 and only is None))
    return 0


def run_verify(args: argparse.Namespace) -> int:
    verdict = ledger.verify(context(args).store)
    print(verdict.describe(), file=sys.stdout if verdict.ok else sys.stderr)
    return 0 if verdict.ok else 1
