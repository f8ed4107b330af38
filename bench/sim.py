"""`loom sim` speed: 20 seeds x 30 simulated days of `storm` (the issue's must-show test) against
its 60 s target on a 2-core machine, once in one process and once spread over the cores, beside
an anchor measured in the same run: 1,000,000 `dataclasses.replace` calls on a small frozen
dataclass (the watchdog's memory of earlier looks is one; the rules call it every tick).

Then where the time goes (the share of the real rules the simulator drives, per call) and the
issue's second target, 1,000 seeds x 90 days of `calm` in 30 minutes, estimated from one seed
(running it here would take the better part of an hour).

Wall-clock figures: on a busy machine they grow, and the anchor with them.
"""

from __future__ import annotations

import os
import statistics
import time
from collections import Counter
from dataclasses import dataclass, replace

from _common import bound_line, machine, ratio_line

from loomtui.sim import simulate, simulate_many

SEEDS = range(1, 21)
DAYS = 30.0
TARGET = 60.0
BIG_SEEDS, BIG_DAYS, BIG_TARGET = 1000, 90.0, 30 * 60.0


@dataclass(frozen=True)
class Memory:
    gone: int = 0
    missing: int = 0
    since: float | None = None
    ambiguous: bool = False


def anchor() -> float:
    """Seconds for 1,000,000 dataclasses.replace calls (best of two)."""
    best = float("inf")
    for _ in range(2):
        m = Memory()
        start = time.perf_counter()
        for i in range(1_000_000):
            m = replace(m, gone=i)
        best = min(best, time.perf_counter() - start)
    return best


def one(seed: int, days: float = DAYS, profile: str = "storm") -> tuple[dict, float]:
    start = time.perf_counter()
    run = simulate(seed, days, profile)
    return run, time.perf_counter() - start


def storm(workers: int) -> tuple[float, list[tuple[dict, float]]]:
    start = time.perf_counter()
    if workers == 1:
        results = [one(seed) for seed in SEEDS]
    else:  # as `loom sim --seeds` would with simulate_many; per-seed times are not known then
        results = [(run, float("nan")) for run in simulate_many(list(SEEDS), DAYS, "storm", workers=workers)]
    return time.perf_counter() - start, results


def rules_share() -> list[str]:
    """One storm seed with the rules the simulator drives timed: what the rest of the sim costs."""
    from loomtui.agent import policy, watchdog_rules
    from loomtui.canary import rules as canary_rules
    from loomtui.sentinel import queue_rules

    spent: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    real = {}
    for module, name in ((policy, "decide"), (watchdog_rules, "assess"), (canary_rules, "should_recycle"),
                         (canary_rules, "due_in"), (queue_rules, "decide"), (queue_rules, "review")):
        label = f"{module.__name__.removeprefix('loomtui.')}.{name}"
        real[(module, name)] = fn = getattr(module, name)

        def timed(*args, _fn=fn, _label=label, **kwargs):
            t = time.perf_counter()
            try:
                return _fn(*args, **kwargs)
            finally:
                spent[_label] += time.perf_counter() - t
                calls[_label] += 1

        setattr(module, name, timed)
    try:
        _, total = one(SEEDS[0])
    finally:
        for (module, name), fn in real.items():
            setattr(module, name, fn)
    lines = [f"  where one storm seed's {total:.2f} s go (timing wrappers included):"]
    for label, seconds in spent.most_common():
        lines.append(f"    {label:<30} {seconds:6.2f} s  {100 * seconds / total:5.1f} %  "
                     f"{calls[label]:>7} calls  {1e6 * seconds / calls[label]:7.1f} us/call")
    rest = total - sum(spent.values())
    lines.append(f"    {'the simulator itself':<30} {rest:6.2f} s  {100 * rest / total:5.1f} %")
    return lines


def main() -> int:
    print(f"machine: {machine()}")
    cores = min(2, os.cpu_count() or 1)
    before = anchor()
    one_process, runs = storm(1)
    spread, runs_spread = storm(cores) if cores > 1 else (one_process, runs)
    after = anchor()
    base = min(before, after)
    label = "1e6 dataclasses.replace"
    violations = sum(r["violation"] is not None for r, _ in runs)
    same = [r for r, _ in runs] == [r for r, _ in runs_spread]
    steps = sum(r["steps"] for r, _ in runs)
    per_seed = statistics.median(s for _, s in runs)
    print(f"20 seeds x {DAYS:g} days of storm: {violations} violations, {steps:,} steps "
          f"({steps / one_process:,.0f} steps/s in one process), the same runs spread over {cores} "
          f"processes: {'yes' if same else 'NO'}")
    print(bound_line("20 x 30 d storm, one process", one_process, TARGET, anchor=(label, base)))
    print(bound_line(f"20 x 30 d storm, {cores} processes", spread, TARGET, anchor=(label, base)))
    print(ratio_line("  one 30 d storm seed (median)", per_seed, label, base))
    for line in rules_share():
        print(line)
    calm_run, calm = one(1, BIG_DAYS, "calm")
    estimate = calm * BIG_SEEDS / cores
    print(ratio_line(f"one {BIG_DAYS:g} d calm seed ({calm_run['steps']:,} steps)", calm, label, base))
    print(bound_line(f"{BIG_SEEDS} x {BIG_DAYS:g} d calm on {cores} cores (estimate)", estimate, BIG_TARGET,
                     anchor=(label, base)))
    return 1 if violations or not same else 0


if __name__ == "__main__":
    raise SystemExit(main())
