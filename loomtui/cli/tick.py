"""`loom tick watchdog|canary|sentinel|notify`: exactly one tick, for cron, launchd or a systemd timer."""

from __future__ import annotations

import argparse
import sys

from loomtui.cli.common import context, print_json, subcommand

LOOPS = ("watchdog", "canary", "sentinel", "notify")


def register(sub) -> None:
    parser = subcommand(sub, "tick", "run exactly one tick of one loop, as `loom supervise` would "
                                     "(exit 0 ran, 1 failed, 75 another tick of that loop was running)")
    parser.add_argument("loop", choices=LOOPS)
    parser.add_argument("--source", default="cron", choices=("cron", "cli"),
                        help="who fired it, for the loop KPIs (default: cron)")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from loomtui.daemon.oneshot import tick_once

    outcome = tick_once(context(args), args.loop, source=args.source)
    if args.json:
        print_json({"loop": outcome.loop, "status": outcome.status, "line": outcome.line,
                    "seconds": round(outcome.seconds, 3), "exit_code": outcome.exit_code})
    else:
        print(f"{outcome.loop}: {outcome.status}: {outcome.line}",
              file=sys.stdout if outcome.status == "ran" else sys.stderr)
    return outcome.exit_code
