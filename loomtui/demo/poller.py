"""A stand-in for an agent's Telegram poller: a process whose command line names its bot.

In the agent's tree it exits when its parent does; a foreign one (started outside the tree, as a
leaked poller would be) lives until it is killed or its `--max-life` runs out, so a test that
fails cannot leave one behind for long.
"""

from __future__ import annotations

import argparse
import os
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="loomtui.demo.poller")
    parser.add_argument("--bot", required=True)
    parser.add_argument("--parent", type=int, default=0, help="exit when this process is no longer our parent")
    parser.add_argument("--max-life", type=float, default=3600.0)
    parser.add_argument("--pidfile", default="")
    args = parser.parse_args(argv)
    if args.pidfile:
        with open(args.pidfile, "w") as fh:
            fh.write(str(os.getpid()))
    deadline = time.monotonic() + args.max_life
    while time.monotonic() < deadline:
        if args.parent and os.getppid() != args.parent:
            return 0
        time.sleep(0.2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
