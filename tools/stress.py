"""Run a command while one CPU-bound process per core runs beside it: a busy machine is a normal one.

    python tools/stress.py [--hogs N] -- COMMAND ...

Exits with the command's status. The hogs are ended by pid whatever happens to the command.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys

HOG = "while True:\n    pass\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stress", description=__doc__.split("\n\n")[0])
    parser.add_argument("--hogs", type=int, default=os.cpu_count() or 1, help="CPU-bound processes (default: one per core)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("a command to run is required after --")
    hogs = [subprocess.Popen([sys.executable, "-c", HOG], stdin=subprocess.DEVNULL) for _ in range(args.hogs)]
    print(f"stress: {len(hogs)} CPU-bound processes beside: {' '.join(command)}", flush=True)
    try:
        return subprocess.call(command)
    except KeyboardInterrupt:
        return 130
    finally:
        for hog in hogs:
            hog.send_signal(signal.SIGKILL)
        for hog in hogs:
            hog.wait()


if __name__ == "__main__":
    raise SystemExit(main())
