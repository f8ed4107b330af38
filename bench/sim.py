"""`loom sim` speed with Loom's real code (issue 25: storm, 20 seeds x 30 days with the defaults,
<= 60 s on 2 cores), beside its anchor measured in the same run: the copy-based simulator it
replaced (commit a6e2556, `sim/shell.py`), extracted from git and run on the same seeds and days.

    python bench/sim.py [--seeds 20] [--days 30]

The figure is what the real code costs over a copy of it: the simulated threads, the real store
(SQLite on disk, a temporary state dir per seed), the real probe and lock files. Wall-clock figures:
on a busy machine they grow, and the anchor with them.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, bound_line, machine

from loomtui.sim import simulate_many

COPY_BASED = "a6e2556"  # the last commit whose simulator mirrored the daemon (sim/shell.py)
TARGET = 60.0

RUN = """
import sys, time
# The copy under sys.path[0], not the checkout an editable install's finder points at.
sys.meta_path = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "") + repr(f)]
sys.path.insert(0, sys.argv[4])
from loomtui.sim import simulate_many
assert "/loom-bench-sim-" in __import__("loomtui").__file__, __import__("loomtui").__file__
seeds = list(range(1, int(sys.argv[1]) + 1))
start = time.perf_counter()
runs = simulate_many(seeds, float(sys.argv[2]), "storm", workers=int(sys.argv[3]))
print(time.perf_counter() - start, sum(r["violation"] is not None for r in runs), sum(r["steps"] for r in runs))
"""


def copy_based(seeds: int, days: float, workers: int) -> tuple[float, int, int] | None:
    """(seconds, violations, steps) of the copy-based simulator, or None when git cannot give it."""
    with tempfile.TemporaryDirectory(prefix="loom-bench-sim-") as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", COPY_BASED, "loomtui"],
                                 capture_output=True, timeout=120)
        if archive.returncode != 0:
            return None
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True, timeout=120)
        out = subprocess.run([sys.executable, "-c", RUN, str(seeds), str(days), str(workers), tmp],
                             capture_output=True, text=True, timeout=6 * 3600)
        if out.returncode != 0:
            return None
        seconds, violations, steps = out.stdout.split()
        return float(seconds), int(violations), int(steps)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--days", type=float, default=30.0)
    args = parser.parse_args()
    cores = min(2, os.cpu_count() or 1)
    print(f"machine: {machine()}")
    anchor = copy_based(args.seeds, args.days, cores)
    start = time.perf_counter()
    runs = simulate_many(list(range(1, args.seeds + 1)), args.days, "storm", workers=cores)
    real = time.perf_counter() - start
    violations = sum(r["violation"] is not None for r in runs)
    steps = sum(r["steps"] for r in runs)
    what = f"{args.seeds} x {args.days:g} d storm, real code, {cores} processes"
    print(f"{what}: {violations} violations, {steps:,} steps ({steps / real:,.0f} steps/s)")
    # The target is for 20 seeds x 30 days; a smaller run is scaled to it (seed-days cost alike).
    scale = (20 * 30.0) / (args.seeds * args.days)
    goal = "20 x 30 d storm" + ("" if scale == 1 else f" (estimated from {args.seeds} x {args.days:g} d)")
    if anchor is None:
        print(bound_line(goal, real * scale, TARGET))
    else:
        seconds, old_violations, old_steps = anchor
        print(f"copy-based sim ({COPY_BASED}), the same seeds and days: {old_violations} violations, {old_steps:,} steps, "
              f"{seconds:.2f} s")
        print(bound_line(goal, real * scale, TARGET, anchor=("copy-based", seconds * scale)))
    return 1 if violations else 0


if __name__ == "__main__":
    raise SystemExit(main())
