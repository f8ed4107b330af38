"""`loom` cold start beside `python -c pass`, measured in the same run with the same interpreter.

Each command runs to its end against an empty state dir and no tmux server, so the work after
its imports is small (one store lookup for `resolve`, a tmux call that finds no server for
`status`, an injection that finds no pane for `canary`): the figure is an upper bound on the time
to reach its first line of work. Target: <= 7x `python -c pass` for status, resolve and canary.

Then where the time goes: the import of each heavy dependency alone, beside the same anchor.

Each figure is the best of N runs, interleaved with the anchor's runs: start-up time is a
floor plus whatever else the machine is doing, and the best run is the floor (medians are
printed too).
"""

from __future__ import annotations

import os
import sys
import tempfile

from _common import ROOT, machine, median, ratio_line, run_wall

N = 15
COMMANDS = [("--help", None), ("status", 7), ("resolve 1 --note x", 7), ("canary", 7), ("queue", None)]
IMPORTS = ["loomtui.config", "libtmux", "psutil", "watchfiles", "loomtui.report.status",
           "loomtui.actions", "telegram", "textual.app"]


def main() -> int:
    print(f"machine: {machine()}")
    state = tempfile.mkdtemp(prefix="loom-bench-cli-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
    env.update(LOOM_STATE_DIR=state, PYTHONPATH=str(ROOT), HOME=state)
    py = sys.executable
    kwargs = {"env": env, "cwd": ROOT}
    run_wall([py, "-m", "loomtui", "status"], 1, **kwargs)  # the state dir made, the .pyc files written

    def paired(argv: list[str], n: int) -> tuple[list[float], list[float]]:
        figure, anchor = [], []
        for _ in range(n):
            anchor += run_wall([py, "-c", "pass"], 1, **kwargs)
            figure += run_wall(argv, 1, **kwargs)
        return figure, anchor

    for command, target in COMMANDS:
        figure, anchor = paired([py, "-m", "loomtui", *command.split()], N)
        print(ratio_line(f"loom {command}", min(figure), "python -c pass", min(anchor), target=target)
              + f"   (medians {median(figure) * 1000:.0f} / {median(anchor) * 1000:.0f} ms)")
    print("where the time goes (each import alone, interpreter start included):")
    for module in IMPORTS:
        figure, anchor = paired([py, "-c", f"import {module}"], 7)
        print(ratio_line(f"  import {module}", min(figure), "python -c pass", min(anchor)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
