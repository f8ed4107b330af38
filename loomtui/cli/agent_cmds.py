"""`loom inject TEXT` and `loom recycle --resume|--fresh`."""

from __future__ import annotations

import argparse
import sys

from loomtui.cli.common import context, subcommand


def register(sub) -> None:
    inject = subcommand(sub, "inject", "type one line into the agent's pane (through the one injection path)",
                        agent=True)
    inject.add_argument("text", nargs="*", help="the message; several words are joined by spaces")
    inject.add_argument("--stdin", action="store_true",
                        help="read the one line from standard input (not in the process list; over ssh, not in its command)")
    inject.set_defaults(func=run_inject)
    recycle = subcommand(sub, "recycle", "relaunch the agent: resume the pinned session or start fresh",
                         agent=True)
    mode = recycle.add_mutually_exclusive_group(required=True)
    mode.add_argument("--resume", dest="mode", action="store_const", const="resume")
    mode.add_argument("--fresh", dest="mode", action="store_const", const="fresh")
    recycle.add_argument("--reason", help="why (recorded in the ledger)")
    recycle.set_defaults(func=run_recycle)


def run_inject(args: argparse.Namespace) -> int:
    from loomtui import actions

    from loomtui.cli.actor import of_cli, source_of

    from loomtui.cli.common import from_stdin
    from loomtui.errors import LoomError

    if bool(args.text) == args.stdin:
        raise LoomError("inject takes the line as words or with --stdin, one of the two", exit_code=2)
    text = from_stdin("inject --stdin", one_line=True) if args.stdin else " ".join(args.text)
    ctx = context(args)
    result = actions.inject(ctx, text, source=source_of(args), actor=of_cli(ctx, args))
    if not result.ok:
        print(f"loom: inject failed: {result.error}", file=sys.stderr)
        return 1
    print(f"injected {result.length} characters (digest {result.digest})")
    return 0


def run_recycle(args: argparse.Namespace) -> int:
    from loomtui import actions

    from loomtui.cli.actor import of_cli, source_of

    ctx = context(args)
    outcome = actions.recycle(ctx, args.mode, source=source_of(args), reason=args.reason, actor=of_cli(ctx, args))
    print(outcome.describe(), file=sys.stdout if outcome.ok else sys.stderr)
    return 0 if outcome.ok else 1
