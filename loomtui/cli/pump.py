"""`loom pump [--state-dir DIR] -- CMD ARGS...`: run a stream-json agent CLI in this terminal and
own its message pump (docs/STREAM.md). Exits with the CLI's exit status.

The state dir comes from --state-dir or LOOM_STATE_DIR: the pump reads no config (it must start
fast, and the driver that launches it names the dir).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from loomtui.errors import LoomError

HELP = "run a stream-json agent CLI in this pane: its transcript, queue and injection socket"


def register(sub: Any) -> None:
    parser = sub.add_parser("pump", help=HELP, description=HELP,
                            usage="loom pump [--state-dir DIR] -- CMD ARGS...")
    # Not common.subcommand: a config is never read here, and `loom --state-dir D pump` must keep D.
    parser.add_argument("--state-dir", metavar="PATH", default=argparse.SUPPRESS,
                        help="state directory (also LOOM_STATE_DIR)")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...",
                        help="the agent CLI and its arguments (run directly, never through a shell)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from loomtui.pump.runner import Pump

    argv = list(args.command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise LoomError("loom pump: no command given (loom pump [--state-dir DIR] -- CMD ARGS...)", 2)
    state_dir = getattr(args, "state_dir", None) or os.environ.get("LOOM_STATE_DIR")
    if not state_dir:
        raise LoomError("loom pump: no state dir (give --state-dir DIR or set LOOM_STATE_DIR)", 2)
    return Pump(Path(os.path.expanduser(state_dir)).absolute(), argv).run()
