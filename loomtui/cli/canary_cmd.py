"""`loom canary`: probe now (or join the probe in flight); exit 0 on ack, 1 otherwise.
`loom canary --history N`: the agent's last N probes, newest first, and none sent."""

from __future__ import annotations

import argparse
import sys

from loomtui.cli.common import context, print_json, subcommand


def register(sub) -> None:
    parser = subcommand(sub, "canary", "send a liveness probe now and wait for the ack (exit 0 on ack, 1 on miss)",
                        agent=True)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--history", type=int, metavar="N", default=None,
                        help="send nothing: print the agent's last N probes, newest first")
    parser.set_defaults(func=run)


# What `--history --json` prints of a probe: every field but its nonce (the ack file's name, which
# nobody reading the history needs).
HISTORY_FIELDS = ("id", "result", "sent_at", "deadline", "ack_at", "latency", "why", "source")
MAX_HISTORY = 1000


def run(args: argparse.Namespace) -> int:
    from loomtui import actions
    from loomtui.canary import runs as canary
    from loomtui.cli.actor import source_of

    if args.history is not None:
        return history(args)
    result = actions.canary_now(context(args), source=source_of(args))
    if args.json:
        print_json(result.__dict__)
    else:
        print(result.describe(), file=sys.stdout if result.result == canary.OK else sys.stderr)
    return 0 if result.result == canary.OK else 1


def history(args: argparse.Namespace) -> int:
    from loomtui.canary import runs as canary
    from loomtui.store import canary_runs
    from loomtui.text import printable

    if not 1 <= args.history <= MAX_HISTORY:
        print(f"loom: canary --history takes 1 to {MAX_HISTORY} probes, not {args.history}", file=sys.stderr)
        return 2
    ctx = context(args)
    probes = [canary.probe_from(r) for r in canary_runs.newest(ctx.store, ctx.agent, args.history)]
    if args.json:
        print_json([{name: getattr(p, name) for name in HISTORY_FIELDS} for p in probes])
        return 0
    for p in probes:
        print(printable(f"{p.id:>6}  {format_ts(p.sent_at)}  {p.source or '?':<8}  {p.describe()}"))
    return 0


def format_ts(ts: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")
