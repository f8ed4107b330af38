"""A long storm run (hundreds of seeds x 30 days: hours of CPU) spread over sessions: each seed's
result is appended to a JSON-lines file as it ends, and the seeds already in the file are skipped,
so a run stopped anywhere goes on where it stopped.

    python tools/campaign.py --config C --seeds 1-200 --days 30 --out docs/evidence/NAME.jsonl [--workers 1]

Each line names the commit the seed ran on (`git describe --always --dirty`): a seed that ran on
another simulator than the others is told apart, never mixed in silently. At the end (or with
--summary alone) it prints what the file holds: seeds done, violations (seed, invariant), false
recycles, automatic relaunches, steps, CPU.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loomtui.config import load_config  # noqa: E402
from loomtui.sim import simulate  # noqa: E402
from loomtui.sim.report import hearing_sum, hearing_text  # noqa: E402
from loomtui.sim.report import summary as summary_of  # noqa: E402


def seed_range(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def commit() -> str:
    out = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty", "--abbrev=12"],
                         capture_output=True, text=True, check=False)
    return out.stdout.strip() or "unknown"


def done(out: Path, days: float) -> dict[int, dict[str, Any]]:
    """The seeds the file holds for these days (a truncated last line, from a killed run, is dropped)."""
    held: dict[int, dict[str, Any]] = {}
    if out.exists():
        for line in out.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if row.get("days") == days:
                held[row["seed"]] = row
    return held


def one(seed: int, days: float, profile: str, config_path: str | None) -> dict[str, Any]:
    config = load_config(config_path)[0] if config_path else None
    cpu = time.process_time()
    report = simulate(seed, days, profile, config)
    violation = report["violation"]
    return {
        "seed": seed, "days": days, "profile": profile,
        "violation": None if violation is None else {k: violation[k] for k in ("invariant", "message", "step", "t")},
        "false_recycles": report["false_recycles"],
        "hearing_recycles": report["hearing_recycles"],
        "automatic_relaunches": summary_of([report])["automatic_relaunches"],
        "steps": report["steps"], "cpu_s": round(time.process_time() - cpu, 1),
    }


def fingerprint(profile: str, config_path: str | None) -> str:
    """What the simulator does with this config, in one hash: two short runs' whole reports. Two
    commits with the same fingerprint run a seed alike (as far as two seeds of two days can say)."""
    config = load_config(config_path)[0] if config_path else None
    digest = hashlib.sha256()
    for seed in (1, 2):
        digest.update(json.dumps(simulate(seed, 2.0, profile, config), sort_keys=True).encode())
    return digest.hexdigest()[:16]


def summary(rows: dict[int, dict[str, Any]]) -> str:
    bad = [(s, r["violation"]) for s, r in sorted(rows.items()) if r["violation"] is not None]
    commits = sorted({r["commit"] for r in rows.values()})
    lines = [
        f"seeds done: {len(rows)} ({_spans(sorted(rows))}), on {', '.join(commits)}",
        f"violations: {len(bad)}" + "".join(f"\n  seed {s}: {json.dumps(v)[:300]}" for s, v in bad),
        f"false recycles: {sum(r['false_recycles'] for r in rows.values())}",
        "recycled while it could hear, by design: " + _hearing(rows),
        f"automatic relaunches: {sum(r['automatic_relaunches'] for r in rows.values()):,}",
        f"steps: {sum(r['steps'] for r in rows.values()):,}; CPU: {sum(r['cpu_s'] for r in rows.values()) / 3600:.1f} h",
    ]
    return "\n".join(lines)


def _hearing(rows: dict[int, dict[str, Any]]) -> str:
    """hearing_recycles summed, on the lines that count them (lines before 2026-12-07 do not)."""
    counted = [r for r in rows.values() if "hearing_recycles" in r]
    said = hearing_text(hearing_sum(counted))
    return said if len(counted) == len(rows) else f"{said} (counted on {len(counted)} of {len(rows)} seeds)"


def _spans(seeds: list[int]) -> str:
    spans: list[str] = []
    for s in seeds:
        if spans and int(spans[-1].split("-")[-1]) == s - 1:
            spans[-1] = f"{spans[-1].split('-')[0]}-{s}"
        else:
            spans.append(str(s))
    return ", ".join(spans)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    parser.add_argument("--seeds", default="1-200")
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--profile", default="storm")
    parser.add_argument("--out")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--summary", action="store_true", help="print what the file holds and stop")
    parser.add_argument("--fingerprint", action="store_true",
                        help="print a hash of the reports of seeds 1-2 for 2 days and stop: a file run on "
                             "at another commit goes on only where its fingerprint is the one its lines ran on")
    args = parser.parse_args()
    if args.fingerprint:
        print(fingerprint(args.profile, args.config))
        return 0
    if not args.out:
        parser.error("--out is required (the .jsonl file of the seeds' lines)")
    out = Path(args.out)
    rows = done(out, args.days)
    if not args.summary:
        out.parent.mkdir(parents=True, exist_ok=True)
        todo = [s for s in seed_range(args.seeds) if s not in rows]
        made_by = commit()
        with ProcessPoolExecutor(max(1, args.workers)) as pool, out.open("a") as sink:
            futures = {pool.submit(one, s, args.days, args.profile, args.config): s for s in todo}
            for future in as_completed(futures):
                row = {**future.result(), "commit": made_by}
                sink.write(json.dumps(row, sort_keys=True) + "\n")
                sink.flush()
                os.fsync(sink.fileno())
                rows[row["seed"]] = row
                print(f"seed {row['seed']}: {'ok' if row['violation'] is None else row['violation']}"
                      f" ({row['cpu_s']} s CPU)", flush=True)
    print(summary(rows))
    return 1 if any(r["violation"] is not None for r in rows.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
