"""`loom ledger tail|verify`."""

from __future__ import annotations

import argparse
import datetime as dt
import sys

from loomtui.cli.common import context, subcommand
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
    tail.set_defaults(func=run_tail)
    verify = subcommand(inner, "verify", "check the hash chain; non-zero naming the first bad event")
    verify.set_defaults(func=run_verify)


def format_event(event: Event) -> str:
    when = dt.datetime.fromtimestamp(event.ts).strftime("%Y-%m-%d %H:%M:%S")
    cause = f" cause={event.cause}" if event.cause else ""
    detail = " ".join(f"{k}={v}" for k, v in sorted(event.detail.items()))
    line = f"{event.id:>7} {when} {event.kind:<18} {event.source:<10}{cause} {detail}".rstrip()
    # The ledger holds untrusted text (pane lines, job names): keep control characters off the terminal.
    return printable(line)


def run_tail(args: argparse.Namespace) -> int:
    store = context(args).store
    events = ledger.tail(store, max(args.n, 0), kinds=args.kind)
    if args.json:
        for e in events:
            sys.stdout.write(ledger.canonical(e.as_dict()) + "\n")
    else:
        for e in events:
            print(format_event(e))
    return 0


def run_verify(args: argparse.Namespace) -> int:
    verdict = ledger.verify(context(args).store)
    print(verdict.describe(), file=sys.stdout if verdict.ok else sys.stderr)
    return 0 if verdict.ok else 1
