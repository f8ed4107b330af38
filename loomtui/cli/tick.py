"""`loom tick watchdog|canary|sentinel|notify`: exactly one tick, for cron, launchd or a systemd timer."""

from __future__ import annotations

import argparse
import sys

from loomtui.cli.common import add_agent_option, base_context, context, print_json, subcommand

LOOPS = ("watchdog", "canary", "sentinel", "notify")
AGENT_LOOPS = ("watchdog", "canary")  # the sentinel and the sender serve every agent at once


def register(sub) -> None:
    parser = subcommand(sub, "tick", "run exactly one tick of one loop, as `loom supervise` would "
                                     "(exit 0 ran, 1 failed, 74 the store is unusable, 75 another tick of that loop was running)")
    parser.add_argument("loop", choices=LOOPS)
    parser.add_argument("--source", default="cron", choices=("cron", "cli"),
                        help="who fired it, for the loop KPIs (default: cron)")
    parser.add_argument("--json", action="store_true")
    add_agent_option(parser, "whose watchdog or canary (default: the only agent, or LOOM_AGENT)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from loomtui.daemon.logs import setup_logging
    from loomtui.daemon.oneshot import tick_once

    # The daemon's handlers: scrubbed of secrets, HTTP noise quieted. Without them the libraries'
    # warnings reached cron's stderr through Python's last-resort handler, as they were: an error
    # page that echoed the request's path printed the bot token.
    setup_logging("WARNING")
    ctx = context(args) if args.loop in AGENT_LOOPS else base_context(args)
    outcome = tick_once(ctx, args.loop, source=args.source)
    if args.json:
        print_json({"loop": outcome.loop, "status": outcome.status, "line": outcome.line,
                    "seconds": round(outcome.seconds, 3), "exit_code": outcome.exit_code})
    else:
        print(f"{outcome.loop}: {outcome.status}: {outcome.line}",
              file=sys.stdout if outcome.status == "ran" else sys.stderr)
    return outcome.exit_code
