"""`loom sim [--days N] [--seed S] [--seeds K] [--profile calm|clockjump|incident|storm] [--config P] [--json]`.

Exit 0 when every invariant held (and, for `incident`, every scenario ended as DESIGN.md says),
1 when one did not: the report then names the seed, the step and the trace that led there.
"""

from __future__ import annotations

import argparse
from typing import Any

from loomtui.cli.common import print_json, subcommand
from loomtui.config import find_config_path, load_config

PROFILES = ("calm", "clockjump", "incident", "storm")
MAX_DAYS = 3650.0


def _days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of days, got {text!r}") from None
    if not 0 < value <= MAX_DAYS:
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most {MAX_DAYS:g}, got {text}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def _seed(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def register(sub: Any) -> None:
    parser = subcommand(sub, "sim", "simulate months of faults in seconds against Loom's real rules")
    parser.add_argument("--days", type=_days, default=30.0, help="simulated days per seed (default 30)")
    parser.add_argument("--seed", type=_seed, default=1, help="the first seed (default 1)")
    parser.add_argument("--seeds", type=_count, default=1, help="run seeds S..S+K-1 and summarise (default 1)")
    parser.add_argument("--profile", choices=PROFILES, default="calm",
                        help="calm: rare faults; storm: faults every few minutes; clockjump: faults and a wall "
                             "clock stepped a day forward or back; incident: DESIGN.md's nine")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def config_for(args: argparse.Namespace) -> tuple[Any, str | None]:
    """The operator's config when one is named (--config or LOOM_CONFIG), else the sim's defaults."""
    from loomtui.sim.profiles import default_config

    path, explicit = find_config_path(getattr(args, "config", None))
    if not explicit:
        return default_config(), None
    config, _ = load_config(getattr(args, "config", None))  # a bad file raises ConfigError: exit 2
    return config, str(path)


def run(args: argparse.Namespace) -> int:
    from loomtui.sim import report

    config, source = config_for(args)
    if args.profile == "incident":
        return _incident(args, source)
    from loomtui.sim import simulate_many

    seeds = list(range(args.seed, args.seed + args.seeds))
    runs = simulate_many(seeds, args.days, args.profile, config)
    failed = [r["seed"] for r in runs if r["violation"] is not None]
    if args.json:
        print_json({"schema": report.SCHEMA, "profile": args.profile, "days": args.days, "config": source,
                    "seeds": seeds, "runs": runs, "summary": report.summary(runs)})
        return 1 if failed else 0
    print(f"loom sim: profile {args.profile}, {args.days:g} days, seeds {seeds[0]}..{seeds[-1]}, "
          f"config {source or '(loom sim defaults)'}")
    if len(runs) == 1:
        print("\n".join(report.text(runs[0], profile=args.profile, days=args.days, config=source)))
    else:
        for r in runs:
            if r["violation"] is None:
                print(report.one_line(r))
            else:
                print("\n".join(report.text(r, profile=args.profile, days=args.days, config=source)))
        print("\n".join(report.summary_text(report.summary(runs))))
    return 1 if failed else 0


def _incident(args: argparse.Namespace, source: str | None) -> int:
    from loomtui.sim import report
    from loomtui.sim.scenarios import SCENARIOS, run_scenario

    results = [run_scenario(sc, args.seed) for sc in SCENARIOS]
    ok = all(r["passed"] for r in results)
    if args.json:
        print_json({"schema": report.SCHEMA, "profile": "incident", "seed": args.seed, "scenarios": results,
                    "passed": sum(r["passed"] for r in results), "failed": sum(not r["passed"] for r in results)})
        return 0 if ok else 1
    if source:
        print(f"loom sim: the incident profile replays its own scripted world; --config {source} is not used")
    print(f"loom sim: profile incident, seed {args.seed}: the nine incidents of DESIGN.md")
    for i, (sc, r) in enumerate(zip(SCENARIOS, results), 1):
        mark = "ok  " if r["passed"] else "FAIL"
        print(f"{mark} {i}. {sc.name}: {r['outcome']} (expected {sc.expect})")
        if not r["passed"]:
            print("\n".join("     " + line for line in report.text(r["run"], profile="incident",
                                                                     days=sc.hours / 24.0, config=None)))
    print(f"{sum(r['passed'] for r in results)} of {len(results)} incidents end as DESIGN.md says")
    return 0 if ok else 1
