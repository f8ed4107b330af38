"""Print the mutation score of the last `mutmut run` (see `make mutants` and docs/TESTING.md).

Reads `mutmut results --all true` and prints killed / total per module, the pure rules' total
and the wired modules' (the code around the rules that `loom sim` runs: actions, recovery, holds,
the canary loop, the watchdog, the sentinel tick). A timeout counts as killed: the mutant made the
tests hang, and pytest-timeout or mutmut stopped them. "No tests" (no selected test runs the
mutated function) and "survived" count against the score.

Exits 1 when the pure rules' total is below --min (90 % by default), or when any one wired
module is below --wired-min (85 % by default: each is judged alone, so a well-tested module
cannot hide a poorly tested one). A run narrowed to some modules is judged on those.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

CAUGHT = {"killed", "timeout"}
# The wired modules, each held to --wired-min on its own; every other module is a pure rule.
WIRED = frozenset(("loomtui.actions", "loomtui.agent.recovery", "loomtui.agent.holds", "loomtui.canary.loop",
                   "loomtui.agent.watchdog", "loomtui.sentinel.tick"))


def results(mutmut: str) -> list[tuple[str, str]]:
    out = subprocess.run([mutmut, "results", "--all", "true"], capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and name:
            rows.append((name, status))
    return rows


def module(mutant: str) -> str:
    # loomtui.policy.x_decide__mutmut_3, loomtui.incidents.xǁIncidentǁduration__mutmut_5
    return mutant.split(".x")[0]


def score(counts: Counter[str]) -> tuple[int, int, float]:
    caught, n = sum(counts[s] for s in CAUGHT), sum(counts.values())
    return caught, n, 100 * caught / n if n else 100.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutmut", default=str(Path(sys.executable).with_name("mutmut")))
    parser.add_argument("--min", type=float, default=90.0, help="lowest acceptable total percent of the pure rules")
    parser.add_argument("--wired-min", type=float, default=85.0, help="lowest acceptable percent of each wired module")
    args = parser.parse_args()
    rows = results(args.mutmut)
    if not rows:
        print("no mutants: run `make mutants` first", file=sys.stderr)
        return 1
    per: dict[str, Counter[str]] = defaultdict(Counter)
    for name, status in rows:
        per[module(name)][status] += 1
    totals: dict[str, Counter[str]] = {"pure": Counter(), "wired": Counter()}
    low = []
    print(f"{'module':<30} {'kind':<6} {'killed':>7} {'total':>6} {'score':>7}   not killed")
    for mod in sorted(per):
        counts = per[mod]
        kind = "wired" if mod in WIRED else "pure"
        totals[kind].update(counts)
        caught, n, pct = score(counts)
        rest = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()) if k not in CAUGHT)
        if kind == "wired" and pct < args.wired_min:
            low.append(mod)
            rest = f"{rest}  (below {args.wired_min:g} %)".strip()
        print(f"{mod:<30} {kind:<6} {caught:>7} {n:>6} {pct:>6.1f}%   {rest}")
    ok = not low
    for kind, counts in totals.items():
        if not counts:
            continue
        caught, n, pct = score(counts)
        note = f"({counts['timeout']} timeouts counted as killed)"
        if kind == "pure":
            ok = ok and pct >= args.min
            note += f", at least {args.min:g} % in all"
        else:
            note += f", at least {args.wired_min:g} % each"
        print(f"{'total ' + kind:<30} {'':<6} {caught:>7} {n:>6} {pct:>6.1f}%   {note}")
    print("survivors: `.venv/bin/mutmut results`; one diff: `.venv/bin/mutmut show NAME`")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
