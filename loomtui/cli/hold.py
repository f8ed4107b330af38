"""`loom hold [--for 30m] --reason TEXT` and `loom release`: pause Loom's own hands, not its eyes."""

from __future__ import annotations

import argparse
import sys

from loomtui.cli.common import context, print_json, subcommand
from loomtui.text import printable


def _duration(text: str) -> float:
    from loomtui.durations import parse_duration

    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"a hold must last longer than 0s, not {text!r}")
    return seconds


def register(sub) -> None:
    hold = subcommand(sub, "hold", "suspend automatic relaunches, reaps, modal dismissals and nudges "
                                   "(observation, probes on request and recording go on)", agent=True)
    hold.add_argument("--for", dest="duration", type=_duration, metavar="DURATION",
                      help="end the hold by itself after this long (30m, 2h); default: until `loom release`")
    hold.add_argument("--reason", required=True, help="why (shown in the header, `loom status` and the ledger)")
    hold.add_argument("--json", action="store_true")
    hold.set_defaults(func=run_hold)
    release = subcommand(sub, "release", "end the hold in force (the operator's or the ceiling's)", agent=True)
    release.add_argument("--json", action="store_true")
    release.set_defaults(func=run_release)


def run_hold(args: argparse.Namespace) -> int:
    from loomtui import actions

    reason = " ".join(args.reason.split())
    if not reason:
        print("loom: hold: --reason must say why", file=sys.stderr)
        return 2
    from loomtui.cli.actor import of_cli, source_of

    ctx = context(args)
    result = actions.hold(ctx, reason, args.duration, source=source_of(args), actor=of_cli(ctx, args))
    if args.json:
        print_json(result.as_json())
    else:
        print(printable(result.describe()))
    return 0


def run_release(args: argparse.Namespace) -> int:
    from loomtui import actions

    from loomtui.cli.actor import of_cli, source_of

    ctx = context(args)
    result = actions.release(ctx, source=source_of(args), actor=of_cli(ctx, args))
    if args.json:
        print_json(result.as_json())
    else:
        print(printable(result.describe()), file=sys.stdout if result.released else sys.stderr)
    return 0 if result.released else 1
