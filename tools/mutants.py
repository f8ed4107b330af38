"""Print the mutation score of the last `mutmut run` (see `make mutants` and docs/TESTING.md).

Reads `mutmut results --all true` and prints killed / total per module and in all. A timeout
counts as killed: the mutant made the tests hang, and pytest-timeout or mutmut stopped them.
"No tests" (no fast unit test runs the mutated function) and "survived" count against the score.
Exits 1 when the total is below --min (90 % by default).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

CAUGHT = {"killed", "timeout"}


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutmut", default=str(Path(sys.executable).with_name("mutmut")))
    parser.add_argument("--min", type=float, default=90.0, help="lowest acceptable total percent")
    args = parser.parse_args()
    rows = results(args.mutmut)
    if not rows:
        print("no mutants: run `make mutants` first", file=sys.stderr)
        return 1
    per: dict[str, Counter[str]] = defaultdict(Counter)
    for name, status in rows:
        per[module(name)][status] += 1
    total: Counter[str] = Counter()
    print(f"{'module':<24} {'killed':>7} {'total':>6} {'score':>7}   not killed")
    for mod in sorted(per):
        counts = per[mod]
        total.update(counts)
        caught, n = sum(counts[s] for s in CAUGHT), sum(counts.values())
        rest = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()) if k not in CAUGHT)
        print(f"{mod:<24} {caught:>7} {n:>6} {100 * caught / n:>6.1f}%   {rest}")
    caught, n = sum(total[s] for s in CAUGHT), sum(total.values())
    score = 100 * caught / n
    print(f"{'total':<24} {caught:>7} {n:>6} {score:>6.1f}%   ({total['timeout']} timeouts counted as killed)")
    print("survivors: `.venv/bin/mutmut results`; one diff: `.venv/bin/mutmut show NAME`")
    return 0 if score >= args.min else 1


if __name__ == "__main__":
    sys.exit(main())
