"""`loom sim [--days N] [--seed S] [--seeds K] [--profile calm|clockjump|incident|storm] [--config P]
[--agent NAME] [--json]`.

Exit 0 when every invariant held (and, for `incident`, every scenario ended as DESIGN.md says) on
every seed, 1 when one did not: the report then names the seed, the step, the trace that led there
and the command that replays it.
"""

from __future__ import annotations

import argparse
from typing import Any

from loomtui.cli.common import choose_agent, print_json, subcommand
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
    parser.add_argument("--agent", metavar="NAME", default=None,
                        help="with several agents in the config, simulate this one's settings (default: the first)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def config_for(args: argparse.Namespace) -> tuple[Any, str | None, str | None]:
    """The config `loom` itself would read (--config, LOOM_CONFIG, or the default file when there
    is one), else the sim's defaults;
    with several agents, the view of the one --agent (or LOOM_AGENT) names, else the first's. The
    agent's name comes back only when there are several, for the replay command."""
    from loomtui.sim.profiles import default_config

    path, explicit = find_config_path(getattr(args, "config", None))
    explicit = explicit or path.is_file()  # the operator's, found where loom looks: simulated, and said
    config = default_config() if not explicit else load_config(getattr(args, "config", None))[0]  # bad: exit 2
    named = choose_agent(config.agent_names, getattr(args, "agent", None), required=False)
    if named is not None and named != config.agent_name:
        config = config.for_agent(named)
    return config, (str(path) if explicit else None), (config.agent_name if len(config.agents) > 1 else None)


def run(args: argparse.Namespace) -> int:
    from loomtui.sim import report

    config, source, agent = config_for(args)
    seeds = list(range(args.seed, args.seed + args.seeds))
    if args.profile == "incident":
        return _incident(args, seeds, source)
    from loomtui.sim import simulate_many

    runs = simulate_many(seeds, args.days, args.profile, config)
    failed = [r["seed"] for r in runs if r["violation"] is not None]
    if args.json:
        print_json({"schema": report.SCHEMA, "profile": args.profile, "days": args.days, "config": source,
                    "agent": agent, "seeds": seeds, "runs": runs, "summary": report.summary(runs)})
        return 1 if failed else 0
    print(f"loom sim: profile {args.profile}, {args.days:g} days, seeds {seeds[0]}..{seeds[-1]}, "
          f"config {source or '(loom sim defaults)'}" + (f", agent {agent}" if agent else ""))
    where = {"profile": args.profile, "days": args.days, "config": source, "agent": agent}
    if len(runs) == 1:
        print("\n".join(report.text(runs[0], **where)))
    else:
        for r in runs:
            print(report.one_line(r) if r["violation"] is None else "\n".join(report.text(r, **where)))
        print("\n".join(report.summary_text(report.summary(runs))))
        if failed:
            print(f"first failing seed {failed[0]}: replay with "
                  + report.replay_command(args.profile, failed[0], args.days, source, agent))
    return 1 if failed else 0


def _incident(args: argparse.Namespace, seeds: list[int], source: str | None) -> int:
    """The nine scenarios on each seed: per seed the scenarios' endings, 1 when one ended otherwise,
    naming the first seed it did with the command that replays it."""
    from loomtui.sim import report
    from loomtui.sim.scenarios import SCENARIOS, run_scenario

    by_seed = [(seed, [run_scenario(sc, seed) for sc in SCENARIOS]) for seed in seeds]
    failed = [seed for seed, results in by_seed if not all(r["passed"] for r in results)]
    if args.json:
        every = [{"seed": seed, **r} for seed, results in by_seed for r in results]
        print_json({"schema": report.SCHEMA, "profile": "incident", "seed": seeds[0], "seeds": seeds,
                    "scenarios": every, "passed": sum(r["passed"] for r in every),
                    "failed": sum(not r["passed"] for r in every), "failed_seeds": failed})
        return 1 if failed else 0
    if source:
        print(f"loom sim: the incident profile replays its own scripted world; --config {source} is not used")
    if len(seeds) == 1:
        print(f"loom sim: profile incident, seed {seeds[0]}: the nine incidents of DESIGN.md")
    else:
        print(f"loom sim: profile incident, seeds {seeds[0]}..{seeds[-1]}: the nine incidents of DESIGN.md on each")
    for seed, results in by_seed:
        if len(seeds) > 1 and seed not in failed:
            print(f"seed {seed}: {len(results)} of {len(results)} incidents end as DESIGN.md says")
            continue
        if len(seeds) > 1:
            print(f"seed {seed}:")
        for i, (sc, r) in enumerate(zip(SCENARIOS, results), 1):
            if len(seeds) > 1 and r["passed"]:
                continue
            mark = "ok  " if r["passed"] else "FAIL"
            print(f"{mark} {i}. {sc.name}: {r['outcome']} (expected {sc.expect})")
            if not r["passed"]:
                print("\n".join("     " + line for line in report.text(r["run"], profile="incident",
                                                                         days=sc.hours / 24.0, config=None)))
        print(f"{sum(r['passed'] for r in results)} of {len(results)} incidents end as DESIGN.md says"
              + (f" on seed {seed}" if len(seeds) > 1 else ""))
    if len(seeds) > 1:
        print(f"{len(seeds)} seeds: " + ("every incident ended as DESIGN.md says on each" if not failed else
              f"{len(failed)} with an incident that did not (seeds {', '.join(map(str, failed))})"))
    if failed:
        print(f"first failing seed {failed[0]}: replay with {report.replay_command('incident', failed[0], 0, None)}")
    return 1 if failed else 0
